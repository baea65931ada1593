//! The in-memory transport with one behaviour changed, for the tests that need a
//! transport unlike it in one way (no topics, a foreign wire format, acks that fail, ...).
//! A test says only what it changes, as a [`Tap`]; every other call goes to the in-memory
//! transport and its consumers unchanged.
#![allow(dead_code)] // (each test binary uses some of it)

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bus_core::records::ErrorRecord;
use bus_core::transport::{
    Capabilities, Consumer, ConsumerExtras, ConsumerOptions, DeadLetterReason, Destination,
    Outgoing, Placement, Receipt, Received, Source, TransportExtras, Want, WireFormat,
};
use bus_core::{MemoryTransport, Result, Transport};
use tokio_util::sync::CancellationToken;

/// What a test changes. Each method is given what it would otherwise forward to.
#[async_trait]
pub trait Tap: fmt::Debug + Send + Sync + 'static {
    fn capabilities(&self, inner: &MemoryTransport) -> Capabilities {
        inner.capabilities()
    }
    fn extras<'a>(&'a self, inner: &'a MemoryTransport) -> TransportExtras<'a> {
        inner.extras()
    }
    fn wire_format(&self, inner: &MemoryTransport, source: &Source) -> Option<Arc<dyn WireFormat>> {
        inner.wire_format(source)
    }
    fn outgoing_wire_format(
        &self,
        inner: &MemoryTransport,
        destination: Destination<'_>,
    ) -> Option<Arc<dyn WireFormat>> {
        inner.outgoing_wire_format(destination)
    }
    async fn receive(
        &self,
        inner: &dyn Consumer,
        want: Want,
        stop: &CancellationToken,
    ) -> Result<Received> {
        inner.receive(want, stop).await
    }
    async fn ack(&self, inner: &dyn Consumer, receipts: &[Receipt]) -> Result<()> {
        inner.ack(receipts).await
    }
    async fn release(&self, inner: &dyn Consumer, receipts: &[Receipt]) -> Result<()> {
        inner.release(receipts).await
    }
}

/// The in-memory transport (`inner`, for the test's own looks at it) with `tap`'s changes.
/// Its `Debug` is the tap's, so that what names a transport names the test's.
pub struct Tapped<T> {
    pub inner: MemoryTransport,
    pub tap: Arc<T>,
}

impl<T: fmt::Debug> fmt::Debug for Tapped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.tap.fmt(f)
    }
}

impl<T> Clone for Tapped<T> {
    fn clone(&self) -> Self {
        Tapped {
            inner: self.inner.clone(),
            tap: Arc::clone(&self.tap),
        }
    }
}

impl<T: Tap> Tapped<T> {
    pub fn new(tap: T) -> Self {
        Tapped {
            inner: MemoryTransport::new(),
            tap: Arc::new(tap),
        }
    }
}

impl<T: Tap + Default> Default for Tapped<T> {
    fn default() -> Self {
        Tapped::new(T::default())
    }
}

#[async_trait]
impl<T: Tap> Transport for Tapped<T> {
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
        Ok(Box::new(TappedConsumer {
            inner: self.inner.consumer(source, options).await?,
            tap: Arc::clone(&self.tap),
        }))
    }
    fn wire_format(&self, source: &Source) -> Option<Arc<dyn WireFormat>> {
        self.tap.wire_format(&self.inner, source)
    }
    fn outgoing_wire_format(&self, destination: Destination<'_>) -> Option<Arc<dyn WireFormat>> {
        self.tap.outgoing_wire_format(&self.inner, destination)
    }
    fn capabilities(&self) -> Capabilities {
        self.tap.capabilities(&self.inner)
    }
    fn extras(&self) -> TransportExtras<'_> {
        self.tap.extras(&self.inner)
    }
}

#[derive(Debug)]
struct TappedConsumer<T> {
    inner: Box<dyn Consumer>,
    tap: Arc<T>,
}

#[async_trait]
impl<T: Tap> Consumer for TappedConsumer<T> {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> Result<Received> {
        self.tap.receive(&*self.inner, want, stop).await
    }
    async fn ack(&self, receipts: &[Receipt]) -> Result<()> {
        self.tap.ack(&*self.inner, receipts).await
    }
    async fn renew(&self, receipts: &[Receipt]) -> Result<Vec<bool>> {
        self.inner.renew(receipts).await
    }
    async fn retry(&self, receipt: &Receipt, delay: Duration, error: &ErrorRecord) -> Result<()> {
        self.inner.retry(receipt, delay, error).await
    }
    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> Result<()> {
        self.inner.dead_letter(receipt, reason, error).await
    }
    async fn release(&self, receipts: &[Receipt]) -> Result<()> {
        self.tap.release(&*self.inner, receipts).await
    }
    async fn recover(&self) -> Result<usize> {
        self.inner.recover().await
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
    fn extras(&self) -> ConsumerExtras<'_> {
        self.inner.extras()
    }
}
