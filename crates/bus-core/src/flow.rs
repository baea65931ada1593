//! Flow control of a queue across every host (docs/concepts.md, "Flow control"):
//! pause and resume, a global concurrency limit and a rate limit. The settings live in the
//! transport (in Redis, one hash per queue), so every consumer obeys them, foreign ones
//! included, and they survive restarts. A transport offers them through [`FlowControl`];
//! the operator surface ([`crate::operator::Operator::pause`]) and the `bus` tool sit on
//! top.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::address::Source;
use crate::{Error, Result};

/// At most `starts` messages of a queue start per `per`, over every consumer: a sliding
/// window, so no window of length `per` holds more than `starts` reservations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RateLimit {
    starts: u32,
    #[serde(rename = "per_ms", serialize_with = "millis")]
    per: Duration,
}

fn millis<S: serde::Serializer>(per: &Duration, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(per.as_millis()).unwrap_or(u64::MAX))
}

impl RateLimit {
    /// `starts` per `per`; both must be positive (`per` at least a millisecond).
    pub fn new(starts: u32, per: Duration) -> Result<Self> {
        if starts == 0 || per < Duration::from_millis(1) {
            return Err(Error::Config(format!(
                "a rate limit needs at least one start per at least 1 ms, got {starts} per {per:?}"
            )));
        }
        Ok(RateLimit { starts, per })
    }

    /// Starts allowed per window.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The window.
    pub fn per(&self) -> Duration {
        self.per
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}ms", self.starts, self.per.as_millis())
    }
}

/// Per-key ordering of a command queue: a message sent with a key
/// ([`Bus::send_keyed`](crate::Bus::send_keyed)) starts only while fewer than `limit`
/// messages of its key are in flight, over every consumer (`limit` 1: one at a time, in
/// the order sent). A message holds its key's slot from its first delivery until it is
/// acknowledged or dead-lettered: a retry (delayed or not), a crash or a release keeps it,
/// so later messages of its key wait. Keys take turns (round robin). Optionally each key
/// also has a rate limit ([`PerKey::rate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PerKey {
    limit: u32,
    dead_letter_blocks: bool,
    rate: Option<RateLimit>,
}

impl PerKey {
    /// At most `limit` messages of one key in flight (at least 1; 1 is FIFO per key).
    pub fn new(limit: u32) -> Result<Self> {
        if limit == 0 {
            return Err(Error::Config(
                "a per-key limit must be at least 1 (pause the queue to stop it)".into(),
            ));
        }
        Ok(PerKey {
            limit,
            dead_letter_blocks: false,
            rate: None,
        })
    }

    /// One message of a key at a time, in the order sent.
    pub fn fifo() -> Self {
        PerKey {
            limit: 1,
            dead_letter_blocks: false,
            rate: None,
        }
    }

    /// Whether a dead-lettered message keeps its key's slot (`true`: later messages of the
    /// key wait until an operator requeues the dead letter and it succeeds; `false`, the
    /// default: the dead letter gives the slot back and the key moves on).
    pub fn dead_letter_blocks(mut self, blocks: bool) -> Self {
        self.dead_letter_blocks = blocks;
        self
    }

    /// At most `rate.starts()` messages of each key start per `rate.per()`, over every
    /// consumer (a sliding window per key); a key over its rate waits while other keys
    /// run. Counted are the starts of a key's messages from its queue (first deliveries):
    /// a redelivery (a retry, a recovered or released message) already holds its key's
    /// slot and is neither held back nor counted. `None` (the default): no rate per key.
    pub fn rate(mut self, rate: Option<RateLimit>) -> Self {
        self.rate = rate;
        self
    }

    /// The rate limit of each key, if any.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.rate
    }

    /// Messages of one key in flight at most.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether a dead letter keeps its key's slot.
    pub fn blocks_on_dead_letter(&self) -> bool {
        self.dead_letter_blocks
    }
}

/// The flow-control settings of one queue (or subscription), as the transport stores them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Flow {
    /// No consumer reserves its messages; sends still enqueue.
    pub paused: bool,
    /// At most this many of its messages in flight at once, across every consumer.
    pub concurrency: Option<u32>,
    /// At most so many starts per window, across every consumer.
    pub rate: Option<RateLimit>,
    /// Keyed messages wait for their key (per-key ordering and concurrency).
    pub per_key: Option<PerKey>,
    /// A fleet-wide circuit breaker is open (or its probe runs) until this time, in ms
    /// since the Unix epoch (the transport's clock): no consumer reserves before it
    /// ([`FleetBreaker`](crate::transport::FleetBreaker)). Set by a host's breaker, not by
    /// an operator.
    pub breaker_until_ms: Option<u64>,
}

impl Flow {
    /// Whether nothing is set (every consumer reserves as it would without flow control).
    pub fn is_open(&self) -> bool {
        *self == Flow::default()
    }
}

/// A transport's flow control over its queues. Each change is one atomic step and takes
/// effect at every consumer's next reserve (within a second for a consumer that waits).
#[async_trait]
pub trait FlowControl: Send + Sync + fmt::Debug {
    /// The settings of `source`.
    async fn flow(&self, source: &Source) -> Result<Flow>;

    /// Stops every consumer of `source` from reserving; running handlers finish.
    async fn pause(&self, source: &Source) -> Result<()>;

    /// Lets consumers of `source` reserve again.
    async fn resume(&self, source: &Source) -> Result<()>;

    /// Closes the fleet-wide circuit breaker of `source` by hand, for an operator who
    /// knows its downstream is back: every consumer reserves again at its next receive,
    /// with no probe. A host-scope breaker lives in its host and is not touched; a
    /// breaker that is not open stays closed.
    async fn close_breaker(&self, source: &Source) -> Result<()>;

    /// Sets (`Some`, at least 1) or removes the global concurrency limit of `source`.
    async fn limit_concurrency(&self, source: &Source, limit: Option<u32>) -> Result<()>;

    /// Sets or removes the rate limit of `source`.
    async fn limit_rate(&self, source: &Source, rate: Option<RateLimit>) -> Result<()>;

    /// Orders the keyed messages of `source` per key (`Some`), or stops ordering them
    /// (`None`: new keyed sends are plain sends; those already waiting drain without a
    /// limit). Keyed messages sent before the queue was ordered are not ordered. The
    /// default refuses: a transport without per-key ordering.
    async fn order_per_key(&self, source: &Source, order: Option<PerKey>) -> Result<()> {
        let _ = order;
        Err(Error::Config(format!(
            "{source}: this transport has no per-key ordering"
        )))
    }
}

/// How much longer than its window a rate limit counts a start: a limit is counted when a
/// message is reserved, and its handler starts a little later (the reply's way back, the
/// dispatch), by a varying delay. Keeping each start in the window this much longer lets
/// the limit hold at handler start whenever that delay varies by less: a tenth of the
/// window, at most 50 ms.
pub fn start_margin(per: std::time::Duration) -> std::time::Duration {
    (per / 10).min(std::time::Duration::from_millis(50))
}

/// Refuses a concurrency limit of 0 (it would stop the queue for good: pause it instead).
pub fn check_concurrency(limit: Option<u32>) -> Result<()> {
    if limit == Some(0) {
        return Err(Error::Config(
            "a concurrency limit must be at least 1 (pause the queue to stop it)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_checked() {
        assert!(RateLimit::new(0, Duration::from_secs(1)).is_err());
        assert!(RateLimit::new(1, Duration::ZERO).is_err());
        let rate = RateLimit::new(5, Duration::from_millis(250)).unwrap();
        assert_eq!(rate.to_string(), "5/250ms");
        assert!(check_concurrency(Some(0)).is_err());
        assert!(check_concurrency(None).is_ok() && check_concurrency(Some(1)).is_ok());
        assert!(Flow::default().is_open());
        assert!(PerKey::new(0).is_err());
        let order = PerKey::new(3).unwrap().dead_letter_blocks(true);
        assert_eq!((order.limit(), order.blocks_on_dead_letter()), (3, true));
        assert_eq!(PerKey::fifo(), PerKey::new(1).unwrap());
        let rate = RateLimit::new(2, Duration::from_secs(1)).unwrap();
        assert_eq!(PerKey::fifo().rate(Some(rate)).rate_limit(), Some(rate));
        assert_eq!(PerKey::fifo().rate_limit(), None);
    }

    #[test]
    fn the_start_margin_is_a_tenth_of_the_window_up_to_50_ms() {
        assert_eq!(
            start_margin(Duration::from_secs(1)),
            Duration::from_millis(50)
        );
        assert_eq!(
            start_margin(Duration::from_millis(200)),
            Duration::from_millis(20)
        );
    }
}
