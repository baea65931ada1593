//! The consumer layer: settles batch members in their batch, after their transport settle.
//!
//! Contract, per member delivery: its mark (how it leaves: acked with its result, or
//! dead-lettered with its error) is stored in its batch *before* the transport's ack or
//! dead letter; the batch counts it (`confirm`) only *after* that settle returned, and only
//! if it returned while the delivery's lock surely held (so it was not a stale settle that
//! changed nothing). A mark left unconfirmed (the process died in between, or the settle
//! came too late) is resolved by the relay's sweep, which asks the transport where the
//! member is (docs/concepts.md, "Workflows: what holds").
//!
//! A delivery that is no member costs a byte search for the `bus-batch` header, and its
//! settle a look at an empty map.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::records::ErrorRecord;
use bus_core::transport::{
    Consumer, ConsumerExtras, DeadLetterReason, Delivery, Receipt, Received, Want,
};
use bus_core::{Envelope, MessageId, Transport};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ids::{BatchId, MemberRef, BATCH_HEADER};
use crate::relay::{Relay, RelayRun};
use crate::store::{Mark, Outcome, Settle};
use crate::Workflows;

/// The error of a member that a crash ended at its delivery limit: recovery dead-letters
/// it with no host watching, so it is marked dead when it is received for that run.
const CRASHED_AT_LIMIT: &str =
    "its process ended while it ran alone at its delivery limit: dead-lettered by recovery";

/// A held delivery that is a batch member.
#[derive(Debug, Clone)]
struct HeldMember {
    member: MemberRef,
    id: MessageId,
    /// Until when its lock surely holds: from before the reserve or renewal that last
    /// extended it, plus the lock timeout (less a margin). A settle that returned before
    /// then was current, so its member can be confirmed at once.
    valid_until: Instant,
    /// A dead mark was written when it was received (alone, at its delivery limit).
    premarked: bool,
}

#[derive(Debug)]
pub(crate) struct WorkflowConsumer {
    inner: Box<dyn Consumer>,
    /// The members this consumer holds, by receipt.
    held: Mutex<HashMap<Receipt, HeldMember>>,
    source: bus_core::transport::Source,
    workflows: Workflows,
    transport: Arc<dyn Transport>,
    /// The lock timeout less a margin for clocks and the reply's way back.
    lock_valid: Duration,
    delivery_limit: u32,
    /// The relay this consumer keeps running, stopped with the last consumer.
    relay: Option<Arc<RelayRun>>,
}

impl WorkflowConsumer {
    pub(crate) fn new(
        inner: Box<dyn Consumer>,
        workflows: Workflows,
        transport: Arc<dyn Transport>,
        options: &bus_core::transport::ConsumerOptions,
        source: bus_core::transport::Source,
    ) -> Self {
        let margin = (options.lock_timeout / 10).min(Duration::from_secs(1));
        WorkflowConsumer {
            inner,
            held: Mutex::new(HashMap::new()),
            source,
            workflows,
            transport,
            lock_valid: options.lock_timeout.saturating_sub(margin),
            delivery_limit: options.delivery_limit,
            relay: None,
        }
    }

    pub(crate) fn with_relay(mut self, relay: Arc<RelayRun>) -> Self {
        self.relay = Some(relay);
        self
    }

    fn held(&self) -> MutexGuard<'_, HashMap<Receipt, HeldMember>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The member a delivery is, if any; its envelope, decoded to find out, is handed to
    /// the host so that it is not decoded twice.
    fn member_of(&self, delivery: &mut Delivery, sent: Instant, alone: bool) -> Option<HeldMember> {
        static FINDER: LazyLock<memchr::memmem::Finder<'static>> =
            LazyLock::new(|| memchr::memmem::Finder::new(BATCH_HEADER));
        let marked = FINDER.find(&delivery.payload).is_some();
        if !marked && delivery.decoded.is_none() {
            return None;
        }
        let envelope = match delivery.decoded.take() {
            Some(envelope) => *envelope,
            None => Envelope::decode_shared(&delivery.payload).ok()?,
        };
        let member = MemberRef::from_headers(&envelope.headers);
        let id = envelope.id.clone();
        delivery.decoded = Some(Box::new(envelope));
        let member = match member {
            Ok(member) => member?,
            Err(error) => {
                tracing::warn!(%error, message_id = %id, "a batch header that does not parse: the message is no member");
                return None;
            }
        };
        Some(HeldMember {
            member,
            id,
            valid_until: sent + self.lock_valid,
            premarked: alone && delivery.delivery_count >= self.delivery_limit,
        })
    }

    /// The members among `receipts`, as held.
    fn members(&self, receipts: &[Receipt]) -> Vec<(Receipt, HeldMember)> {
        let held = self.held();
        if held.is_empty() {
            return Vec::new();
        }
        receipts
            .iter()
            .filter_map(|r| Some((r.clone(), held.get(r)?.clone())))
            .collect()
    }

    fn forget(&self, receipts: &[Receipt]) {
        let mut held = self.held();
        if held.is_empty() {
            return;
        }
        for receipt in receipts {
            held.remove(receipt);
        }
    }

    fn mark(&self, receipt: &Receipt, member: &HeldMember, outcome: Outcome) -> Mark {
        Mark {
            index: member.member.index,
            outcome,
            message_id: member.id.clone(),
            source: self.source.clone(),
            receipt: receipt.clone(),
        }
    }

    /// Writes marks, grouped by batch; an error fails the settle (before the transport's).
    async fn write_marks(&self, marks: BTreeMap<BatchId, Vec<Mark>>) -> bus_core::Result<()> {
        let store = &self.workflows.inner.store;
        let writes = marks.iter().map(|(batch, marks)| store.mark(batch, marks));
        for written in futures::future::join_all(writes).await {
            written.map_err(bus_core::Error::transport)?;
        }
        Ok(())
    }

    /// Confirms settles in the background (their transport settle is stored), then sends
    /// what fires. A confirmation that fails is left to the relay's sweep.
    fn confirm(&self, settles: BTreeMap<BatchId, Vec<Settle>>) {
        if settles.is_empty() {
            return;
        }
        let relay = Relay::new(self.workflows.clone(), Arc::clone(&self.transport));
        tokio::spawn(async move {
            for (batch, settles) in settles {
                if let Err(error) = relay.settle(&batch, &settles).await {
                    tracing::warn!(%batch, %error, "confirming batch members failed; the relay's sweep resolves them");
                }
            }
        });
    }

    /// Marks members received alone at their delivery limit as dead, in case their run
    /// ends the process: recovery then dead-letters them with no host watching.
    async fn premark(&self, premarked: Vec<(Receipt, HeldMember)>) {
        let mut marks: BTreeMap<BatchId, Vec<Mark>> = BTreeMap::new();
        for (receipt, member) in &premarked {
            let outcome = Outcome::Dead {
                reason: DeadLetterReason::DeliveryLimit.as_str().to_owned(),
                error: CRASHED_AT_LIMIT.to_owned(),
            };
            let mark = self.mark(receipt, member, outcome);
            marks
                .entry(member.member.batch.clone())
                .or_default()
                .push(mark);
        }
        if let Err(error) = self.write_marks(marks).await {
            tracing::warn!(%error, "could not mark members running at their delivery limit");
        }
    }

    /// Drops the pre-marks of members that left without being settled (retried, released).
    fn unmark(&self, members: &[(Receipt, HeldMember)]) {
        let mut drops: BTreeMap<BatchId, Vec<Settle>> = BTreeMap::new();
        for (receipt, member) in members.iter().filter(|(_, m)| m.premarked) {
            drops
                .entry(member.member.batch.clone())
                .or_default()
                .push(Settle::Drop {
                    index: member.member.index,
                    receipt: receipt.clone(),
                });
        }
        self.confirm(drops);
    }
}

#[async_trait]
impl Consumer for WorkflowConsumer {
    async fn receive(&self, want: Want, stop: &CancellationToken) -> bus_core::Result<Received> {
        let sent = Instant::now();
        let mut received = self.inner.receive(want, stop).await?;
        if received.deliveries.is_empty() {
            return Ok(received);
        }
        let mut premarked = Vec::new();
        let mut members = Vec::new();
        for delivery in &mut received.deliveries {
            if let Some(member) = self.member_of(delivery, sent, want.alone) {
                if member.premarked {
                    premarked.push((delivery.receipt.clone(), member.clone()));
                }
                members.push((delivery.receipt.clone(), member));
            }
        }
        if !members.is_empty() {
            self.held().extend(members);
        }
        if !premarked.is_empty() {
            self.premark(premarked).await;
        }
        Ok(received)
    }

    async fn ack(&self, receipts: &[Receipt]) -> bus_core::Result<()> {
        let members = self.members(receipts);
        if members.is_empty() {
            self.inner.ack(receipts).await?;
            self.forget(receipts);
            return Ok(());
        }
        let tracker = &self.workflows.inner.tracker;
        let mut marks: BTreeMap<BatchId, Vec<Mark>> = BTreeMap::new();
        let mut settled = Vec::with_capacity(members.len());
        let mut suspended = Vec::new();
        for (receipt, member) in &members {
            let flags = tracker.peek(&member.id);
            if flags.suspended {
                // A durable step parked the run: its resumed run settles it.
                suspended.push((receipt.clone(), member.clone()));
                continue;
            }
            let outcome = Outcome::Succeeded {
                result: flags.result,
            };
            let mark = self.mark(receipt, member, outcome);
            marks
                .entry(member.member.batch.clone())
                .or_default()
                .push(mark);
            settled.push(member);
        }
        self.write_marks(marks).await?;
        self.inner.ack(receipts).await?;
        let done = Instant::now();
        let mut confirms: BTreeMap<BatchId, Vec<Settle>> = BTreeMap::new();
        for member in settled.into_iter().filter(|m| m.valid_until > done) {
            confirms
                .entry(member.member.batch.clone())
                .or_default()
                .push(Settle::Confirm {
                    index: member.member.index,
                    receipt: None,
                });
        }
        tracker.forget(members.iter().map(|(_, m)| &m.id));
        self.forget(receipts);
        self.confirm(confirms);
        self.unmark(&suspended);
        Ok(())
    }

    async fn renew(&self, receipts: &[Receipt]) -> bus_core::Result<Vec<bool>> {
        let sent = Instant::now();
        let kept = self.inner.renew(receipts).await?;
        let mut held = self.held();
        for (receipt, kept) in receipts.iter().zip(&kept) {
            if let Some(member) = held.get_mut(receipt) {
                member.valid_until = if *kept { sent + self.lock_valid } else { sent };
            }
        }
        Ok(kept)
    }

    async fn retry(
        &self,
        receipt: &Receipt,
        delay: Duration,
        error: &ErrorRecord,
    ) -> bus_core::Result<()> {
        self.inner.retry(receipt, delay, error).await?;
        let one = std::slice::from_ref(receipt);
        let members = self.members(one);
        let tracker = &self.workflows.inner.tracker;
        tracker.forget(members.iter().map(|(_, m)| &m.id));
        self.forget(one);
        self.unmark(&members);
        Ok(())
    }

    async fn dead_letter(
        &self,
        receipt: &Receipt,
        reason: DeadLetterReason,
        error: Option<&ErrorRecord>,
    ) -> bus_core::Result<()> {
        let one = std::slice::from_ref(receipt);
        let Some((_, member)) = self.members(one).pop() else {
            self.inner.dead_letter(receipt, reason, error).await?;
            self.forget(one);
            return Ok(());
        };
        let outcome = Outcome::Dead {
            reason: reason.as_str().to_owned(),
            error: error.map(|e| e.message.clone()).unwrap_or_default(),
        };
        let mark = self.mark(receipt, &member, outcome);
        self.write_marks(BTreeMap::from([(member.member.batch.clone(), vec![mark])]))
            .await?;
        self.inner.dead_letter(receipt, reason, error).await?;
        let current = member.valid_until > Instant::now();
        self.workflows.inner.tracker.forget([&member.id]);
        self.forget(one);
        if current {
            let settle = vec![Settle::Confirm {
                index: member.member.index,
                receipt: None,
            }];
            self.confirm(BTreeMap::from([(member.member.batch, settle)]));
        }
        Ok(())
    }

    async fn release(&self, receipts: &[Receipt]) -> bus_core::Result<()> {
        self.inner.release(receipts).await?;
        let members = self.members(receipts);
        self.forget(receipts);
        self.unmark(&members);
        Ok(())
    }

    async fn recover(&self) -> bus_core::Result<usize> {
        self.inner.recover().await
    }

    async fn close(&self) -> bus_core::Result<()> {
        self.held().clear();
        if let Some(relay) = &self.relay {
            relay.stop();
        }
        self.inner.close().await
    }

    fn extras(&self) -> ConsumerExtras<'_> {
        self.inner.extras()
    }
}
