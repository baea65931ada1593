//! A processor that ships with the contracts and registers itself (`#[processor]`): a
//! service that links this crate gets it from `HostBuilder::register_processors()`
//! without naming it, as a KnightBus assembly's processors are found by
//! `RegisterProcessors()`.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bus_core::{processor, Context, EventProcessor, EventSubscription, ProcessError};

use crate::CacheInvalidated;

/// The audit log's copy of `CacheInvalidated`.
#[derive(Debug, EventSubscription)]
#[bus(event = CacheInvalidated, name = "audit")]
pub struct CacheAudit;

static AUDITED: AtomicU64 = AtomicU64::new(0);

/// How many invalidations the audit log has seen in this process.
pub fn audited() -> u64 {
    AUDITED.load(Ordering::SeqCst)
}

/// Counts every invalidation (a real one would write it somewhere).
#[derive(Debug, Default)]
pub struct CacheAuditLog;

#[processor]
#[async_trait]
impl EventProcessor<CacheAudit> for CacheAuditLog {
    async fn process(&self, _: CacheInvalidated, _: &Context) -> Result<(), ProcessError> {
        AUDITED.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}
