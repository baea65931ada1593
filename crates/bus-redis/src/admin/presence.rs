//! [`Admin::presence`]: where a reserved message is now, by its receipt. Read only, one
//! script; what a workflow store asks to resolve a member's settle that a crash left
//! unconfirmed (bus-workflows, docs/redis-layout.md "Workflows").

use bus_core::transport::{Held, Receipt, Source};
use fred::types::Value;

use super::Admin;
use crate::{scripts, Result};

/// Where a reserved message is now ([`Admin::presence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Presence {
    /// Still held under that reservation.
    Held,
    /// Stored under another reservation, or ready, delayed or recovered: it runs again.
    Stored,
    /// A dead letter.
    Dead,
    /// Nowhere: acknowledged, or deleted by an operator.
    Gone,
}

impl Admin {
    /// Where the message that `receipt` reserved from `source` is now. A message that
    /// was reserved never moves without its reservation ending, so this tells an ack that
    /// was stored (gone) from one that was not (held, or stored again after its lock
    /// expired), and a dead letter.
    pub async fn presence(&self, source: &Source, receipt: &Receipt) -> Result<Presence> {
        let shards = self.transport.shard_keys(source);
        let keys = shards.get(usize::from(receipt.shard)).ok_or_else(|| {
            crate::Error::Config(format!("{source} has no shard {}", receipt.shard))
        })?;
        let (kind, key, count) = match &receipt.held {
            Held::Stored { key, delivery } => ("stored", key, *delivery),
            Held::Leased { lease, index } => ("leased", lease, *index),
        };
        let (lease, done) = keys.lease(&String::from_utf8_lossy(key));
        let script = &scripts::ADMIN_PRESENCE;
        let reply = script
            .call(
                self.client(),
                vec![
                    keys.msgs.clone(),
                    keys.deliveries.clone(),
                    keys.inflight.clone(),
                    keys.dead_info.clone(),
                    lease,
                    done,
                ],
                vec![
                    Value::from(kind),
                    Value::Bytes(key.clone()),
                    Value::from(i64::from(count)),
                ],
            )
            .await?;
        Ok(match reply.as_str().as_deref() {
            Some("held") => Presence::Held,
            Some("stored") => Presence::Stored,
            Some("dead") => Presence::Dead,
            Some("gone") => Presence::Gone,
            _ => return Err(script.unexpected(&reply)),
        })
    }
}
