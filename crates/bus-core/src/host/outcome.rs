//! What happens to a message after its handler ran (or could not run), and the text of a
//! failure: shared by the message's path (`handle`), the worker loop and its metrics.

use std::time::Duration;

use crate::records::ErrorRecord;
use crate::transport::DeadLetterReason;

/// What happens to a message after its handler ran (or could not run).
#[derive(Debug)]
pub(super) enum Outcome {
    Ack,
    Retry(Duration, ErrorRecord),
    DeadLetter(DeadLetterReason, ErrorRecord),
}

impl Outcome {
    pub(super) fn undecodable(error: impl Into<String>) -> Self {
        Outcome::DeadLetter(DeadLetterReason::Undecodable, ErrorRecord::now(error))
    }
}

/// An error and its sources, as one line.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    crate::ErrorChain(error).to_string()
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[test]
    fn each_cause_shows_once() {
        let error = crate::Error::transport(Inner);
        assert_eq!(error_chain(&error), "transport error: inner");
    }
}
