//! Queue and topic names chosen at run time: a message type's wire name
//! ([`Message::NAME`](crate::Message::NAME)) mapped to another one at start-up, per type or
//! by a naming convention for all. A bus and a host apply the same [`QueueNames`] on send
//! and on consume, so the two sides agree.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::message::validate_name;
use crate::{MessageDescriptor, MessageKind, Result};

type Convention = dyn Fn(&str) -> String + Send + Sync;

/// How a message type's queue (command) or topic (event) is named at run time.
///
/// A name given for one type ([`QueueNames::queue_for`]) is used as it is; every other
/// type's name goes through the convention ([`QueueNames::convention`]) when there is
/// one, else it is its declared name. Types are told apart by their wire identity (their
/// declared name and [`Message::TYPE`](crate::Message::TYPE)), which is what a delivery
/// carries.
#[derive(Clone, Default)]
pub struct QueueNames {
    per_type: HashMap<(&'static str, &'static str), String>,
    convention: Option<Arc<Convention>>,
    /// Resolved names, kept for the life of the process so that a send borrows its name
    /// as the transport calls expect (`&'static str`): one per mapped type, never per send.
    /// A read lock on the send path: senders do not wait on each other.
    resolved: Arc<RwLock<HashMap<(&'static str, &'static str), &'static str>>>,
}

impl fmt::Debug for QueueNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueNames")
            .field("per_type", &self.per_type)
            .field("convention", &self.convention.is_some())
            .finish_non_exhaustive()
    }
}

impl QueueNames {
    /// Sends and consumes message type `M` on `name` instead of its declared name (its
    /// queue for a command, its topic for an event).
    pub fn queue_for<M: crate::Message>(mut self, name: impl Into<String>) -> Self {
        self.per_type.insert((M::NAME, M::TYPE), name.into());
        self.resolved = Arc::default();
        self
    }

    /// Names every queue and topic not named per type by `convention` applied to its
    /// declared name, e.g. `|name| format!("staging-{name}")`.
    pub fn convention(
        mut self,
        convention: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Self {
        self.convention = Some(Arc::new(convention));
        self.resolved = Arc::default();
        self
    }

    /// Whether any name is mapped (else every type uses its declared name).
    pub fn is_empty(&self) -> bool {
        self.per_type.is_empty() && self.convention.is_none()
    }

    /// The real queue or topic of a message type, checked as a name.
    pub fn resolve(&self, message: &MessageDescriptor) -> Result<&'static str> {
        let what = match message.kind() {
            MessageKind::Event => "topic",
            _ => "queue",
        };
        if self.is_empty() {
            validate_name(what, message.name())?;
            return Ok(message.name());
        }
        let key = (message.name(), message.message_type());
        let known = self.resolved.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(name) = known.get(&key) {
            return Ok(name);
        }
        drop(known);
        let name = match (self.per_type.get(&key), &self.convention) {
            (Some(name), _) => name.clone(),
            (None, Some(convention)) => convention(message.name()),
            (None, None) => message.name().to_owned(),
        };
        validate_name(what, &name)?;
        let name = intern(name);
        self.resolved
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, name);
        Ok(name)
    }
}

/// One `&'static str` per distinct name in the process: many buses with the same
/// convention (tests, or one per request) share it instead of leaking a copy each.
fn intern(name: String) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = names.iter().find(|n| **n == name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.push(leaked);
    leaked
}
