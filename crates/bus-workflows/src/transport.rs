//! [`WorkflowTransport`]: a host's transport with workflows. It forwards every call to the
//! transport it wraps, wraps each consumer in the layer that settles batch members
//! (`consumer.rs`), and runs the relay (`relay.rs`) while any of its consumers runs.
//!
//! It forwards every method of [`Transport`] and the transport's extras unchanged; only
//! `consumer` adds something.

use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use bus_core::transport::{
    Capabilities, Consumer, ConsumerOptions, Destination, Outgoing, Placement, Source,
    TransportExtras, WireFormat,
};
use bus_core::{Result, Transport};

use crate::consumer::WorkflowConsumer;
use crate::relay::{Relay, RelayRun};
use crate::Workflows;

/// A transport with workflows ([`Workflows::transport`]): give it to the host.
#[derive(Debug, Clone)]
pub struct WorkflowTransport {
    workflows: Workflows,
    inner: Arc<dyn Transport>,
    relay: Arc<RelayRun>,
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
    async fn send(
        &self,
        queue: &str,
        placement: Placement<'_>,
        messages: Vec<Outgoing>,
    ) -> Result<()> {
        self.inner.send(queue, placement, messages).await
    }
    async fn publish(
        &self,
        topic: &str,
        due: Option<SystemTime>,
        messages: Vec<Outgoing>,
    ) -> Result<usize> {
        self.inner.publish(topic, due, messages).await
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
    fn extras(&self) -> TransportExtras<'_> {
        self.inner.extras()
    }
}
