//! Flow control on the in-memory transport: the same semantics as Redis's reserve
//! scripts (`lua/flow.lua` in bus-redis; docs/concepts.md, "Flow control").

use async_trait::async_trait;
use tokio::time::Instant;

use super::{MemoryTransport, Queue};
use crate::flow::{check_concurrency, start_margin, Flow, FlowControl, PerKey, RateLimit};
use crate::transport::{Hold, Source};
use crate::Result;

/// What flow control lets a receive take.
pub(super) enum Allowance {
    /// Up to so many messages.
    Take(usize),
    /// Nothing, for this reason: wait for a change (resume, an ack under a concurrency
    /// limit), or until the instant (the rate limit's window frees a start, a fleet
    /// breaker's cool-down ends).
    Wait(Option<Instant>, Hold),
}

/// A queue's fleet circuit breaker (as Redis's `breaker_until`, `breaker_probe` and
/// `breaker_cool_ms`).
#[derive(Debug, Clone)]
pub(super) struct Tripped {
    /// The cool-down's end.
    until: Instant,
    /// The cool-down it was tripped for: a failed probe opens it for as long again.
    cool_down: std::time::Duration,
    /// While a probe runs: its slot's end (the prober's lock timeout), and its key.
    probe: Option<(Instant, bytes::Bytes)>,
}

impl Tripped {
    /// When the next probe may be taken.
    fn next_probe(&self) -> Instant {
        self.probe
            .as_ref()
            .map_or(self.until, |(slot, _)| (*slot).max(self.until))
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
    /// How many of `want` messages flow control lets a receive take now; `now_wanted`:
    /// how many of them would start at once, all a source whose limits count handler
    /// starts (a rate) may take.
    pub(super) fn allowance(&mut self, want: usize, start_now: usize, now: Instant) -> Allowance {
        if self.flow.is_open() && self.tripped.is_none() {
            return Allowance::Take(want);
        }
        if self.flow.paused {
            return Allowance::Wait(None, Hold::Paused);
        }
        let mut n = want;
        if let Some(tripped) = &self.tripped {
            let next = tripped.next_probe();
            if now < next {
                let until_ms = epoch_ms(next);
                return Allowance::Wait(Some(next), Hold::BreakerOpen { until_ms });
            }
            // The cool-down is over: one message, the probe.
            n = n.min(1);
        }
        if let Some(limit) = self.flow.concurrency {
            n = n.min((limit as usize).saturating_sub(self.in_flight.len()));
            if n == 0 {
                return Allowance::Wait(None, Hold::Full);
            }
        }
        if self.flow.rate.is_some() || self.key_rate_limited() {
            n = n.min(start_now);
        }
        if let Some(rate) = self.flow.rate {
            let window = rate.per() + start_margin(rate.per());
            while self.starts.front().is_some_and(|&t| t + window <= now) {
                self.starts.pop_front();
            }
            let free = (rate.starts() as usize).saturating_sub(self.starts.len());
            if free == 0 {
                let until = self.starts.front().map(|&t| t + window);
                return Allowance::Wait(until, Hold::RateLimited);
            }
            n = n.min(free);
        }
        Allowance::Take(n)
    }

    /// What a receive that took `taken` saw of the fleet breaker, the first of them being
    /// the probe when the cool-down was over: its slot is held until `lock` (the prober's
    /// lock deadline), and its settle judges the breaker ([`Queue::judge_probe`]).
    pub(super) fn breaker_seen(
        &mut self,
        taken: Option<&bytes::Bytes>,
        now: Instant,
        lock: Instant,
    ) -> Hold {
        let Some(tripped) = &mut self.tripped else {
            return Hold::None;
        };
        let next = tripped.next_probe();
        match taken {
            Some(key) if now >= next => {
                tripped.probe = Some((lock, key.clone()));
                Hold::Probe
            }
            _ => Hold::BreakerOpen {
                until_ms: epoch_ms(next),
            },
        }
    }

    /// Opens the fleet breaker until `now + cool_down` (never shortening it) and frees a
    /// probe's slot, as `breaker_trip.lua`.
    pub(super) fn trip(&mut self, now: Instant, cool_down: std::time::Duration) {
        let until = now + cool_down;
        let until = self.tripped.as_ref().map_or(until, |t| t.until.max(until));
        self.tripped = Some(Tripped {
            until,
            cool_down,
            probe: None,
        });
        self.notify.notify_waiters();
    }

    /// The message `key` was settled (`succeeded`: acknowledged): if it is the fleet
    /// breaker's probe, its outcome closes the breaker or opens it for another cool-down,
    /// as `breaker_judge.lua`.
    pub(super) fn judge_probe(&mut self, key: &bytes::Bytes, succeeded: bool, now: Instant) {
        let Some(tripped) = &self.tripped else { return };
        if !tripped
            .probe
            .as_ref()
            .is_some_and(|(_, probe)| probe == key)
        {
            return;
        }
        if succeeded {
            self.close_breaker();
        } else {
            let cool_down = tripped.cool_down;
            self.trip(now, cool_down);
        }
    }

    /// Holds the probe's slot until `lock` while `key`, the probe, still runs.
    pub(super) fn extend_probe(&mut self, key: &bytes::Bytes, lock: Instant) {
        if let Some(Tripped {
            probe: Some((slot, probe)),
            ..
        }) = &mut self.tripped
        {
            if probe == key {
                *slot = lock;
            }
        }
    }

    /// Closes the fleet breaker.
    pub(super) fn close_breaker(&mut self) {
        self.tripped = None;
        self.notify.notify_waiters();
    }

    /// When the fleet breaker lets the next probe go, in ms since the Unix epoch.
    pub(super) fn breaker_until_ms(&self) -> Option<u64> {
        self.tripped.as_ref().map(|t| epoch_ms(t.next_probe()))
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
