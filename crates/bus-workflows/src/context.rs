//! [`WorkflowContext`]: what a handler behind the [`WorkflowLayer`](crate::WorkflowLayer)
//! can do with workflows, as methods on its [`Context`].
//!
//! Durable steps (`sleep`, `wait_for`, `fan_out`) are numbered in the order the handler
//! reaches them (1, 2, ...). Each is built on [`Context::once`]: the first run of step *k*
//! parks the message under the mark `bus.wf.<k>` and returns [`Suspended`]; the resumed
//! message (the same message id, with the header `bus-resume: <k>`) passes every step up
//! to *k* without parking again, since its marks are there. So what runs again on a resume
//! is the handler's code outside marked steps; what never runs again is a step marked with
//! `ctx.once` (docs/concepts.md, "Durable steps").

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{now_ms, Source};
use bus_core::{Command, Context, Envelope, ProcessError};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::batch::{Batch, BatchBuilder};
use crate::ids::{BatchId, CallbackKind, ChildPolicy, MemberRef, CALLBACK_HEADER, RESUME_HEADER};
use crate::layer::{run, Suspended};
use crate::store::{Callback, DeadMember, MemberResult, ParkedRun, WaitOutcome};
use crate::{Error, Result};

/// A child's end, as its parent's continuation reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChildResult<T> {
    /// Acknowledged, with the result its handler set, if it set one.
    Done {
        /// Its index among the children (the order they were added).
        index: u64,
        /// Its result.
        value: Option<T>,
    },
    /// Dead-lettered (only under [`ChildPolicy::Continue`]).
    Dead(DeadMember),
}

impl<T> ChildResult<T> {
    /// Its index among the children.
    pub fn index(&self) -> u64 {
        match self {
            ChildResult::Done { index, .. } => *index,
            ChildResult::Dead(dead) => dead.index,
        }
    }
    /// The result it set, if it succeeded and set one.
    pub fn value(&self) -> Option<&T> {
        match self {
            ChildResult::Done { value, .. } => value.as_ref(),
            ChildResult::Dead(_) => None,
        }
    }
    /// Its dead letter's record, if it died.
    pub fn dead(&self) -> Option<&DeadMember> {
        match self {
            ChildResult::Dead(dead) => Some(dead),
            ChildResult::Done { .. } => None,
        }
    }
}

/// Workflows from a handler. Needs the [`WorkflowLayer`](crate::WorkflowLayer) (put on
/// the host with [`WorkflowsExt::workflows`](crate::WorkflowsExt)); without it every
/// method fails with [`Error::NoLayer`].
#[async_trait]
pub trait WorkflowContext {
    /// The batch member this message is, if it is one.
    fn member(&self) -> Option<MemberRef>;

    /// Sets this message's result, which its parent's continuation reads
    /// ([`WorkflowContext::fan_out`], [`WorkflowContext::child_results`]); kept with its
    /// settle, when it succeeds. The last value set wins.
    fn set_result<T: Serialize + Sync + ?Sized>(&self, value: &T) -> Result<()>;

    /// A batch opened from this handler: the same batch on every delivery of this message
    /// (its id is a marked step), closed when the handler succeeds unless
    /// [`BatchBuilder::keep_open`]. Inside a batch member it is nested: the member counts
    /// as settled only once this batch's callbacks were sent.
    fn batch(&self) -> Result<BatchBuilder>;

    /// This message's own batch, to add more members to it from its handler (allowed
    /// after the batch was closed, since it cannot finish before this member does).
    fn siblings(&self) -> Result<Batch>;

    /// Sleeps for `duration` without holding the message: the first time, the message is
    /// parked and the handler stops (this returns [`Suspended`]: let `?` return it); the
    /// message comes back when the time is up and passes this step.
    async fn sleep(&self, duration: Duration) -> Result<(), ProcessError>;

    /// Waits for the signal `name` ([`Workflows::signal`](crate::Workflows::signal)) for
    /// at most `timeout`, without holding the message (as [`WorkflowContext::sleep`]).
    /// `Some(payload)` when the signal came (before or during the wait), `None` when the
    /// timeout passed first.
    async fn wait_for<T: DeserializeOwned + Send>(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<T>, ProcessError>;

    /// Sends children (`send` adds them) and waits for them without holding the message:
    /// the first time, the message is parked and the handler stops ([`Suspended`]); once
    /// the children settled (or, with [`ChildPolicy::FailParent`], one died) the message
    /// comes back and this returns their results.
    async fn fan_out<T, F, Fut>(
        &self,
        policy: ChildPolicy,
        send: F,
    ) -> Result<Vec<ChildResult<T>>, ProcessError>
    where
        T: DeserializeOwned + Send,
        F: FnOnce(Batch) -> Fut + Send,
        Fut: Future<Output = Result<()>> + Send;

    /// Children whose continuation is another message, `continuation`: add them to the
    /// returned batch; it is closed when this handler succeeds (the parent says it sent
    /// them all), and the continuation reads their results with
    /// [`WorkflowContext::child_results`].
    async fn children<C: Command>(&self, continuation: &C, policy: ChildPolicy) -> Result<Batch>;

    /// In a continuation: the results of the children it continues.
    async fn child_results<T: DeserializeOwned + Send>(
        &self,
    ) -> Result<Vec<ChildResult<T>>, ProcessError>;
}

/// The envelope this handler's message came in, with its resume header set to `step`,
/// and the queue it goes back to.
fn resumed(ctx: &Context, step: u32) -> Result<(String, Bytes)> {
    let Source::Queue(queue) = ctx.source() else {
        return Err(Error::invalid(
            "durable step",
            "only command handlers can park (an event's subscription cannot be sent to)",
        ));
    };
    let mut envelope = Envelope::decode_shared(ctx.element())?;
    envelope
        .headers
        .insert(RESUME_HEADER.to_owned(), step.to_string());
    Ok((queue.clone(), Bytes::from(envelope.encode()?)))
}

fn parked_run(ctx: &Context, step: u32, due_ms: u64) -> Result<ParkedRun> {
    let (queue, envelope) = resumed(ctx, step)?;
    Ok(ParkedRun {
        token: format!("{}.{step}", ctx.message_id()),
        queue,
        message_id: ctx.message_id().clone(),
        message_type: ctx.message_type().to_owned(),
        due_ms,
        envelope,
    })
}

fn suspended(step: u32) -> ProcessError {
    ProcessError::retry(Suspended { step })
}

/// Every result of a batch of children, by its policy.
pub(crate) async fn results_of<T: DeserializeOwned>(
    workflows: &crate::Workflows,
    batch: &BatchId,
) -> Result<Vec<ChildResult<T>>, ProcessError> {
    let store = &workflows.inner.store;
    let status = store
        .status(batch, 1)
        .await
        .map_err(ProcessError::retry)?
        .ok_or_else(|| {
            ProcessError::dead_letter(Error::NotFound {
                batch: batch.clone(),
            })
        })?;
    let policy = status.policy.unwrap_or_default();
    let mut out = Vec::with_capacity(status.total as usize);
    let mut from = 0;
    while from < status.total {
        let page = store
            .results(batch, from, 1000)
            .await
            .map_err(ProcessError::retry)?;
        if page.is_empty() {
            break;
        }
        for (n, member) in page.into_iter().enumerate() {
            let index = from + n as u64;
            match member {
                MemberResult::Succeeded(value) => {
                    let value = value
                        .map(|v| serde_json::from_slice(&v))
                        .transpose()
                        .map_err(ProcessError::dead_letter)?;
                    out.push(ChildResult::Done { index, value });
                }
                MemberResult::Dead(dead) => match policy {
                    ChildPolicy::Ignore => {}
                    ChildPolicy::FailParent => {
                        return Err(ProcessError::dead_letter(Error::ChildDied {
                            batch: batch.clone(),
                            index,
                            error: dead.error,
                        }))
                    }
                    _ => out.push(ChildResult::Dead(dead)),
                },
                MemberResult::Pending => {}
            }
        }
        from += 1000;
    }
    Ok(out)
}

#[async_trait]
impl WorkflowContext for Context {
    fn member(&self) -> Option<MemberRef> {
        MemberRef::from_headers(self.headers()).ok().flatten()
    }

    fn set_result<T: Serialize + Sync + ?Sized>(&self, value: &T) -> Result<()> {
        run()?.set_result(Bytes::from(serde_json::to_vec(value)?));
        Ok(())
    }

    fn batch(&self) -> Result<BatchBuilder> {
        let run = run()?;
        let step = run.next_step();
        let builder = run.workflows.batch(self.bus());
        Ok(builder.in_handler(self, step, run.member.clone()))
    }

    fn siblings(&self) -> Result<Batch> {
        let run = run()?;
        let member = run
            .member
            .clone()
            .ok_or_else(|| Error::invalid("siblings", "this message is no batch member"))?;
        let step = run.next_step();
        let prefix = format!("{}.{}.s{step}", member.batch, self.message_id());
        Ok(Batch::existing(
            run.workflows.clone(),
            self.bus().clone(),
            member.batch,
            Some((member.index, prefix)),
        ))
    }

    async fn sleep(&self, duration: Duration) -> Result<(), ProcessError> {
        let run = run()?;
        let step = run.next_step();
        if run.resume >= step {
            return Ok(());
        }
        let name = format!("bus.wf.{step}");
        self.once(&name, || async {
            let parked = parked_run(self, step, now_ms() + duration.as_millis() as u64)?;
            run.workflows.inner.store.park(&parked).await?;
            Ok::<_, Error>(true)
        })
        .await?;
        Err(suspended(step))
    }

    async fn wait_for<T: DeserializeOwned + Send>(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<T>, ProcessError> {
        bus_core::transport::validate_name("signal", name).map_err(ProcessError::dead_letter)?;
        let run = run()?;
        let step = run.next_step();
        let token = format!("{}.{step}", self.message_id());
        if run.resume >= step {
            let got = format!("bus.wf.{step}.got");
            let outcome: Option<serde_json::Value> = self
                .once(&got, || async {
                    Ok::<_, Error>(match run.workflows.inner.store.outcome(&token).await? {
                        Some(WaitOutcome::Signalled(payload)) => {
                            Some(serde_json::from_slice(&payload)?)
                        }
                        _ => None,
                    })
                })
                .await?;
            return outcome
                .map(serde_json::from_value)
                .transpose()
                .map_err(ProcessError::dead_letter);
        }
        let mark = format!("bus.wf.{step}");
        self.once(&mark, || async {
            let parked = parked_run(self, step, now_ms() + timeout.as_millis() as u64)?;
            run.workflows.inner.store.wait(&parked, name).await?;
            Ok::<_, Error>(true)
        })
        .await?;
        Err(suspended(step))
    }

    async fn fan_out<T, F, Fut>(
        &self,
        policy: ChildPolicy,
        send: F,
    ) -> Result<Vec<ChildResult<T>>, ProcessError>
    where
        T: DeserializeOwned + Send,
        F: FnOnce(Batch) -> Fut + Send,
        Fut: Future<Output = Result<()>> + Send,
    {
        let run = run()?;
        let step = run.next_step();
        let name = format!("bus.wf.{step}");
        let id: BatchId = self
            .once(&name, || async { Ok::<_, Error>(BatchId::generate()) })
            .await?;
        if run.resume >= step {
            return results_of(&run.workflows, &id).await;
        }
        let sent = format!("bus.wf.{step}.sent");
        self.once(&sent, || async {
            let (queue, envelope) = resumed(self, step)?;
            let continuation = Callback::new(
                CallbackKind::Continuation,
                queue,
                self.message_id().clone(),
                envelope,
            );
            let batch = run
                .workflows
                .batch(self.bus())
                .in_handler(self, step, None)
                .id(id.clone())
                .policy(policy)
                .stage(continuation)
                .keep_open()
                .open()
                .await?;
            send(batch.clone()).await?;
            batch.close().await?;
            Ok::<_, Error>(true)
        })
        .await?;
        Err(suspended(step))
    }

    async fn children<C: Command>(&self, continuation: &C, policy: ChildPolicy) -> Result<Batch> {
        let builder = self.batch()?.policy(policy);
        builder
            .callback_to(CallbackKind::Continuation, continuation, C::NAME)?
            .open()
            .await
    }

    async fn child_results<T: DeserializeOwned + Send>(
        &self,
    ) -> Result<Vec<ChildResult<T>>, ProcessError> {
        let run = run()?;
        let header = self.headers().get(CALLBACK_HEADER).ok_or_else(|| {
            ProcessError::dead_letter(Error::invalid(
                "continuation",
                "no bus-batch-callback header",
            ))
        })?;
        let batch = header
            .rsplit_once(':')
            .map(|(batch, _)| batch)
            .unwrap_or_default();
        let batch = BatchId::parse(batch).map_err(ProcessError::dead_letter)?;
        results_of(&run.workflows, &batch).await
    }
}
