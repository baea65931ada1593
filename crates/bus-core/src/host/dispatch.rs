//! What one message's path needs ([`Dispatch`]), apart from the steps that use it
//! (`handle.rs`: decode, route, run; `lifecycle.rs`: expiry and dead letters), so
//! neither step imports the other's file for it.

use std::sync::Arc;

use super::routes::Routes;
use crate::context::Scope;
use crate::timing::Counters;
use crate::transport::{Consumer, WireFormat};
use crate::{Middleware, ProcessingSettings};

/// What one message's path needs, and nothing of the worker's loop: the source's
/// settings, its processors by type, the middleware, the wire format, and what every
/// message's context shares (the source among it).
pub(super) struct Dispatch {
    pub(super) settings: ProcessingSettings,
    /// Every processor of the source, by message type, and the hooks.
    pub(super) routes: Routes,
    pub(super) middleware: Arc<[Arc<dyn Middleware>]>,
    /// The source's wire format; `None` is the native envelope, decoded inline.
    pub(super) wire: Option<Arc<dyn WireFormat>>,
    /// The source's consumer, for what a dead-letter hook asks of it (the error history)
    /// and its policy for unknown types.
    pub(super) consumer: Arc<dyn Consumer>,
    /// What every message's context shares: the bus handlers send with, `source` (the
    /// scope of step marks) and what handlers asked to run after their message's ack
    /// ([`Context::after_ack`](crate::Context::after_ack)).
    pub(super) scope: Arc<Scope>,
    /// Each route's per-type timing counters, in the order of `routes.registrations`;
    /// empty when the host records no timing.
    pub(super) timing: Vec<Arc<Counters>>,
}
