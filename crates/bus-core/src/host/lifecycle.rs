//! The end of a message's life on the host's side: its deadline (expiry), and the
//! processor's hook that runs before it is dead-lettered (docs/concepts.md, "Expiry" and
//! "Before a dead letter").

use crate::defaults;
use crate::headers;
use std::panic::AssertUnwindSafe;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::dispatch::Dispatch;
use super::outcome::{error_chain, panic_message, Outcome};
use super::Registration;
use crate::records::{ErrorRecord, ERROR_HISTORY};
use crate::transport::{Consumer, DeadLetterReason, Receipt};
use crate::{Context, Format, Headers, Result};

/// What a host does with a message received after its deadline
/// ([`ProcessingSettings::on_expiry`](crate::ProcessingSettings::on_expiry)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnExpiry {
    /// Dead-letter it with reason `expired` (after the processor's
    /// [`before_dead_letter`](crate::CommandProcessor::before_dead_letter) hook).
    #[default]
    DeadLetter,
    /// Acknowledge it unhandled (it is gone), with a log line.
    Drop,
}

/// What a processor's `before_dead_letter` hook is told: why the message is being
/// dead-lettered, the error of this delivery, and (on request: one read of the
/// transport) the errors of the earlier ones.
pub struct DeadLettering<'a> {
    pub(crate) reason: DeadLetterReason,
    pub(crate) error: &'a ErrorRecord,
    pub(crate) consumer: &'a dyn Consumer,
    pub(crate) receipt: &'a Receipt,
}

impl std::fmt::Debug for DeadLettering<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLettering")
            .field("reason", &self.reason)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl DeadLettering<'_> {
    /// Why the message is being dead-lettered.
    pub fn reason(&self) -> DeadLetterReason {
        self.reason
    }
    /// The error of this delivery (for `expired`, the deadline that passed).
    pub fn error(&self) -> &ErrorRecord {
        self.error
    }
    /// The message's error history, oldest first and this delivery's last, at most
    /// [`ERROR_HISTORY`] records: what the dead letter will show. Reads the earlier
    /// errors from the transport (one call), so a hook that does not ask costs nothing.
    pub async fn errors(&self) -> Result<Vec<ErrorRecord>> {
        let mut errors = match self.consumer.extras().error_history {
            Some(history) => history.errors(self.receipt).await?,
            None => Vec::new(),
        };
        errors.push(self.error.clone());
        let excess = errors.len().saturating_sub(ERROR_HISTORY);
        errors.drain(..excess);
        Ok(errors)
    }
}

/// The deadline a message's headers carry, if any: `Err` when the header breaks its
/// grammar (`crate::deadline`).
fn deadline(headers: &Headers) -> std::result::Result<Option<u64>, String> {
    if headers.is_empty() {
        return Ok(None);
    }
    match headers.get(headers::EXPIRES_AT) {
        None => Ok(None),
        Some(text) => crate::deadline::parse(text).map(Some).ok_or_else(|| {
            format!(
                "the `{}` header is not milliseconds since the Unix epoch \
                 (`0|[1-9][0-9]*`, at most 18446744073709551615): {text:?}",
                headers::EXPIRES_AT
            )
        }),
    }
}

/// The deadline header's value for a deadline.
pub(crate) fn deadline_header(at: SystemTime) -> String {
    let ms = at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    ms.to_string()
}

/// Whether a message has expired (by the host's clock): the error to record, if so. A
/// malformed deadline is an error of its own (the message is undecodable).
pub(super) enum Expiry {
    Live,
    Expired(ErrorRecord),
    Malformed(String),
}

/// The message's expiry now; the clock is read only when it carries a deadline.
pub(super) fn expiry(headers: &Headers) -> Expiry {
    expiry_at(headers, crate::transport::now_ms)
}

fn expiry_at(headers: &Headers, now_ms: impl FnOnce() -> u64) -> Expiry {
    let deadline = deadline(headers);
    let now_ms = match deadline {
        Ok(Some(_)) => now_ms(),
        _ => 0,
    };
    match deadline {
        Ok(Some(at)) if at <= now_ms => Expiry::Expired(ErrorRecord::now(format!(
            "expired: its deadline ({at} ms since the epoch) passed {} ms before it was received",
            now_ms - at
        ))),
        Ok(_) => Expiry::Live,
        Err(problem) => Expiry::Malformed(problem),
    }
}

/// The parts of a delivery a dead letter's hook needs.
pub(super) struct Dying<'a> {
    pub(super) route: &'a Registration,
    pub(super) body: Bytes,
    pub(super) format: Format,
    pub(super) ctx: &'a Context,
    pub(super) receipt: &'a Receipt,
}

impl Dispatch {
    /// Dead-letters a routed message: runs its processor's hook first, bounded by
    /// [`defaults::DEAD_LETTER_HOOK_BOUND`]; a hook that fails, panics or overruns is logged, and
    /// the message is dead-lettered all the same. Boxed: dead letters are rare, and their
    /// future (the hook under a timeout) inline would make every message's task carry its
    /// size.
    pub(super) fn dead_letter<'a>(
        &'a self,
        dying: Dying<'a>,
        reason: DeadLetterReason,
        error: ErrorRecord,
    ) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let Dying {
                route,
                body,
                format,
                ctx,
                receipt,
            } = dying;
            let dead_letter = DeadLettering {
                reason,
                error: &error,
                consumer: &*self.consumer,
                receipt,
            };
            let hook = std::panic::catch_unwind(AssertUnwindSafe(|| {
                route
                    .invoke
                    .before_dead_letter(body, format, ctx, &dead_letter)
            }));
            let problem = run_hook(hook).await;
            if let Some(problem) = problem {
                tracing::warn!(processor = route.processor, %reason, problem,
                    "the processor's before_dead_letter hook failed; dead-lettering the message anyway");
            }
            Outcome::DeadLetter(reason, error)
        })
    }
}

/// Runs a hook that decoded (or not), bounded: what went wrong, if anything.
async fn run_hook(
    hook: std::thread::Result<Result<Option<super::registration::HookCall<'_>>>>,
) -> Option<String> {
    match hook {
        Ok(Ok(None)) => None,
        Ok(Ok(Some(hook))) => {
            let running = AssertUnwindSafe(hook).catch_unwind();
            match tokio::time::timeout(defaults::DEAD_LETTER_HOOK_BOUND, running).await {
                Ok(Ok(Ok(()))) => None,
                Ok(Ok(Err(e))) => Some(error_chain(&*e)),
                Ok(Err(panic)) => Some(format!("panicked: {}", panic_message(&*panic))),
                Err(_) => Some(format!(
                    "still running after {:?}",
                    defaults::DEAD_LETTER_HOOK_BOUND
                )),
            }
        }
        Ok(Err(e)) => Some(format!("the body did not decode: {}", error_chain(&e))),
        Err(panic) => Some(format!(
            "the body's decoder panicked: {}",
            panic_message(&*panic)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> Headers {
        [(headers::EXPIRES_AT.to_owned(), value.to_owned())].into()
    }

    #[test]
    fn a_deadline_in_the_past_has_expired_and_one_ahead_has_not() {
        assert!(matches!(
            expiry_at(&headers("1000"), || 1000),
            Expiry::Expired(_)
        ));
        assert!(matches!(expiry_at(&headers("1001"), || 1000), Expiry::Live));
        assert!(matches!(expiry_at(&Headers::new(), || 1000), Expiry::Live));
    }

    #[test]
    fn a_malformed_deadline_says_what_it_found() {
        let Expiry::Malformed(problem) = expiry_at(&headers("soon"), || 1000) else {
            panic!("a malformed deadline was accepted");
        };
        assert!(problem.contains("\"soon\""), "{problem}");
    }

    #[test]
    fn the_header_round_trips() {
        let at = UNIX_EPOCH + std::time::Duration::from_millis(1_234_567);
        assert_eq!(
            deadline(&headers(&deadline_header(at))),
            Ok(Some(1_234_567))
        );
    }
}
