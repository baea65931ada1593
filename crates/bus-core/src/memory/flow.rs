//! Flow control on the in-memory transport: the same semantics as Redis's reserve
//! scripts (`lua/flow.lua` in bus-redis; docs/concepts.md, "Flow control").

use async_trait::async_trait;
use tokio::time::Instant;

use super::{MemoryTransport, Queue};
use crate::flow::{check_concurrency, Flow, FlowControl, PerKey, RateLimit};
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

impl Queue {
    /// How many of `want` messages flow control lets a receive take now.
    pub(super) fn allowance(&mut self, want: usize, now: Instant) -> Allowance {
        if self.flow.is_open() {
            return Allowance::Take(want);
        }
        if self.flow.paused {
            return Allowance::Wait(None);
        }
        let mut n = want;
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
            .map(|q| q.flow)
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
