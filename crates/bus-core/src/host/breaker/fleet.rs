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
        self.with(|m, now| {
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
        })
    }

    /// What the transport's last reserve saw, with what it handed out (fleet scope).
    pub(crate) fn seen(&self, seen: FleetBreaker, deliveries: &[Delivery]) {
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
        if !self.probes().is_empty() {
            return;
        }
        match seen {
            FleetBreaker::Open { .. } | FleetBreaker::Probe => self.with(|m, now| {
                if m.state != BreakerState::Open {
                    m.state = BreakerState::Open;
                    m.probing = false;
                    m.until = now;
                }
            }),
            // Not before its own cool-down: a reserve may have raced its own trip.
            FleetBreaker::Closed => self.with(|m, now: Instant| {
                if m.state != BreakerState::Closed && now >= m.until {
                    m.close();
                }
            }),
        }
    }
}
