//! The fleet scope of a circuit breaker ([`BreakerScope::Fleet`]; docs/concepts.md,
//! "Circuit breakers"). The transport holds the state every host obeys: a host whose own
//! window trips stores the trip ([`Consumer::trip_breaker`]); every consumer's reserve then
//! takes nothing until the cool-down ends, and the first reserve after it takes one message,
//! the probe, marked as such ([`FleetBreaker::Probe`]). Only the host that took the probe
//! judges it: success closes the breaker for every host, failure trips it again.
//!
//! The host keeps its [`Machine`] for two things: counting its own handlers' outcomes
//! while closed, and showing (metrics, heartbeat, logs once per change) what the
//! transport's reserves report.
//!
//! [`Consumer::trip_breaker`]: crate::transport::Consumer::trip_breaker

use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{Breaker, BreakerScope, BreakerState, Bucket, Machine, BUCKETS};
use crate::flow::FleetBreaker;
use crate::transport::{Delivery, Receipt};

/// What a host asks of the transport after a handler's outcome (fleet scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FleetCall {
    /// Open the breaker on every host for the cool-down.
    Trip(Duration),
    /// The probe succeeded: close it on every host.
    Close,
}

impl Machine {
    /// Closed, with a fresh window.
    fn close(&mut self) {
        self.state = BreakerState::Closed;
        self.probing = false;
        self.buckets = [Bucket::default(); BUCKETS];
    }

    /// Follows what a reserve saw while this host holds no probe: open (another host
    /// tripped it, or another's probe runs), or closed (not before this host's own
    /// cool-down: a reserve may have raced its own trip).
    fn follow(&mut self, seen: FleetBreaker, now: Instant) {
        match seen {
            FleetBreaker::Open { .. } | FleetBreaker::Probe => {
                if self.state != BreakerState::Open {
                    self.state = BreakerState::Open;
                    self.probing = false;
                    self.until = now;
                }
            }
            FleetBreaker::Closed => {
                if self.state != BreakerState::Closed && now >= self.until {
                    self.close();
                }
            }
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

    /// The probes this host reserved and has not judged yet (fleet scope).
    pub(crate) fn probes_held(&self) -> Vec<Receipt> {
        self.probes().clone()
    }

    /// A handler's outcome. Host scope: recorded. Fleet scope: the probe's outcome closes
    /// or re-trips the breaker of every host; another run counts in this host's window,
    /// and when the window trips, the trip is for the transport to store.
    pub(crate) fn judge(&self, receipt: &Receipt, succeeded: bool) -> Option<FleetCall> {
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
        let call = self.with(|m, now| {
            if probe {
                if succeeded {
                    m.close();
                    return Some(FleetCall::Close);
                }
                m.open(now);
                return Some(FleetCall::Trip(m.settings.cool_down));
            }
            let before = m.state();
            m.record(succeeded, now);
            (before == BreakerState::Closed && m.state() == BreakerState::Open)
                .then_some(FleetCall::Trip(m.settings.cool_down))
        });
        if call.is_some() {
            self.judged.fetch_add(1, Ordering::SeqCst);
        }
        call
    }

    /// What the transport's last reserve saw, with what it handed out (fleet scope);
    /// `epoch`: [`Breaker::epoch`] before the reserve. A probe is always taken as one; any
    /// other answer of a reserve that started before this host's own last trip or close
    /// is stale (it would flap the state shown and logged).
    pub(crate) fn seen(&self, seen: FleetBreaker, deliveries: &[Delivery], epoch: u64) {
        if !self.fleet() {
            return;
        }
        if seen == FleetBreaker::Probe && !deliveries.is_empty() {
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
        Breaker::new(Source::queue("fleet-unit").unwrap(), settings)
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
            Some(FleetCall::Trip(Duration::from_millis(200)))
        );
        assert_eq!(b.state(), BreakerState::Open);
        // Runs that started before the trip: ignored, and no second trip.
        assert_eq!(b.judge(&receipt(4), false), None);
        // This host took the probe: half-open; another run's outcome decides nothing.
        b.seen(FleetBreaker::Probe, &[delivery(9)], b.epoch());
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.judge(&receipt(5), true), None);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // Its own reserves see the slot the probe holds: still half-open.
        b.seen(FleetBreaker::Open { until_ms: 0 }, &[], b.epoch());
        assert_eq!(b.state(), BreakerState::HalfOpen);
        // The probe failed: tripped again for every host.
        assert_eq!(
            b.judge(&receipt(9), false),
            Some(FleetCall::Trip(Duration::from_millis(200)))
        );
        assert_eq!(b.state(), BreakerState::Open);
        // The next probe succeeds: closed for every host.
        b.seen(FleetBreaker::Probe, &[delivery(10)], b.epoch());
        assert_eq!(b.judge(&receipt(10), true), Some(FleetCall::Close));
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_reserve_that_started_before_its_own_close_does_not_reopen_it() {
        let b = breaker(BreakerScope::Fleet);
        b.seen(FleetBreaker::Open { until_ms: 1 }, &[], b.epoch());
        b.seen(FleetBreaker::Probe, &[delivery(1)], b.epoch());
        // A reserve in flight while the probe ran and succeeded: it saw the probe's slot.
        let before = b.epoch();
        assert_eq!(b.judge(&receipt(1), true), Some(FleetCall::Close));
        b.seen(FleetBreaker::Open { until_ms: 1 }, &[], before);
        assert_eq!(b.state(), BreakerState::Closed);
        // One that started after it is news: another host tripped it.
        b.seen(FleetBreaker::Open { until_ms: 1 }, &[], b.epoch());
        assert_eq!(b.state(), BreakerState::Open);
    }

    #[test]
    fn another_hosts_trip_and_close_are_followed() {
        let b = breaker(BreakerScope::Fleet);
        b.seen(FleetBreaker::Open { until_ms: 1 }, &[], b.epoch());
        assert_eq!(b.state(), BreakerState::Open);
        // Outcomes while open do not count (nor trip again).
        for n in 0..10 {
            assert_eq!(b.judge(&receipt(n), false), None);
        }
        b.seen(FleetBreaker::Closed, &[delivery(1)], b.epoch());
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
        m.follow(FleetBreaker::Closed, t0 + ms(199));
        assert_eq!(m.state(), BreakerState::Open);
        m.follow(FleetBreaker::Closed, t0 + ms(200));
        assert_eq!(m.state(), BreakerState::Closed);
    }

    #[test]
    fn the_host_scope_ignores_the_transport_and_asks_nothing_of_it() {
        let b = breaker(BreakerScope::Host);
        b.seen(FleetBreaker::Open { until_ms: 1 }, &[], b.epoch());
        assert_eq!(b.state(), BreakerState::Closed);
        for n in 0..4 {
            assert_eq!(b.judge(&receipt(n), false), None);
        }
        assert_eq!(b.state(), BreakerState::Open);
    }
}
