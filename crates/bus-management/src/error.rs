//! The error type of bus-management.

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong in management. A Redis failure, an unexpected script reply or an
/// invalid configuration is bus-redis's error, as everywhere in the bus.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis failed, the configuration is invalid (URL, prefix, credentials), or a
    /// script replied with something it never sends.
    #[error(transparent)]
    Redis(#[from] bus_redis::Error),
    /// An error of the bus: an invalid queue, topic or subscription name, an envelope that
    /// does not encode or is too large, a saga store error.
    #[error(transparent)]
    Bus(#[from] bus_core::Error),
    /// A queue or subscription name that is not `queue` or `topic/subscription`.
    #[error("invalid queue {name:?}: {reason}")]
    InvalidSource {
        /// What was given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A message body to send is not JSON.
    #[error("the message body is not valid JSON: {0}")]
    InvalidBody(#[source] serde_json::Error),
    /// A subscription to remove still holds messages; nothing was changed.
    #[error(
        "subscription {name} of topic {topic} still holds messages ({ready} ready, {in_flight} \
         in flight, {delayed} delayed, {dead} dead letters); nothing was changed \
         (remove it with `force` to delete them)"
    )]
    NotEmpty {
        /// The topic.
        topic: String,
        /// The subscription.
        name: String,
        /// Messages waiting.
        ready: u64,
        /// Messages reserved by consumers.
        in_flight: u64,
        /// Messages scheduled.
        delayed: u64,
        /// Dead letters.
        dead: u64,
    },
    /// A queue or subscription that no consumer registered and that holds no key, under
    /// the prefix in use: a typo in the name or in the prefix.
    #[error("{}", unknown_source(name, prefix, known, other_prefixes))]
    UnknownSource {
        /// What was asked for: `queue` or `topic/subscription`.
        name: String,
        /// The key prefix in use.
        prefix: String,
        /// The queues and subscriptions that exist under that prefix.
        known: Vec<String>,
        /// When none does: the other prefixes under which the bus has keys.
        other_prefixes: Vec<String>,
    },
    /// `<kind>:<queue>` with a kind the fleet does not serve.
    #[error("{}", unknown_kind(kind, known))]
    UnknownKind {
        /// The kind given.
        kind: String,
        /// The kinds served.
        known: Vec<String>,
    },
    /// A queue of another kind (a BabelQueue queue) that holds no key in this Redis.
    #[error("there is no {kind} queue {name} in this Redis (no key of it exists)")]
    UnknownQueue {
        /// The queue's address.
        name: String,
        /// Its kind.
        kind: &'static str,
    },
    /// A change only the bus's own layout has (a cancel, a send, a search's action, an
    /// edit), asked of another kind's queue; nothing was changed. What a kind declares it
    /// lacks is [`bus_core::Error::Unsupported`] instead (as [`Error::Bus`]).
    #[error("`{action}` works on the bus's own queues; {address} is a {kind} queue")]
    NativeOnly {
        /// The action, as the tools name it.
        action: &'static str,
        /// The queue's address.
        address: String,
        /// Its kind.
        kind: &'static str,
    },
    /// BabelQueue's own operation failed (a redrive): Redis, or an invalid queue name.
    #[error(transparent)]
    Babel(#[from] bus_babelqueue::Error),
    /// A requeue from a queue of one kind to a queue of another: the wire formats
    /// differ, so it is refused and nothing moves.
    #[error("cannot requeue from {from} to {to}: they are queues of different kinds")]
    AcrossKinds {
        /// The source queue's address.
        from: String,
        /// The target's address.
        to: String,
    },
}

// --- the fleet (`fleet.rs`) ---

fn unknown_kind(kind: &str, known: &[String]) -> String {
    format!(
        "unknown kind of queue {kind:?} (in `{kind}:<queue>`); this tool knows: {}",
        known.join(", ")
    )
}

fn unknown_source(name: &str, prefix: &str, known: &[String], other: &[String]) -> String {
    let head = format!("there is no queue or subscription {name} under prefix {prefix}");
    if !known.is_empty() {
        format!("{head}; it has: {}", known.join(", "))
    } else if !other.is_empty() {
        format!(
            "{head}, nor any other; the bus has keys under prefix: {}",
            other.join(", ")
        )
    } else {
        format!("{head}, nor any other, and no other prefix holds keys of the bus")
    }
}
