//! Deleting the attachments of dead letters an operator deleted. The `bus` tool, the
//! dashboard and `Management` have no attachment provider: the Redis script that deletes a
//! dead letter keeps its envelope in the queue's attachment orphans list when it carries an
//! attachment (docs/redis-layout.md, "Attachment orphans"), and an attachment-aware
//! process runs an [`OrphanCollector`] that pops them and releases their attachments.

use std::sync::Arc;
use std::time::Duration;

use bus_core::Envelope;
use bus_redis::admin::Admin;

use crate::{release_token, AttachmentProvider, AttachmentRef, Result};

/// Envelopes popped per orphans list per round.
const BATCH: usize = 100;

/// Pops the envelopes of deleted dead letters and releases their attachments: deleted,
/// or for an event's shared attachment, one copy fewer holding it. Run one in a process
/// that has the provider the senders store into (a host, say):
///
/// ```no_run
/// use std::sync::Arc;
///
/// use bus_attachments::{AttachmentProvider, OrphanCollector, RedisProvider};
/// use bus_redis::{admin::Admin, RedisTransport};
///
/// # async fn example(config: bus_redis::RedisConfig) -> Result<(), Box<dyn std::error::Error>> {
/// let provider: Arc<dyn AttachmentProvider> =
///     Arc::new(RedisProvider::new(config.connect_client().await?, "shop"));
/// let admin = Admin::new(RedisTransport::connect(&config).await?);
/// let collector = OrphanCollector::new(admin, provider.clone()).spawn(); // every minute
/// # collector.abort();
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct OrphanCollector {
    admin: Admin,
    provider: Arc<dyn AttachmentProvider>,
    interval: Duration,
}

impl OrphanCollector {
    /// Default interval between two rounds of [`spawn`](Self::spawn): one minute.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

    /// Over the queues of `admin`'s prefix, releasing into `provider` (the one the senders
    /// store into).
    pub fn new(admin: Admin, provider: Arc<dyn AttachmentProvider>) -> Self {
        OrphanCollector {
            admin,
            provider,
            interval: Self::DEFAULT_INTERVAL,
        }
    }

    /// The interval between two rounds of [`spawn`](Self::spawn).
    pub fn interval(mut self, every: Duration) -> Self {
        self.interval = every;
        self
    }

    /// One round: pops every orphans list until it is empty and releases each attachment.
    /// Returns how many attachments it released. An envelope that does not decode, or
    /// whose header is not an attachment (the script's byte search matched something
    /// else), is skipped; a release that fails leaves the attachment to its expiry.
    pub async fn collect(&self) -> Result<usize> {
        let mut released = 0;
        loop {
            let envelopes = self
                .admin
                .take_attachment_orphans(BATCH)
                .await
                .map_err(bus_core::Error::from)?;
            if envelopes.is_empty() {
                return Ok(released);
            }
            for envelope in envelopes {
                let Some(attachment) = attachment_of(&envelope) else {
                    continue;
                };
                match self.provider.release(&attachment, &release_token()).await {
                    Ok(_) => released += 1,
                    Err(error) => tracing::warn!(attachment = %attachment.id, %error,
                        "the attachment of a deleted dead letter was not released: it expires"),
                }
            }
        }
    }

    /// Runs [`collect`](Self::collect) now and then every interval, until the task is
    /// aborted; a failed round is logged and the next one tries again.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(self.interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if let Err(error) = self.collect().await {
                    tracing::warn!(%error, "collecting the attachments of deleted dead letters failed");
                }
            }
        })
    }
}

/// The attachment an orphan envelope refers to, if it decodes and has one.
fn attachment_of(envelope: &[u8]) -> Option<AttachmentRef> {
    let envelope = Envelope::decode(envelope).ok()?;
    AttachmentRef::from_headers(&envelope.headers)
        .ok()
        .flatten()
}
