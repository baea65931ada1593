//! Deduplication at send ([`SendOptions::dedup_key`]): one transport call that checks
//! the key and stores the message, or names the message stored first; and its batch
//! ([`Bus::send_batch_deduplicated`]): one call for many messages, each with its key.

use crate::defaults;
use crate::transport::{unsupported, Deduplication};
use crate::{Bus, Capability, Command, Error, MessageId, Result, SendOptions, Sent};

fn no_dedup() -> Error {
    unsupported(Capability::Deduplication)
}

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
            window: options.dedup_window.unwrap_or(defaults::DEDUP_WINDOW),
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
                let dedup_sends = transport.extras().dedup.ok_or_else(no_dedup)?;
                dedup_sends.send_deduplicated(name, message, dedup).await
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

    /// Sends many commands, each with its own deduplication key (`dedup_keys[i]` for
    /// `commands[i]`) and the batch's other options (headers, trace id, deadline, due
    /// time, partition key, window), and says per command, in order, what was stored: a
    /// command whose key is held (by an earlier send, or by an earlier command of this
    /// batch) stores nothing and is reported as a duplicate of the first message. Each
    /// command is stored atomically with its key; the batch is not all or none (a
    /// partitioned queue spreads it over its partitions). A [`Sent`] stored reports the
    /// batch's trace id (its first message's). `options.dedup_key` must be unset.
    ///
    /// ```no_run
    /// # async fn demo<C: bus_core::Command>(bus: &bus_core::Bus, orders: &[C]) -> bus_core::Result<()> {
    /// # use bus_core::SendOptions;
    /// let keys = ["capture-41", "capture-42"];
    /// let sent = bus.send_batch_deduplicated(orders, &keys, &SendOptions::new()).await?;
    /// let stored = sent.iter().filter(|s| !s.duplicate).count();
    /// # Ok(()) }
    /// ```
    pub async fn send_batch_deduplicated<C: Command, K: AsRef<str> + Sync>(
        &self,
        commands: &[C],
        dedup_keys: &[K],
        options: &SendOptions,
    ) -> Result<Vec<Sent>> {
        if commands.len() != dedup_keys.len() {
            return Err(Error::Config(format!(
                "sending {} {}: {} deduplication keys, one per command wanted",
                commands.len(),
                C::NAME,
                dedup_keys.len()
            )));
        }
        if options.dedup_key.is_some() {
            return Err(Error::Config(format!(
                "sending {}: a batch takes one deduplication key per command, not SendOptions::dedup_key",
                C::NAME
            )));
        }
        let window = options.dedup_window.unwrap_or(defaults::DEDUP_WINDOW);
        let transport = self.transport();
        let produced = self
            .produce("send", commands, Some(options), |name, batch| async move {
                let messages = batch
                    .into_iter()
                    .zip(dedup_keys)
                    .map(|(message, key)| {
                        let dedup = Deduplication {
                            key: key.as_ref(),
                            window,
                            due: options.due,
                            partition: options.key.as_deref(),
                        };
                        (message, dedup)
                    })
                    .collect();
                let dedup_sends = transport.extras().dedup.ok_or_else(no_dedup)?;
                dedup_sends.send_deduplicated_batch(name, messages).await
            })
            .await?;
        let firsts = produced.out.unwrap_or_default();
        if firsts.len() != produced.ids.len() {
            return Err(Error::Config(format!(
                "sending {}: the transport answered {} of {} deduplicated sends",
                C::NAME,
                firsts.len(),
                produced.ids.len()
            )));
        }
        let trace_id = produced.trace_id;
        Ok(produced
            .ids
            .into_vec()
            .into_iter()
            .zip(firsts)
            .map(|(id, first): (MessageId, Option<MessageId>)| match first {
                Some(first) => Sent {
                    id: first,
                    trace_id: None,
                    duplicate: true,
                    copies: None,
                },
                None => Sent {
                    id,
                    trace_id: trace_id.clone(),
                    duplicate: false,
                    copies: None,
                },
            })
            .collect())
    }
}
