//! Where a consumer reads ([`Source`]): a leaf that the seams (transport, records, flow
//! control) share, so none of them imports another for it.

use std::fmt;

use crate::message::validate_name;
use crate::Result;

/// Where a consumer reads: a command queue, or one subscription of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A command queue.
    Queue(String),
    /// One named subscription of a topic.
    Subscription {
        /// The event's topic.
        topic: String,
        /// The subscription's name.
        name: String,
    },
}

impl Source {
    /// A command queue, with its name checked.
    pub fn queue(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        validate_name("queue", &name)?;
        Ok(Source::Queue(name))
    }
    /// A topic's subscription, with both names checked.
    pub fn subscription(topic: impl Into<String>, name: impl Into<String>) -> Result<Self> {
        let (topic, name) = (topic.into(), name.into());
        validate_name("topic", &topic)?;
        validate_name("subscription", &name)?;
        Ok(Source::Subscription { topic, name })
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Queue(q) => write!(f, "queue {q}"),
            Source::Subscription { topic, name } => {
                write!(f, "subscription {name} of topic {topic}")
            }
        }
    }
}
