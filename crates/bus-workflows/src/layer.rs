//! [`WorkflowLayer`]: the handler middleware. It gives handlers their run's workflow state
//! through a task-local (what [`WorkflowContext`](crate::WorkflowContext) reads), turns a
//! suspended run (a durable step parked it) into the success it is, closes the batches the
//! handler opened, and leaves a member's result and suspension for its settle.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bus_core::{Context, Middleware, Next, ProcessError};
use bytes::Bytes;

use crate::batch;
use crate::ids::{MemberRef, RESUME_HEADER};
use crate::{Error, Workflows};

tokio::task_local! {
    // The handler runs inside the middleware's future (bus-core's `Next`), so a task-local
    // hands it its run's state without a hook in bus-core's `Context`.
    static RUN: Arc<Run>;
}

/// One delivery's run of a handler, as its durable steps see it.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) workflows: Workflows,
    /// The batch member this message is, if it is one.
    pub(crate) member: Option<MemberRef>,
    /// The durable step this delivery resumes (its resume header), 0 for none.
    pub(crate) resume: u32,
    /// Durable steps reached in this run, in order: the next one's ordinal is this + 1.
    steps: AtomicU32,
    result: Mutex<Option<Bytes>>,
}

impl Run {
    /// The ordinal of the next durable step (1, 2, ...): the same on every delivery of a
    /// handler that reaches its steps in the same order.
    pub(crate) fn next_step(&self) -> u32 {
        self.steps.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn set_result(&self, result: Bytes) {
        *self.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
    }
}

/// The run of the handler that is running, if the layer is on.
pub(crate) fn run() -> Result<Arc<Run>, Error> {
    RUN.try_with(Arc::clone).map_err(|_| Error::NoLayer)
}

/// What a durable step returns to stop its handler: the run is parked, and its message
/// comes back when it is due. The layer turns it into a success (the message is
/// acknowledged, and, for a batch member, not settled yet).
#[derive(Debug, thiserror::Error)]
#[error("suspended: a durable step parked this run (step {step})")]
pub struct Suspended {
    /// The durable step that parked it.
    pub step: u32,
}

/// The handler middleware of workflows ([`Workflows::layer`]). Put it first, before other
/// middleware, so that they see a suspended run as a success.
#[derive(Debug, Clone)]
pub struct WorkflowLayer {
    workflows: Workflows,
}

impl WorkflowLayer {
    pub(crate) fn new(workflows: Workflows) -> Self {
        WorkflowLayer { workflows }
    }
}

#[async_trait]
impl Middleware for WorkflowLayer {
    async fn handle(&self, ctx: &Context, next: Next<'_>) -> Result<(), ProcessError> {
        // A header that does not parse never will: dead-letter rather than retry.
        let member = MemberRef::from_headers(ctx.headers()).map_err(ProcessError::dead_letter)?;
        let resume = match ctx.headers().get(RESUME_HEADER) {
            None => 0,
            Some(step) => step.parse().map_err(|_| {
                ProcessError::dead_letter(Error::invalid("resume header", step.clone()))
            })?,
        };
        let run = Arc::new(Run {
            workflows: self.workflows.clone(),
            member,
            resume,
            steps: AtomicU32::new(0),
            result: Mutex::new(None),
        });
        let (handled, opened) = batch::opened_in(RUN.scope(Arc::clone(&run), next.run(ctx))).await;
        let tracker = &self.workflows.inner.tracker;
        match handled {
            Err(e) if e.source().downcast_ref::<Suspended>().is_some() => {
                tracing::debug!(error = %e, "run parked");
                if run.member.is_some() {
                    tracker.suspend(ctx.message_id());
                }
                Ok(())
            }
            Ok(()) => {
                for batch in opened {
                    batch.close().await.map_err(ProcessError::retry)?;
                }
                let result = run
                    .result
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let (Some(_), Some(result)) = (&run.member, result) {
                    tracker.set_result(ctx.message_id(), result);
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}
