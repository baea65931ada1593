//! Several message types on one queue: each delivery goes to the processor of its type,
//! and what no processor knows goes to the unknown-type hook or the dead letters.

use std::fmt;
use std::sync::Arc;

use std::collections::HashMap;

use super::registration::Origin;
use super::Registration;
use crate::names::QueueNames;
use crate::transport::Source;
use crate::{Error, MessageId, Result, Transport};

/// A delivery whose type no processor of its queue handles, as the unknown-type hook
/// sees it. After the hook returns, the message is acknowledged.
#[derive(Debug)]
#[non_exhaustive]
pub struct UnknownMessage<'a> {
    /// Where it was delivered.
    pub source: &'a Source,
    /// The type it declares.
    pub message_type: &'a str,
    /// Its message id.
    pub message_id: &'a MessageId,
    /// The stored element, unchanged.
    pub payload: &'a [u8],
}

/// A delivery that failed, as the error observer sees it: every failure, whether it is
/// retried or dead-lettered.
#[derive(Debug)]
#[non_exhaustive]
pub struct FailedMessage<'a> {
    /// Where it was delivered.
    pub source: &'a Source,
    /// What went wrong, with its causes.
    pub error: &'a str,
    /// `"retry"` or `"dead_letter"`.
    pub outcome: &'static str,
    /// Its type and id, when the envelope decoded.
    pub message: Option<(&'a str, &'a MessageId)>,
    /// The stored element, unchanged.
    pub payload: &'a [u8],
}

type UnknownHook = dyn Fn(UnknownMessage<'_>) + Send + Sync;
type ErrorHook = dyn Fn(FailedMessage<'_>) + Send + Sync;

/// The hooks a host calls on unknown types and on failures.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) unknown_type: Option<Arc<UnknownHook>>,
    pub(crate) on_error: Option<Arc<ErrorHook>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("unknown_type", &self.unknown_type.is_some())
            .field("on_error", &self.on_error.is_some())
            .finish()
    }
}

/// The processors of one source, by message type. They share the source's consumer, so
/// the host refuses processors of one source whose settings differ.
#[derive(Debug)]
pub(crate) struct Routes {
    pub(crate) registrations: Vec<Registration>,
    pub(crate) hooks: Hooks,
}

impl Routes {
    /// The processor of `message_type` and its position; a linear look-up, since queues
    /// carry few types.
    pub(crate) fn find(&self, message_type: &str) -> Option<(usize, &Registration)> {
        self.registrations
            .iter()
            .enumerate()
            .find(|(_, r)| r.message.message_type() == message_type)
    }
}

/// The registrations grouped by source, on their run-time names: the checks of
/// `HostBuilder::build` that need every registration (two processors of one message type,
/// a message the transport cannot carry, settings that differ on one consumer).
pub(crate) fn group(
    mut registrations: Vec<Registration>,
    names: &QueueNames,
    transport: &dyn Transport,
    hooks: &Hooks,
) -> Result<Vec<Routes>> {
    // The run-time names, the same the bus sends with.
    if !names.is_empty() {
        for r in &mut registrations {
            let real = names.resolve(&r.message)?.to_owned();
            // A subscription keeps its name: it belongs to its topic, which is mapped.
            match &mut r.source {
                Source::Queue(queue) => *queue = real,
                Source::Subscription { topic, .. } => *topic = real,
            }
        }
    }
    if !transport.capabilities().topics {
        if let Some(r) = registrations
            .iter()
            .find(|r| matches!(r.source, Source::Subscription { .. }))
        {
            return Err(Error::Config(format!(
                "processor `{}` of event `{}` ({}) cannot run: the transport {} has no topics \
                 (Transport::capabilities); run it on a transport with topics, or send the \
                 message as a command",
                r.processor,
                r.message.rust_type(),
                r.source,
                transport_name(transport),
            )));
        }
    }
    // Explicit registrations first, so that a processor registered both ways keeps
    // its explicit value and settings.
    let (mut ordered, registry): (Vec<_>, Vec<_>) = registrations
        .into_iter()
        .partition(|r| r.origin == Origin::Explicit);
    ordered.extend(registry);
    // Processors of one source share its consumer, routed by message type.
    let mut routes: Vec<Routes> = Vec::new();
    let mut seen: HashMap<(Source, &str), &'static str> = HashMap::new();
    for r in ordered {
        let key = (r.source.clone(), r.message.message_type());
        if let Some(&first) = seen.get(&key) {
            if r.origin == Origin::Registry && first == r.processor {
                tracing::debug!(
                    processor = r.processor,
                    source = %r.source,
                    "registered explicitly and by #[processor]: the explicit registration is kept"
                );
                continue;
            }
            return Err(Error::Config(format!(
                "two processors are registered for message type `{}` on {}: `{}` and `{}`",
                r.message.message_type(),
                r.source,
                first,
                r.processor
            )));
        }
        seen.insert(key, r.processor);
        match routes
            .iter_mut()
            .find(|g| g.registrations[0].source == r.source)
        {
            // One source has one consumer, so its processors must agree on how it
            // is consumed; otherwise the first's settings would silently win.
            Some(group) if group.registrations[0].settings != r.settings => {
                return Err(Error::Config(format!(
                    "the processors of {} ask for different processing settings (`{}` and `{}`); \
                     processors that share a queue or subscription share its consumer: give them the same settings",
                    r.source,
                    group.registrations[0].message.message_type(),
                    r.message.message_type()
                )));
            }
            Some(group) => group.registrations.push(r),
            None => routes.push(Routes {
                registrations: vec![r],
                hooks: hooks.clone(),
            }),
        }
    }
    Ok(routes)
}

/// A transport's type name for messages: its `Debug` output up to the first field.
fn transport_name(transport: &dyn Transport) -> String {
    let debug = format!("{transport:?}");
    let end = debug
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(debug.len());
    debug[..end].to_owned()
}
