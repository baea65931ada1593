//! Deduplication at send ([`SendOptions::dedup_key`]): one transport call that checks
//! the key and stores the message, or names the message stored first.

use crate::send::DEFAULT_DEDUP_WINDOW;
use crate::transport::Deduplication;
use crate::{Bus, Command, Result, SendOptions, Sent};

impl Bus {
    /// [`Bus::send_with`] for a send with a deduplication key.
    pub(crate) async fn send_deduplicated<C: Command>(
        &self,
        command: &C,
        options: &SendOptions,
        key: &str,
    ) -> Result<Sent> {
        let dedup = Deduplication {
            key,
            window: options.dedup_window.unwrap_or(DEFAULT_DEDUP_WINDOW),
            due: options.due,
            partition: options.key.as_deref(),
        };
        let transport = self.transport();
        let one = std::slice::from_ref(command);
        let produced = self
            .produce("send", one, Some(options), |name, batch| async move {
                let Some(message) = batch.into_iter().next() else {
                    return Ok(None);
                };
                transport.send_deduplicated(name, message, dedup).await
            })
            .await?;
        match produced.out.clone().flatten() {
            Some(first) => Ok(Sent {
                id: first,
                trace_id: None,
                duplicate: true,
                copies: None,
            }),
            None => Ok(produced.sent()),
        }
    }
}
