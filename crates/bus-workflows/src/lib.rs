//! Workflows on the bus (docs/concepts.md, "Workflows"): batches of messages with
//! callbacks, children whose results a continuation reads, and handlers that sleep and
//! wait for signals without holding their message.
//!
//! - **Batches.** [`Workflows::batch`] opens one with callbacks (on success, on complete,
//!   on death); [`Batch::send`] adds members on any queues, in any number of calls and from
//!   handlers; [`Batch::close`] says there are no more. Each callback is stored in its
//!   queue once, after the ack of the member that settled the batch last.
//!   [`Workflows::status`] reads a batch's counts and dead members.
//! - **Children.** [`WorkflowContext::fan_out`] sends children and parks the handler's
//!   message until they settled, then returns their results (each child's
//!   [`WorkflowContext::set_result`]); [`WorkflowContext::children`] continues with another
//!   message instead. A [`ChildPolicy`] says what a dead child does.
//! - **Durable steps.** [`WorkflowContext::sleep`] and [`WorkflowContext::wait_for`] park
//!   the message (no lease, no handler slot) and resume it later with the same id, so the
//!   steps it marked with `ctx.once` are not run again; [`Workflows::signal`] wakes waits.
//!
//! # Why a crate of its own
//!
//! Workflows are a layer (STYLE.md rule 17), built only from public seams: a
//! [`WorkflowTransport`] wraps the host's transport and each of its consumers, observing
//! settles (an ack, a dead letter) the way the circuit breaker's guard does; the
//! [`WorkflowLayer`] middleware gives handlers their run's state through a task-local, as
//! bus-attachments does; the state lives in a [`WorkflowStore`] of its own (keys under
//! `{wf...}` tags, its own `lua/`), beside the transport's layout. Nothing is added to
//! bus-core's contract or hot path, and a host that does not use workflows pays nothing.
//!
//! | Item | What it is | Module |
//! |---|---|---|
//! | [`Workflows`], [`WorkflowsExt`], [`RelaySettings`] | the handle; putting it on a host | `workflows` |
//! | [`BatchBuilder`], [`Batch`] | opening a batch, adding members, closing it | `batch` |
//! | [`WorkflowContext`], [`ChildResult`] | what a handler can do | `context` |
//! | [`WorkflowLayer`], [`Suspended`] | the handler middleware; what a parked run returns | `layer` |
//! | [`WorkflowTransport`] | the host's transport with the consumer layer | `transport` |
//! | [`Relay`], [`Swept`] | sends callbacks and resumed runs; sweeps what crashes left | `relay` |
//! | [`store`]: [`WorkflowStore`], [`MemoryWorkflowStore`], [`RedisWorkflowStore`], [`BatchStatus`], ... | where the state lives | `store` |
//! | [`BatchId`], [`MemberRef`], [`CallbackKind`], [`ChildPolicy`], the headers | what goes on the wire | `ids` |
//! | [`Error`], [`Result`] | what can go wrong | `error` |

#![warn(missing_docs)]

mod batch;
mod consumer;
mod context;
mod error;
mod ids;
mod keys;
mod layer;
mod relay;
mod scripts;
pub mod store;
mod tracker;
mod transport;
mod workflows;

pub use batch::{Batch, BatchBuilder};
pub use context::{ChildResult, WorkflowContext};
pub use error::{Error, Result};
pub use ids::{
    BatchId, CallbackKind, ChildPolicy, MemberRef, BATCH_HEADER, CALLBACK_HEADER, MAX_BATCH_ID,
    RESUME_HEADER,
};
pub use layer::{Suspended, WorkflowLayer};
pub use relay::{Relay, Swept, DEDUP_WINDOW};
pub use store::{
    BatchOutcome, BatchState, BatchStatus, DeadMember, MemoryWorkflowStore, ParkedInfo, ParkedKind,
    RedisWorkflowStore, WorkflowStore,
};
pub use transport::WorkflowTransport;
pub use workflows::{RelaySettings, Workflows, WorkflowsExt, SIGNAL_KEEP};

/// The scripts of `lua/`, for the test that checks them and the docs' tables. Not an API.
#[doc(hidden)]
pub mod raw {
    pub use crate::scripts::{catalog, PRELUDES};
}
