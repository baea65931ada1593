//! [`WorkflowTransport`]: a host's transport with workflows. It forwards every call to the
//! transport it wraps, wraps each consumer in the layer that settles batch members
//! (`consumer.rs`), and runs the relay (`relay.rs`) while any of its consumers runs.
//!
//! It is a decorator of the whole [`Transport`] trait, so each of the trait's methods is
//! forwarded here by name: a method added to the trait must be added here too.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bus_core::heartbeat::HostReporter;
use bus_core::timing::TimingReporter;
use bus_core::transport::{
    Capabilities, Consumer, ConsumerOptions, Deduplication, Destination, Outgoing, ScheduleRecord,
    SingletonLease, Source, Tick, WireFormat,
};
use bus_core::{MessageId, ReplyInbox, Result, Transport};
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::consumer::WorkflowConsumer;
use crate::relay::Relay;
use crate::Workflows;

/// A transport with workflows ([`Workflows::transport`]): give it to the host.
#[derive(Debug, Clone)]
pub struct WorkflowTransport {
    workflows: Workflows,
    inner: Arc<dyn Transport>,
    relay: Arc<RelayRun>,
}

/// The relay's task, running while any consumer of this transport is open.
#[derive(Debug, Default)]
pub(crate) struct RelayRun {
    state: Mutex<(usize, Option<CancellationToken>)>,
}

impl RelayRun {
    fn start(&self, relay: Relay) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 += 1;
        if state.1.is_none() {
            let stop = CancellationToken::new();
            tokio::spawn(relay.run(stop.clone()));
            state.1 = Some(stop);
        }
    }

    pub(crate) fn stop(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(1);
        if state.0 == 0 {
            if let Some(stop) = state.1.take() {
                stop.cancel();
            }
        }
    }
}

impl WorkflowTransport {
    pub(crate) fn new(workflows: Workflows, inner: Arc<dyn Transport>) -> Self {
        WorkflowTransport {
            workflows,
            inner,
            relay: Arc::default(),
        }
    }

    /// The transport it wraps.
    pub fn inner(&self) -> &Arc<dyn Transport> {
        &self.inner
    }
}

#[async_trait]
impl Transport for WorkflowTransport {
    async fn send(&self, queue: &str, messages: Vec<Outgoing>) -> Result<()> {
        self.inner.send(queue, messages).await
    }
    async fn send_keyed(&self, queue: &str, key: &str, messages: Vec<Outgoing>) -> Result<()> {
        self.inner.send_keyed(queue, key, messages).await
    }
    async fn send_at(&self, queue: &str, messages: Vec<Outgoing>, due: SystemTime) -> Result<()> {
        self.inner.send_at(queue, messages, due).await
    }
    async fn send_keyed_at(
        &self,
        queue: &str,
        key: &str,
        messages: Vec<Outgoing>,
        due: SystemTime,
    ) -> Result<()> {
        self.inner.send_keyed_at(queue, key, messages, due).await
    }
    async fn send_deduplicated(
        &self,
        queue: &str,
        message: Outgoing,
        dedup: Deduplication<'_>,
    ) -> Result<Option<MessageId>> {
        self.inner.send_deduplicated(queue, message, dedup).await
    }
    async fn send_deduplicated_batch(
        &self,
        queue: &str,
        messages: Vec<(Outgoing, Deduplication<'_>)>,
    ) -> Result<Vec<Option<MessageId>>> {
        self.inner.send_deduplicated_batch(queue, messages).await
    }
    async fn publish_at(
        &self,
        topic: &str,
        messages: Vec<Outgoing>,
        due: SystemTime,
    ) -> Result<usize> {
        self.inner.publish_at(topic, messages, due).await
    }
    async fn scheduled(&self, queue: &str, id: &MessageId) -> Result<Option<(SystemTime, Bytes)>> {
        self.inner.scheduled(queue, id).await
    }
    async fn cancel(&self, queue: &str, id: &MessageId) -> Result<bool> {
        self.inner.cancel(queue, id).await
    }
    async fn reschedule(&self, queue: &str, id: &MessageId, due: SystemTime) -> Result<bool> {
        self.inner.reschedule(queue, id, due).await
    }
    async fn publish(&self, topic: &str, messages: Vec<Outgoing>) -> Result<usize> {
        self.inner.publish(topic, messages).await
    }
    async fn consumer(
        &self,
        source: &Source,
        options: ConsumerOptions,
    ) -> Result<Box<dyn Consumer>> {
        let inner = self.inner.consumer(source, options.clone()).await?;
        let consumer = WorkflowConsumer::new(
            inner,
            self.workflows.clone(),
            Arc::clone(&self.inner),
            &options,
            source.clone(),
        )
        .with_relay(Arc::clone(&self.relay));
        self.relay
            .start(Relay::new(self.workflows.clone(), Arc::clone(&self.inner)));
        Ok(Box::new(consumer))
    }
    fn wire_format(&self, source: &Source) -> Option<Arc<dyn WireFormat>> {
        self.inner.wire_format(source)
    }
    fn outgoing_wire_format(&self, destination: Destination<'_>) -> Option<Arc<dyn WireFormat>> {
        self.inner.outgoing_wire_format(destination)
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn singleton_lease(
        &self,
        queue: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Arc<dyn SingletonLease>> {
        self.inner.singleton_lease(queue, holder, ttl)
    }
    fn host_reporter(&self) -> Option<Arc<dyn HostReporter>> {
        self.inner.host_reporter()
    }
    async fn send_tick(&self, queue: &str, tick: Tick<'_>, message: Outgoing) -> Result<bool> {
        self.inner.send_tick(queue, tick, message).await
    }
    async fn last_tick(&self, queue: &str, schedule: &str) -> Result<Option<u64>> {
        self.inner.last_tick(queue, schedule).await
    }
    async fn record_schedule(&self, schedule: &ScheduleRecord) -> Result<()> {
        self.inner.record_schedule(schedule).await
    }
    async fn reply_inbox(&self, name: &str) -> Result<Box<dyn ReplyInbox>> {
        self.inner.reply_inbox(name).await
    }
    async fn reply(&self, inbox: &str, element: Bytes, keep: Duration) -> Result<()> {
        self.inner.reply(inbox, element, keep).await
    }
    async fn step_mark(
        &self,
        source: &Source,
        id: &MessageId,
        step: &str,
    ) -> Result<Option<Bytes>> {
        self.inner.step_mark(source, id, step).await
    }
    async fn mark_step(
        &self,
        source: &Source,
        id: &MessageId,
        step: &str,
        result: Bytes,
        keep: Duration,
    ) -> Result<Option<Bytes>> {
        self.inner.mark_step(source, id, step, result, keep).await
    }
    fn timing_reporter(&self) -> Option<Arc<dyn TimingReporter>> {
        self.inner.timing_reporter()
    }
}
