//! Message contracts: what a command, an event and a subscription declare.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Error, Format, Result};

/// Whether a message is a command (one queue, one consumer) or an event (a topic, many
/// subscriptions).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageKind {
    /// Sent to one queue and handled by one logical consumer.
    Command,
    /// Published to a topic; every subscription gets its own copy.
    Event,
}

/// A message type: its wire name, kind and serializer.
///
/// Implement it with `#[derive(RedisCommand)]` or `#[derive(RedisEvent)]`; hand-written
/// impls work too.
pub trait Message: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Wire name: the queue of a command, the topic of an event.
    const NAME: &'static str;
    /// The message type written in the envelope and routed on: the wire name by default.
    /// Give each type its own (a BabelQueue URN such as `urn:babel:orders:created`, say)
    /// to carry several types on one queue: the host routes each delivery to the
    /// processor of its type.
    const TYPE: &'static str = Self::NAME;
    /// Command or event.
    const KIND: MessageKind;
    /// The body's serializer; `None` uses the bus's default.
    const FORMAT: Option<Format> = None;

    /// What a host needs to know to register and list this message type.
    fn descriptor() -> MessageDescriptor
    where
        Self: Sized,
    {
        MessageDescriptor {
            name: Self::NAME,
            message_type: Self::TYPE,
            kind: Self::KIND,
            format: Self::FORMAT,
            rust_type: std::any::type_name::<Self>(),
        }
    }
}

/// A message with exactly one queue (its [`Message::NAME`]) and one logical consumer.
pub trait Command: Message {}

/// A message published to a topic (its [`Message::NAME`]).
pub trait Event: Message {}

/// A named subscription of an event type: each subscription receives its own copy of
/// every event published after it first started.
pub trait Subscription: Send + Sync + 'static {
    /// The event this subscription receives.
    type Event: Event;
    /// The subscription's name, unique per topic.
    const NAME: &'static str;
}

/// The registration facts of a message type, for listing what a host knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageDescriptor {
    name: &'static str,
    message_type: &'static str,
    kind: MessageKind,
    format: Option<Format>,
    rust_type: &'static str,
}

impl MessageDescriptor {
    /// The wire name (queue or topic).
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// The type in the envelope, routed on ([`Message::TYPE`]).
    pub fn message_type(&self) -> &'static str {
        self.message_type
    }
    /// Command or event.
    pub fn kind(&self) -> MessageKind {
        self.kind
    }
    /// The declared serializer, if any.
    pub fn format(&self) -> Option<Format> {
        self.format
    }
    /// The Rust type's name, for diagnostics.
    pub fn rust_type(&self) -> &'static str {
        self.rust_type
    }
}

/// Longest accepted queue, topic or subscription name.
pub const MAX_NAME_LEN: usize = 200;

/// Checks a queue, topic or subscription name: non-empty, at most [`MAX_NAME_LEN`] bytes,
/// only ASCII letters, digits, `.`, `_` and `-` (anything else could break a key layout:
/// `{`, `}`, `:`, spaces, glob characters).
pub fn validate_name(what: &'static str, name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "names must not be empty"
    } else if name.len() > MAX_NAME_LEN {
        "names may be at most 200 bytes long"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        "names may contain only ASCII letters, digits, '.', '_' and '-'"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        what,
        name: name.to_owned(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(validate_name("queue", "thumbnail-requested.v2_x").is_ok());
        for bad in ["", "a:b", "a{b}", "a b", "a*", "ü"] {
            assert!(validate_name("queue", bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_name("queue", &"a".repeat(201)).is_err());
        let err = validate_name("topic", "x:y").unwrap_err().to_string();
        assert!(err.contains("topic") && err.contains("x:y"), "{err}");
    }
}
