//! The fleet scope of a circuit breaker ([`BreakerScope::Fleet`]; docs/concepts.md,
//! "Circuit breakers"). The transport holds the state every host obeys: a host whose own
//! window trips stores the trip ([`FleetBreaker::trip`]); every consumer's reserve then takes
//! nothing until the cool-down ends ([`Hold::BreakerOpen`]), and the first reserve after it
//! takes one message, the probe ([`Hold::Probe`]). The transport judges the probe by how it
//! is settled, whichever host runs it: an ack closes the breaker for every host, a failure
//! opens it again for the cool-down it was tripped for.
//!
//! The host keeps its [`Machine`] for two things: counting its own handlers' outcomes
//! while closed, and showing (metrics, heartbeat, logs once per change) what the
//! transport's reserves report.
//!
//! [`FleetBreaker::trip`]: crate::transport::FleetBreaker::trip

use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{Breaker, BreakerScope, BreakerState, Bucket, Machine, BUCKETS};
use crate::transport::{Delivery, Hold, Receipt};

impl Machine {
    /// Closed, with a fresh window.
    fn close(&mut self) {
        self.state = BreakerState::Closed;
        self.probing = false;
        self.buckets = [Bucket::default(); BUCKETS];
    }

    /// Follows what a reserve saw while this host holds no probe: open (another host
    /// tripped it, or another's probe runs), or closed (not before this host's own
    /// cool-down: a reserve may have raced its own trip). Other holds say nothing of it.
    fn follow(&mut self, seen: Hold, now: Instant) {
        match seen {
            Hold::BreakerOpen { .. } | Hold::Probe if self.state != BreakerState::Open => {
                self.state = BreakerState::Open;
                self.probing = false;
                self.until = now;
            }
            Hold::None if self.state != BreakerState::Closed && now >= self.until => {
                self.close();
            }
            _ => {}
        }
    }
}

impl Breaker {
    /// Whether the transport holds the state for every host.
    pub(crate) fn fleet(&self) -> bool {
        self.scope == BreakerScope::Fleet
    }

    fn probes(&self) -> MutexGuard<'_, Vec<Receipt>> {
        // A poisoned lock only means a panic elsewhere mid-push: the list is still valid.
        self.probes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Taken before a reserve and handed to [`Breaker::seen`] with its answer.
    pub(crate) fn epoch(&self) -> u64 {
        self.judged.load(Ordering::SeqCst)
    }

    /// A handler's outcome. Host scope: recorded. Fleet scope: this host's probe closes
    /// or re-opens what it shows (the transport judged it for every host); another run
    /// counts in this host's window, and when the window trips, the trip is for the
    /// transport to store: its cool-down is returned.
    pub(crate) fn judge(&self, receipt: &Receipt, succeeded: bool) -> Option<Duration> {
        if !self.fleet() {
            self.record(succeeded);
            return None;
        }
        // The first probe judged decides (a partitioned queue hands out one per shard).
        let probe = {
            let mut probes = self.probes();
            let found = probes.contains(receipt);
            if found {
                probes.clear();
            }
            found
        };
        let trip = self.with(|m, now| {
            if probe {
                if succeeded {
                    m.close();
                } else {
                    m.open(now);
                }
                return None;
            }
            let before = m.state();
            m.record(succeeded, now);
            (before == BreakerState::Closed && m.state() == BreakerState::Open)
                .then_some(m.settings.cool_down)
        });
        if probe || trip.is_some() {
            self.judged.fetch_add(1, Ordering::SeqCst);
        }
        trip
    }

    /// What the transport's last reserve saw, with what it handed out (fleet scope);
    /// `epoch`: [`Breaker::epoch`] before the reserve. A probe is always taken as one; any
    /// other answer of a reserve that started before this host's own last trip or close
    /// is stale (it would flap the state shown and logged).
    pub(crate) fn seen(&self, seen: Hold, deliveries: &[Delivery], epoch: u64) {
        if !self.fleet() {
            return;
        }
        if seen == Hold::Probe && !deliveries.is_empty() {
            self.probes()
                .extend(deliveries.iter().map(|d| d.receipt.clone()));
            // Half-open while this host's probe runs; other runs' outcomes do not count.
            self.with(|m, _| {
                m.state = BreakerState::HalfOpen;
                m.probing = false;
            });
            return;
        }
        // While its own probe runs, this host's reserves see the slot the probe holds.
        if !self.probes().is_empty() || epoch != self.epoch() {
            return;
        }
        self.with(|m, now| m.follow(seen, now));
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::transport::Source;
    use crate::CircuitBreaker;

    fn breaker(scope: BreakerScope) -> Breaker {
        let settings = CircuitBreaker::default()
            .minimum_calls(4)
            .cool_down(Duration::from_millis(200))
            .scope(scope);
        Breaker::new(Source::queue("fleet-unit").unwrap(), settings, None)
    }

    fn receipt(n: u32) -> Receipt {
        Receipt::stored(Bytes::from(format!("m{n}")), 1)
    }

    fn delivery(n: u32) -> Delivery {
        Delivery {
            receipt: receipt(n),
            delivery_count: 1,
            payload: Bytes::new(),
            decoded: None,
        }
    }

    #[test]
    fn the_window_trips_the_fleet_once_and_only_the_probe_is_judged() {
        let b = breaker(BreakerScope::Fleet);
        // The transport gates the fleet scope: the host never holds its fetch loop.
        assert_eq!(b.admit(), super::super::Admit::Go);
        for n in 0..3 {
            assert_eq!(b.judge(&receipt(n), false), None);
        }
        assert_eq!(
            b.judge(&receipt(3), false),
            Some(Duration::from_millis(200))
        );
        assert_eq!(b.state(), BreakerState::Open);
        // Runs that started before the trip: ignored, and no second trip.
        assert_eq!(b.judge(&receipt(4), false), None);
        // This host took the probe: half-open; another run's outcome decides nothing.
        b.seen(Hold::Probe, &[delivery(9)], b.epoch());
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.judge(&receipt(5), true), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // Its own reserves see the slot the probe holds: still half-open.
        b.seen(Hold::BreakerOpen { until_ms: 0 }, &[], b.epoch());
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // The probe failed: open again (the transport re-opened it for every host).
        assert_eq!(b.judge(&receipt(9), false), None);
        assert_eq!(b.state(), BreakerState::Open);
        // The next probe succeeds: closed for every host.
        b.seen(Hold::Probe, &[delivery(10)], b.epoch());
        assert_eq!(b.judge(&receipt(10), true), None);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_reserve_that_started_before_its_own_close_does_not_reopen_it() {
        let b = breaker(BreakerScope::Fleet);
        b.seen(Hold::BreakerOpen { until_ms: 1 }, &[], b.epoch());
        b.seen(Hold::Probe, &[delivery(1)], b.epoch());
        // A reserve in flight while the probe ran and succeeded: it saw the probe's slot.
        let before = b.epoch();
        assert_eq!(b.judge(&receipt(1), true), None);
        b.seen(Hold::BreakerOpen { until_ms: 1 }, &[], before);
        assert_eq!(b.state(), BreakerState::Closed);
        // One that started after it is news: another host tripped it.
        b.seen(Hold::BreakerOpen { until_ms: 1 }, &[], b.epoch());
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn another_hosts_trip_and_close_are_followed() {
        let b = breaker(BreakerScope::Fleet);
        b.seen(Hold::BreakerOpen { until_ms: 1 }, &[], b.epoch());
        assert_eq!(b.state(), BreakerState::Open);
        // Outcomes while open do not count (nor trip again).
        for n in 0..10 {
            assert_eq!(b.judge(&receipt(n), false), None);
        }
        b.seen(Hold::None, &[delivery(1)], b.epoch());
        assert_eq!(b.state(), BreakerState::Closed);
        // A fresh window: three failures are below the minimum.
        for n in 0..3 {
            assert_eq!(b.judge(&receipt(n), false), None);
        }
    }

    #[test]
    fn after_its_own_trip_a_closed_reserve_is_believed_only_after_the_cool_down() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let settings = CircuitBreaker::default()
            .minimum_calls(4)
            .cool_down(ms(200));
        let mut m = Machine::new(settings, t0);
        for _ in 0..4 {
            m.record(false, t0);
        }
        assert_eq!(m.state(), BreakerState::Open);
        // A reserve that raced the trip.
        m.follow(Hold::None, t0 + ms(199));
        assert_eq!(m.state(), BreakerState::Open);
        m.follow(Hold::None, t0 + ms(200));
        assert_eq!(m.state(), BreakerState::Closed);
    }

    #[test]
    fn the_host_scope_ignores_the_transport_and_asks_nothing_of_it() {
        let b = breaker(BreakerScope::Host);
        b.seen(Hold::BreakerOpen { until_ms: 1 }, &[], b.epoch());
        assert_eq!(b.state(), BreakerState::Closed);
        for n in 0..4 {
            assert_eq!(b.judge(&receipt(n), false), None);
        }
        assert_eq!(b.state(), BreakerState::Open);
    }
}
