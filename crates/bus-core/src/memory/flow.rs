//! Flow control on the in-memory transport: the same semantics as Redis's reserve
//! scripts (`lua/flow.lua` in bus-redis; docs/concepts.md, "Flow control").

use async_trait::async_trait;
use tokio::time::Instant;

use super::{MemoryTransport, Queue};
use crate::flow::{check_concurrency, FleetBreaker, Flow, FlowControl, PerKey, RateLimit};
use crate::transport::Source;
use crate::Result;

/// What flow control lets a receive take.
pub(super) enum Allowance {
    /// Up to so many messages.
    Take(usize),
    /// Nothing: wait for a change (resume, an ack under a concurrency limit), or until
    /// the rate limit's window frees a start.
    Wait(Option<Instant>),
}

/// A queue's fleet circuit breaker (as Redis's `breaker_until` and `breaker_probe`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Tripped {
    /// The cool-down's end.
    until: Instant,
    /// While a probe runs: its slot's end (the prober's lock timeout).
    probe: Option<Instant>,
}

impl Tripped {
    /// When the next probe may be taken.
    fn next_probe(&self) -> Instant {
        self.probe.map_or(self.until, |probe| probe.max(self.until))
    }
}

/// An instant as ms since the Unix epoch (this process's clock is the transport's).
pub(super) fn epoch_ms(at: Instant) -> u64 {
    let now = Instant::now();
    let now_ms = crate::envelope::now_ms();
    if at >= now {
        now_ms.saturating_add(u64::try_from((at - now).as_millis()).unwrap_or(u64::MAX))
    } else {
        now_ms.saturating_sub(u64::try_from((now - at).as_millis()).unwrap_or(u64::MAX))
    }
}

impl Queue {
    /// How many of `want` messages flow control lets a receive take now.
    pub(super) fn allowance(&mut self, want: usize, now: Instant) -> Allowance {
        if self.flow.is_open() && self.tripped.is_none() {
            return Allowance::Take(want);
        }
        if self.flow.paused {
            return Allowance::Wait(None);
        }
        let mut n = want;
        if let Some(tripped) = self.tripped {
            let next = tripped.next_probe();
            if now < next {
                return Allowance::Wait(Some(next));
            }
            // The cool-down is over: one message, the probe.
            n = n.min(1);
        }
        if let Some(limit) = self.flow.concurrency {
            n = n.min((limit as usize).saturating_sub(self.in_flight.len()));
            if n == 0 {
                return Allowance::Wait(None);
            }
        }
        if let Some(rate) = self.flow.rate {
            while self.starts.front().is_some_and(|&t| t + rate.per() <= now) {
                self.starts.pop_front();
            }
            let free = (rate.starts() as usize).saturating_sub(self.starts.len());
            if free == 0 {
                return Allowance::Wait(self.starts.front().map(|&t| t + rate.per()));
            }
            n = n.min(free);
        }
        Allowance::Take(n)
    }

    /// What a receive that took `taken` messages saw of the fleet breaker; a probe's slot
    /// is held until `lock` (the prober's lock deadline).
    pub(super) fn breaker_seen(
        &mut self,
        taken: usize,
        now: Instant,
        lock: Instant,
    ) -> FleetBreaker {
        let Some(tripped) = &mut self.tripped else {
            return FleetBreaker::Closed;
        };
        let next = tripped.next_probe();
        if now < next || taken == 0 {
            return FleetBreaker::Open {
                until_ms: epoch_ms(next),
            };
        }
        tripped.probe = Some(lock);
        FleetBreaker::Probe
    }

    /// Opens the fleet breaker until `now + cool_down` (never shortening it) and frees a
    /// probe's slot, as `breaker_trip.lua`.
    pub(super) fn trip(&mut self, now: Instant, cool_down: std::time::Duration) {
        let until = now + cool_down;
        let until = self.tripped.map_or(until, |t| t.until.max(until));
        self.tripped = Some(Tripped { until, probe: None });
        self.notify.notify_waiters();
    }

    /// Holds a running probe's slot until `lock` (nothing when none is held).
    pub(super) fn extend_probe(&mut self, lock: Instant) {
        if let Some(Tripped {
            probe: Some(probe), ..
        }) = &mut self.tripped
        {
            *probe = lock;
        }
    }

    /// Closes the fleet breaker.
    pub(super) fn close_breaker(&mut self) {
        self.tripped = None;
        self.notify.notify_waiters();
    }

    /// When the fleet breaker lets the next probe go, in ms since the Unix epoch.
    pub(super) fn breaker_until_ms(&self) -> Option<u64> {
        self.tripped.map(|t| epoch_ms(t.next_probe()))
    }

    /// Records `n` starts in the rate limit's window.
    pub(super) fn started(&mut self, n: usize, now: Instant) {
        if self.flow.rate.is_some() {
            self.starts.extend(std::iter::repeat(now).take(n));
        }
    }

    /// Wakes waiting receives when a message leaves flight under a concurrency limit.
    pub(super) fn freed(&self) {
        if self.flow.concurrency.is_some() {
            self.notify.notify_waiters();
        }
    }
}

impl MemoryTransport {
    /// Changes the flow settings of `source` and wakes its waiting receives.
    fn change_flow(&self, source: &Source, change: impl FnOnce(&mut Flow)) {
        let mut state = self.state();
        let q = state.queue(source);
        change(&mut q.flow);
        if q.flow.rate.is_none() {
            q.starts.clear();
        }
        q.notify.notify_waiters();
    }
}

/// Flow control with the same semantics as Redis's (docs/concepts.md, "Flow control").
#[async_trait]
impl FlowControl for MemoryTransport {
    async fn flow(&self, source: &Source) -> Result<Flow> {
        Ok(self
            .state()
            .queues
            .get(source)
            .map(|q| Flow {
                breaker_until_ms: q.breaker_until_ms(),
                ..q.flow
            })
            .unwrap_or_default())
    }

    async fn pause(&self, source: &Source) -> Result<()> {
        self.change_flow(source, |f| f.paused = true);
        Ok(())
    }

    async fn resume(&self, source: &Source) -> Result<()> {
        self.change_flow(source, |f| f.paused = false);
        Ok(())
    }

    async fn close_breaker(&self, source: &Source) -> Result<()> {
        self.state().queue(source).close_breaker();
        Ok(())
    }

    async fn limit_concurrency(&self, source: &Source, limit: Option<u32>) -> Result<()> {
        check_concurrency(limit)?;
        self.change_flow(source, |f| f.concurrency = limit);
        Ok(())
    }

    async fn limit_rate(&self, source: &Source, rate: Option<RateLimit>) -> Result<()> {
        self.change_flow(source, |f| f.rate = rate);
        Ok(())
    }

    async fn order_per_key(&self, source: &Source, order: Option<PerKey>) -> Result<()> {
        self.change_flow(source, |f| f.per_key = order);
        Ok(())
    }
}
