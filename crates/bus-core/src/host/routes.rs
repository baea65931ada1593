//! Several message types on one queue: each delivery goes to the processor of its type,
//! and what no processor knows goes to the unknown-type hook or the dead letters.

use std::fmt;
use std::sync::Arc;

use super::Registration;
use crate::transport::Source;
use crate::MessageId;

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
    /// The processor of `message_type`; a linear look-up, since queues carry few types.
    pub(crate) fn find(&self, message_type: &str) -> Option<&Registration> {
        self.registrations
            .iter()
            .find(|r| r.message.message_type() == message_type)
    }
}
