//! The lease behind a singleton processor ([`SingletonLease`]), and the in-process one
//! the memory transport hands out.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::fast_hash::FastMap;
use crate::Result;

/// One host's claim on a singleton processor's queue: at most one holder at a time, for
/// a bounded time unless renewed ([`Transport::singleton_lease`](crate::Transport)).
/// Each call is one atomic step in the transport (Redis: `SET NX PX` and two scripts,
/// docs/redis-layout.md, "Singleton leases").
#[async_trait]
pub trait SingletonLease: Send + Sync + fmt::Debug {
    /// Takes the lease for its ttl if nobody holds it (or extends it if this holder
    /// already does); `true` when this holder now has it.
    async fn acquire(&self) -> Result<bool>;
    /// Extends the lease by its ttl if this holder still has it; `false` when it does
    /// not (it expired, or another holder took it).
    async fn renew(&self) -> Result<bool>;
    /// Gives the lease up if this holder has it, so that another host takes over at once.
    async fn release(&self) -> Result<()>;
}

/// The memory transport's leases: holder and deadline per queue, in this process.
#[derive(Debug, Clone, Default)]
pub(crate) struct Leases {
    held: Arc<Mutex<FastMap<String, (String, Instant)>>>,
}

impl Leases {
    pub(crate) fn lease(
        &self,
        queue: &str,
        holder: &str,
        ttl: Duration,
    ) -> Arc<dyn SingletonLease> {
        Arc::new(MemoryLease {
            leases: self.clone(),
            queue: queue.to_owned(),
            holder: holder.to_owned(),
            ttl,
        })
    }
}

#[derive(Debug)]
struct MemoryLease {
    leases: Leases,
    queue: String,
    holder: String,
    ttl: Duration,
}

impl MemoryLease {
    /// Sets this holder's deadline when `may_take` says so, given the current holder
    /// (`None`: nobody, or an expired lease); returns whether it did.
    fn set_if(&self, may_take: impl FnOnce(Option<&str>) -> bool) -> bool {
        let mut held = self
            .leases
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let current = held
            .get(&self.queue)
            .filter(|(_, deadline)| *deadline > now)
            .map(|(holder, _)| holder.as_str());
        if !may_take(current) {
            return false;
        }
        held.insert(self.queue.clone(), (self.holder.clone(), now + self.ttl));
        true
    }
}

#[async_trait]
impl SingletonLease for MemoryLease {
    async fn acquire(&self) -> Result<bool> {
        Ok(self.set_if(|current| current.map_or(true, |h| h == self.holder)))
    }
    async fn renew(&self) -> Result<bool> {
        Ok(self.set_if(|current| current == Some(self.holder.as_str())))
    }
    async fn release(&self) -> Result<()> {
        let mut held = self
            .leases
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if held
            .get(&self.queue)
            .is_some_and(|(h, _)| *h == self.holder)
        {
            held.remove(&self.queue);
        }
        Ok(())
    }
}
