//! [`Fleet`]: every kind of queue in one Redis behind one set of operations, so the `bus`
//! tool, the dashboard and `bus metrics` serve the bus's own queues and other kinds
//! (BabelQueue's layouts) through one command table, one page and one endpoint.

use std::sync::Arc;

use bus_core::operator::{Operator, Purged, ReadyMessage, Requeued, Selection};
use bus_core::records::{DeadLetter, QueueStats};
use bus_core::transport::Source;

use crate::{parse_source, Error, Management, Result};

/// The kind name of the bus's own queues (`bus`).
pub const NATIVE: &str = bus_redis::admin::KIND;

/// A queue as the tools address it, read once: the bus's own `queue` or
/// `topic/subscription`, or `<kind>:<queue>` for a queue of another kind
/// (`babel:orders`, `laravel:orders`). A native name cannot hold `:`, so the two never
/// meet; `bus:orders` names the native queue too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    kind: Option<String>,
    name: String,
}

impl Address {
    /// Reads `queue`, `topic/subscription` or `<kind>:<queue>` (the kind is checked
    /// against a fleet when used).
    pub fn parse(text: &str) -> Self {
        match text.split_once(':') {
            Some((kind, name)) if kind != NATIVE => Address {
                kind: Some(kind.to_owned()),
                name: name.to_owned(),
            },
            Some((_, name)) => Address {
                kind: None,
                name: name.to_owned(),
            },
            None => Address {
                kind: None,
                name: text.to_owned(),
            },
        }
    }

    /// The kind (`None`: the bus's own).
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// The queue's name within its kind.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it names one of the bus's own queues or subscriptions.
    pub fn is_native(&self) -> bool {
        self.kind.is_none()
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Some(kind) => write!(f, "{kind}:{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// The bus's queues ([`Management`]) and any other kinds' ([`Operator`]s, such as
/// `bus_babelqueue::LayoutAdmin`) in one Redis, addressed by [`Address`]. A cheap clone.
///
/// Every operation goes to the kind's [`Operator`]; the records it returns name the
/// queue by its address (`babel:orders`). A capability a kind lacks is
/// [`bus_core::Error::Unsupported`] (as [`Error::Bus`]). Reads are methods; every change
/// is an [`Action`](crate::Action) given to [`Fleet::apply`], which audits it.
///
/// ```no_run
/// use std::sync::Arc;
/// use bus_management::{Fleet, Management};
///
/// # async fn demo(babel: Arc<dyn bus_core::operator::Operator>) -> bus_management::Result<()> {
/// let config = bus_redis::RedisConfig::from_url("redis://127.0.0.1:6379")?;
/// let fleet = Fleet::new(Management::connect(&config).await?).with(babel);
/// for queue in fleet.queues().await? {
///     let stats = fleet.stats(&queue).await?;
///     println!("{queue}: {} ready, {} dead", stats.ready, stats.dead_letters);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Fleet {
    management: Management,
    others: Vec<Arc<dyn Operator>>,
}

impl Fleet {
    /// The bus's own queues only.
    pub fn new(management: Management) -> Self {
        Fleet {
            management,
            others: Vec::new(),
        }
    }

    /// Adds another kind of queue (a kind already present is replaced).
    pub fn with(mut self, operator: Arc<dyn Operator>) -> Self {
        self.others.retain(|o| o.kind() != operator.kind());
        self.others.push(operator);
        self
    }

    /// The management of the bus's own queues (sagas, topics, scheduled messages, ...).
    pub fn management(&self) -> &Management {
        &self.management
    }

    /// Replaces the management (to set its saga prefix, say).
    pub fn map_management(mut self, f: impl FnOnce(Management) -> Management) -> Self {
        self.management = f(self.management);
        self
    }

    /// The kinds served: `bus` first.
    pub fn kinds(&self) -> Vec<&'static str> {
        std::iter::once(NATIVE)
            .chain(self.others.iter().map(|o| o.kind()))
            .collect()
    }

    /// The operator of a queue's kind, and the queue's name within it.
    pub fn resolve(&self, address: &str) -> Result<(&dyn Operator, Address)> {
        let address = Address::parse(address);
        let operator: &dyn Operator = match address.kind() {
            None => self.management.admin(),
            Some(kind) => self
                .others
                .iter()
                .find(|o| o.kind() == kind)
                .map(|o| o.as_ref())
                .ok_or_else(|| Error::UnknownKind {
                    kind: kind.to_owned(),
                    known: self.kinds().into_iter().map(str::to_owned).collect(),
                })?,
        };
        Ok((operator, address))
    }

    /// The bus's own source an address names, if it names one.
    pub fn native_source(&self, address: &str) -> Result<Option<Source>> {
        let address = Address::parse(address);
        if address.is_native() {
            Ok(Some(parse_source(address.name())?))
        } else {
            Ok(None)
        }
    }

    /// Every queue of every kind: the bus's own first (`queue`, `topic/subscription`),
    /// then each other kind's as `<kind>:<queue>`.
    pub async fn queues(&self) -> Result<Vec<String>> {
        let mut all: Vec<String> = self
            .management
            .sources()
            .await?
            .iter()
            .map(crate::source_name)
            .collect();
        for operator in &self.others {
            let kind = operator.kind();
            all.extend(
                operator
                    .queues()
                    .await?
                    .into_iter()
                    .map(|q| format!("{kind}:{q}")),
            );
        }
        Ok(all)
    }

    /// Fails unless the queue exists: for the bus's own, [`Management::ensure_exists`]
    /// (which says what does exist); for another kind, [`Error::UnknownQueue`].
    pub async fn ensure_exists(&self, address: &str) -> Result<()> {
        if let Some(source) = self.native_source(address)? {
            return self.management.ensure_exists(&source).await;
        }
        let (operator, at) = self.resolve(address)?;
        if operator.exists(at.name()).await? {
            return Ok(());
        }
        Err(Error::UnknownQueue {
            name: at.to_string(),
            kind: operator.kind(),
        })
    }

    /// The counts of a queue, named by its address.
    pub async fn stats(&self, address: &str) -> Result<QueueStats> {
        let (operator, at) = self.resolve(address)?;
        let mut stats = operator.stats(at.name()).await?;
        stats.queue = at.to_string();
        Ok(stats)
    }

    /// [`Fleet::stats`] of every queue [`Fleet::queues`] lists.
    pub async fn stats_all(&self) -> Result<Vec<QueueStats>> {
        let mut all = Vec::new();
        for queue in self.queues().await? {
            all.push(self.stats(&queue).await?);
        }
        Ok(all)
    }

    /// The next `n` waiting messages of a queue.
    pub async fn peek(&self, address: &str, n: u64) -> Result<Vec<ReadyMessage>> {
        let (operator, at) = self.resolve(address)?;
        Ok(operator.peek(at.name(), n).await?)
    }

    /// The first `n` dead letters of a queue, oldest first.
    pub async fn dead_letters(&self, address: &str, n: u64) -> Result<Vec<DeadLetter>> {
        let (operator, at) = self.resolve(address)?;
        Ok(operator.dead_letters(at.name(), n).await?)
    }

    /// Requeues dead letters to their own queue, or to another queue of the same kind
    /// (across kinds is [`Error::AcrossKinds`]: the wire formats differ).
    pub(crate) async fn requeue(
        &self,
        address: &str,
        selection: &Selection,
        to: Option<&str>,
    ) -> Result<Requeued> {
        let (operator, at) = self.resolve(address)?;
        let to = to.map(Address::parse);
        if let Some(to) = &to {
            if to.kind() != at.kind() {
                return Err(Error::AcrossKinds {
                    from: at.to_string(),
                    to: to.to_string(),
                });
            }
        }
        let mut done = operator
            .requeue(at.name(), selection, to.as_ref().map(Address::name))
            .await?;
        if let Some(kind) = at.kind() {
            done.target = done
                .target
                .split(", ")
                .map(|t| format!("{kind}:{t}"))
                .collect::<Vec<_>>()
                .join(", ");
        }
        Ok(done)
    }

    /// Deletes one dead letter; whether it was one.
    pub(crate) async fn delete_dead_letter(&self, address: &str, id: &str) -> Result<bool> {
        let (operator, at) = self.resolve(address)?;
        Ok(operator.delete_dead_letter(at.name(), id).await?)
    }

    /// Deletes the waiting (ready and delayed) messages of a queue.
    pub(crate) async fn purge(&self, address: &str) -> Result<Purged> {
        let (operator, at) = self.resolve(address)?;
        Ok(operator.purge(at.name()).await?)
    }

    /// Pauses a queue: no consumer takes its messages until [`Fleet::resume`]; sends
    /// still enqueue and running handlers finish (flow control; a kind that has none
    /// refuses with [`bus_core::Error::Unsupported`]).
    pub(crate) async fn pause(&self, address: &str) -> Result<()> {
        let (operator, at) = self.resolve(address)?;
        Ok(operator.pause(at.name()).await?)
    }

    /// Resumes a paused queue.
    pub(crate) async fn resume(&self, address: &str) -> Result<()> {
        let (operator, at) = self.resolve(address)?;
        Ok(operator.resume(at.name()).await?)
    }

    /// Closes a queue's tripped fleet circuit breaker by hand.
    pub(crate) async fn close_breaker(&self, address: &str) -> Result<()> {
        let (operator, at) = self.resolve(address)?;
        Ok(operator.close_breaker(at.name()).await?)
    }

    /// The `messaging.system` and kind of a queue (`("bus", "bus")`, `("babelqueue",
    /// "laravel")`), for metrics.
    pub fn system_of(&self, address: &str) -> Result<(&'static str, &'static str)> {
        let (operator, _) = self.resolve(address)?;
        Ok((operator.system(), operator.kind()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_once() {
        let native = Address::parse("orders");
        assert!(native.is_native());
        assert_eq!(native.to_string(), "orders");
        assert_eq!(Address::parse("bus:orders"), native);
        let sub = Address::parse("paid/mail");
        assert_eq!((sub.kind(), sub.name()), (None, "paid/mail"));
        let babel = Address::parse("laravel:orders:v2");
        assert_eq!((babel.kind(), babel.name()), (Some("laravel"), "orders:v2"));
        assert_eq!(babel.to_string(), "laravel:orders:v2");
    }
}
