//! What one message's path needs ([`Dispatch`]), apart from the steps that use it
//! (`handle.rs`: decode, route, run; `lifecycle.rs`: expiry and dead letters), so
//! neither step imports the other's file for it.

use std::sync::Arc;

use super::after_ack::AfterAcks;
use super::routes::Routes;
use crate::timing::Counters;
use crate::transport::{Consumer, Source, WireFormat};
use crate::{Bus, Middleware, ProcessingSettings};

/// What one message's path needs, and nothing of the worker's loop: the source, its
/// settings, its processors by type, the middleware, the bus handlers send with, and the
/// wire format.
pub(super) struct Dispatch {
    pub(super) source: Source,
    pub(super) settings: ProcessingSettings,
    /// Every processor of the source, by message type, and the hooks.
    pub(super) routes: Routes,
    pub(super) middleware: Arc<[Arc<dyn Middleware>]>,
    pub(super) bus: Bus,
    /// The source's wire format; `None` is the native envelope, decoded inline.
    pub(super) wire: Option<Arc<dyn WireFormat>>,
    /// What handlers asked to run after their message's ack ([`Context::after_ack`]).
    pub(super) after_ack: Arc<AfterAcks>,
    /// The source's consumer, for what a dead-letter hook asks of it (the error history)
    /// and its policy for unknown types.
    pub(super) consumer: Arc<dyn Consumer>,
    /// `source`, shared with every message's context (the scope of its step marks).
    pub(super) scope: Arc<Source>,
    /// Each route's per-type timing counters, in the order of `routes.registrations`;
    /// empty when the host records no timing.
    pub(super) timing: Vec<Arc<Counters>>,
}
