//! [`Workflows`]: the handle an application keeps (a store and what the host's layers
//! share), and [`WorkflowsExt`], which puts both layers on a host in one call.

use std::sync::Arc;
use std::time::Duration;

use bus_core::{Bus, HostBuilder, IntoShared, Transport};
use bytes::Bytes;
use serde::Serialize;

use crate::batch::BatchBuilder;
use crate::ids::BatchId;
use crate::layer::WorkflowLayer;
use crate::relay::Relay;
use crate::store::{BatchStatus, WorkflowStore};
use crate::tracker::Tracker;
use crate::transport::WorkflowTransport;
use crate::Result;

/// How long a signal is kept for a wait that comes later (7 days).
pub const SIGNAL_KEEP: Duration = bus_core::defaults::ONCE_KEEP;

/// The timings of the background work every host with workflows does (the relay): how
/// often it looks for what a crash left undone, and how long it waits before it takes a
/// member's settle for lost.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RelaySettings {
    /// Between two sweeps of the open batches (5 s).
    pub sweep_every: Duration,
    /// A member's settle not confirmed after this long is resolved by asking its
    /// transport where the member is (5 s).
    pub stale_after: Duration,
    /// A parked run taken for sending is taken again by another process after this long
    /// if it was not sent (30 s).
    pub claim: Duration,
    /// The longest the relay sleeps without looking for due runs (1 s): runs parked by
    /// another process are found within this.
    pub poll: Duration,
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            sweep_every: Duration::from_secs(5),
            stale_after: Duration::from_secs(5),
            claim: Duration::from_secs(30),
            poll: Duration::from_secs(1),
        }
    }
}

impl RelaySettings {
    /// Between two sweeps.
    pub fn sweep_every(mut self, every: Duration) -> Self {
        self.sweep_every = every;
        self
    }
    /// When an unconfirmed settle counts as lost.
    pub fn stale_after(mut self, after: Duration) -> Self {
        self.stale_after = after;
        self
    }
    /// How long a taken run stays claimed.
    pub fn claim(mut self, claim: Duration) -> Self {
        self.claim = claim;
        self
    }
    /// The longest sleep between two looks for due runs.
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }
}

/// Batches, continuations and durable steps over one [`WorkflowStore`]: a cheap-to-clone
/// handle. Put it on a host with [`WorkflowsExt::workflows`]; open batches from anywhere
/// with [`Workflows::batch`].
///
/// ```
/// use bus_core::{Host, MemoryTransport};
/// use bus_workflows::{MemoryWorkflowStore, Workflows, WorkflowsExt};
///
/// let workflows = Workflows::new(MemoryWorkflowStore::new());
/// let host = Host::builder()
///     .workflows(&workflows, MemoryTransport::new())
///     // .command::<...>(...)
///     .build()?;
/// # let _ = host; Ok::<(), bus_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Workflows {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) store: Arc<dyn WorkflowStore>,
    pub(crate) tracker: Tracker,
    pub(crate) settings: RelaySettings,
}

impl Workflows {
    /// Over `store` ([`MemoryWorkflowStore`](crate::MemoryWorkflowStore) for the memory
    /// transport, [`RedisWorkflowStore`](crate::RedisWorkflowStore) for Redis).
    pub fn new(store: impl WorkflowStore) -> Self {
        Self::shared(Arc::new(store))
    }

    /// Over a shared store.
    pub fn shared(store: Arc<dyn WorkflowStore>) -> Self {
        Workflows {
            inner: Arc::new(Inner {
                store,
                tracker: Tracker::default(),
                settings: RelaySettings::default(),
            }),
        }
    }

    /// With other relay timings (a new handle: set it before the layers are made).
    pub fn relay_settings(self, settings: RelaySettings) -> Self {
        Workflows {
            inner: Arc::new(Inner {
                store: Arc::clone(&self.inner.store),
                tracker: Tracker::default(),
                settings,
            }),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn WorkflowStore> {
        &self.inner.store
    }

    /// `transport` with the consumer layer that settles batch members in their batch
    /// once their ack (or dead letter) is stored, and the relay that sends callbacks and
    /// resumed runs. Give it to the host; add [`Workflows::layer`] too (or do both with
    /// [`WorkflowsExt::workflows`]).
    pub fn transport(&self, inner: impl IntoShared<dyn Transport>) -> WorkflowTransport {
        WorkflowTransport::new(self.clone(), inner.into_shared())
    }

    /// The handler middleware: what `ctx.sleep`, `ctx.batch`, `ctx.fan_out`, ... need.
    pub fn layer(&self) -> WorkflowLayer {
        WorkflowLayer::new(self.clone())
    }

    /// A new batch, sent through `bus`.
    pub fn batch(&self, bus: &Bus) -> BatchBuilder {
        BatchBuilder::new(self.clone(), bus.clone())
    }

    /// A batch's status with up to 100 of its dead members; `None` once it expired.
    pub async fn status(&self, batch: &BatchId) -> Result<Option<BatchStatus>> {
        self.inner.store.status(batch, 100).await
    }

    /// Sends the signal `name` with `payload`: every run waiting for it resumes with it,
    /// and a run that waits for it later (within [`SIGNAL_KEEP`]) finds it at once; the
    /// first payload sent wins. The resumed runs are sent through `bus` at once. Returns
    /// how many waiting runs it woke.
    pub async fn signal<T: Serialize>(&self, bus: &Bus, name: &str, payload: &T) -> Result<usize> {
        bus_core::transport::validate_name("signal", name)?;
        let payload = Bytes::from(serde_json::to_vec(payload)?);
        let woken = self.inner.store.signal(name, &payload, SIGNAL_KEEP).await?;
        if woken > 0 {
            Relay::new(self.clone(), Arc::clone(bus.transport()))
                .send_due()
                .await?;
        }
        Ok(woken)
    }

    /// The relay over `transport`, to run in a process that is no host (a host with
    /// [`Workflows::transport`] runs one while its consumers run).
    pub fn relay(&self, transport: impl IntoShared<dyn Transport>) -> Relay {
        Relay::new(self.clone(), transport.into_shared())
    }
}

/// Puts workflows on a host: its transport wrapped ([`Workflows::transport`]) and the
/// handler middleware ([`Workflows::layer`]) first in the pipeline, so that the
/// middleware added after it sees a suspended run as the success it is.
pub trait WorkflowsExt {
    /// `transport` with workflows.
    fn workflows(self, workflows: &Workflows, transport: impl IntoShared<dyn Transport>) -> Self;
}

impl WorkflowsExt for HostBuilder {
    fn workflows(self, workflows: &Workflows, transport: impl IntoShared<dyn Transport>) -> Self {
        self.transport(workflows.transport(transport))
            .middleware(workflows.layer())
    }
}
