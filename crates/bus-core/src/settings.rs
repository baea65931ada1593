//! Processing settings per processor, as in KnightBus, and the retry backoff.

use crate::defaults;
use std::time::Duration;

use rand::Rng;

/// How a processor consumes its queue. Build from [`ProcessingSettings::default`] (or a
/// shared `fn`/`static` of your own) with the by-value setters, which keep each value in
/// range; read the fields. (A value assigned to a field directly is brought into the same
/// range when the host registers the processor.)
///
/// ```
/// use std::time::Duration;
/// use bus_core::{Backoff, ProcessingSettings};
///
/// let high_throughput = ProcessingSettings::default()
///     .max_concurrent_calls(1_000)
///     .prefetch_count(1_000)
///     .message_lock_timeout(Duration::from_secs(30))
///     .dead_letter_delivery_limit(3)
///     .retry(Backoff::fixed(Duration::from_millis(50)));
/// assert_eq!(high_throughput.max_concurrent_calls, 1_000);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProcessingSettings {
    /// See [`ProcessingSettings::max_concurrent_calls()`].
    pub max_concurrent_calls: usize,
    /// See [`ProcessingSettings::prefetch_count()`].
    pub prefetch_count: usize,
    /// See [`ProcessingSettings::message_lock_timeout()`].
    pub message_lock_timeout: Duration,
    /// See [`ProcessingSettings::dead_letter_delivery_limit()`].
    pub dead_letter_delivery_limit: u32,
    /// See [`ProcessingSettings::retry()`].
    pub retry: Backoff,
    /// See [`ProcessingSettings::on_expiry()`].
    pub on_expiry: crate::OnExpiry,
    /// See [`ProcessingSettings::singleton()`].
    pub singleton: bool,
    /// See [`ProcessingSettings::singleton_ttl()`].
    pub singleton_ttl: Duration,
    /// See [`ProcessingSettings::circuit_breaker()`].
    pub circuit_breaker: Option<crate::CircuitBreaker>,
}

impl Default for ProcessingSettings {
    fn default() -> Self {
        ProcessingSettings {
            max_concurrent_calls: 8,
            prefetch_count: 8,
            message_lock_timeout: Duration::from_secs(60),
            dead_letter_delivery_limit: 5,
            retry: Backoff::default(),
            on_expiry: crate::OnExpiry::DeadLetter,
            singleton: false,
            singleton_ttl: defaults::SINGLETON_TTL,
            circuit_breaker: None,
        }
    }
}

impl ProcessingSettings {
    /// Handlers of this processor that may run at once (at least 1).
    pub fn max_concurrent_calls(mut self, n: usize) -> Self {
        self.max_concurrent_calls = n.max(1);
        self
    }
    /// Messages reserved ahead of the running handlers, so a free handler never waits
    /// for a round trip. Reserved messages are locked like running ones.
    pub fn prefetch_count(mut self, n: usize) -> Self {
        self.prefetch_count = n;
        self
    }
    /// How long a reserved message stays locked without a renewal. The consumer renews
    /// the lock while the handler runs; a crashed consumer's messages return to the
    /// queue after this time.
    pub fn message_lock_timeout(mut self, timeout: Duration) -> Self {
        self.message_lock_timeout = timeout.max(Duration::from_millis(100));
        self
    }
    /// The handler runs at most this many times for one message; then the message is
    /// dead-lettered (at least 1).
    pub fn dead_letter_delivery_limit(mut self, limit: u32) -> Self {
        self.dead_letter_delivery_limit = limit.max(1);
        self
    }
    /// The delay before a failed message is retried.
    pub fn retry(mut self, backoff: Backoff) -> Self {
        self.retry = backoff;
        self
    }

    /// What happens to a message received after its deadline
    /// ([`headers::EXPIRES_AT`](crate::headers::EXPIRES_AT)): dead-lettered with reason
    /// `expired` (the default) or dropped.
    pub fn on_expiry(mut self, on_expiry: crate::OnExpiry) -> Self {
        self.on_expiry = on_expiry;
        self
    }

    /// Whether this processor's queue is consumed by one host at a time across the
    /// fleet (KnightBus's `ISingletonProcessor`): a host reserves from it only while it
    /// holds the queue's lease in the transport (docs/concepts.md, "Singleton
    /// processors"). Off by default.
    pub fn singleton(mut self, singleton: bool) -> Self {
        self.singleton = singleton;
        self
    }
    /// How long a singleton's lease lasts without a renewal ([`defaults::SINGLETON_TTL`],
    /// at least 300 ms): the holder renews it every third of it; a host without it tries
    /// to take it as often. When the holder dies, another host takes over within
    /// `ttl + ttl / 3`.
    pub fn singleton_ttl(mut self, ttl: Duration) -> Self {
        self.singleton_ttl = ttl.max(Duration::from_millis(300));
        self
    }

    /// A circuit breaker on this processor (none by default): when too many of its
    /// handlers fail, this host stops reserving from its queue for a cool-down, then lets
    /// one message through as a probe and closes again if it succeeds
    /// ([`CircuitBreaker`](crate::CircuitBreaker) has the settings and their defaults;
    /// docs/concepts.md, "Circuit breakers").
    pub fn circuit_breaker(mut self, breaker: Option<crate::CircuitBreaker>) -> Self {
        self.circuit_breaker = breaker.map(crate::CircuitBreaker::in_range);
        self
    }

    /// The same settings with each value in the range its setter keeps.
    pub(crate) fn in_range(self) -> Self {
        let (calls, lock, limit, ttl, breaker) = (
            self.max_concurrent_calls,
            self.message_lock_timeout,
            self.dead_letter_delivery_limit,
            self.singleton_ttl,
            self.circuit_breaker,
        );
        self.max_concurrent_calls(calls)
            .message_lock_timeout(lock)
            .dead_letter_delivery_limit(limit)
            .singleton_ttl(ttl)
            .circuit_breaker(breaker)
    }
}

/// The delay before retry number `n` of a failed message.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Backoff {
    /// Retry at once.
    Immediate,
    /// The same delay every time.
    Fixed(Duration),
    /// `initial * factor^(n-1)`, capped at `max`, then randomised by up to ±`jitter`
    /// (a fraction, 0.0–1.0) so that failures of many messages do not retry in step.
    Exponential {
        /// Delay of the first retry.
        initial: Duration,
        /// Growth per retry.
        factor: f64,
        /// Upper bound before jitter.
        max: Duration,
        /// Fraction of random spread.
        jitter: f64,
    },
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::exponential(Duration::from_millis(200), Duration::from_secs(60))
    }
}

impl Backoff {
    /// A fixed delay.
    pub fn fixed(delay: Duration) -> Self {
        Backoff::Fixed(delay)
    }
    /// Doubling from `initial` up to `max`, with ±20% jitter.
    pub fn exponential(initial: Duration, max: Duration) -> Self {
        Backoff::Exponential {
            initial,
            factor: 2.0,
            max,
            jitter: 0.2,
        }
    }

    /// The delay after the `delivery`-th failed delivery (1-based).
    pub fn delay(&self, delivery: u32) -> Duration {
        match *self {
            Backoff::Immediate => Duration::ZERO,
            Backoff::Fixed(d) => d,
            Backoff::Exponential {
                initial,
                factor,
                max,
                jitter,
            } => {
                let exp = delivery.saturating_sub(1).min(64) as i32;
                let base =
                    (initial.as_secs_f64() * factor.max(1.0).powi(exp)).min(max.as_secs_f64());
                let jitter = jitter.clamp(0.0, 1.0);
                let spread = if jitter > 0.0 {
                    rand::thread_rng().gen_range(-jitter..=jitter)
                } else {
                    0.0
                };
                Duration::from_secs_f64((base * (1.0 + spread)).max(0.0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn exponential_stays_within_cap_and_jitter(n in 1u32..200, ms in 1u64..5_000, cap_ms in 1u64..120_000) {
            let b = Backoff::exponential(Duration::from_millis(ms), Duration::from_millis(cap_ms));
            let d = b.delay(n).as_secs_f64();
            let cap = Duration::from_millis(cap_ms).as_secs_f64();
            prop_assert!(d <= cap * 1.2 + 1e-9, "{d} > cap {cap}");
            let expected = (ms as f64 / 1000.0 * 2f64.powi(n as i32 - 1)).min(cap);
            prop_assert!(d >= expected * 0.8 - 1e-9, "{d} < {expected}");
        }
    }

    #[test]
    fn exponential_doubles_without_jitter() {
        let b = Backoff::Exponential {
            initial: Duration::from_millis(100),
            factor: 2.0,
            max: Duration::from_secs(1),
            jitter: 0.0,
        };
        let delays: Vec<u128> = (1..=6).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn settings_clamp_nonsense() {
        let s = ProcessingSettings::default()
            .max_concurrent_calls(0)
            .dead_letter_delivery_limit(0);
        assert_eq!(
            (s.max_concurrent_calls, s.dead_letter_delivery_limit),
            (1, 1)
        );
    }
}
