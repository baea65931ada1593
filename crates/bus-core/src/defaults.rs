//! The defaults a setting takes when it is not given.

use std::time::Duration;

/// Default largest encoded envelope a bus accepts (1 MiB).
pub const MAX_MESSAGE_SIZE: usize = 1024 * 1024;

/// How long a step's mark is kept after the step completed: a delivery of the message
/// later than this runs the step again.
pub const ONCE_KEEP: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// How long a deduplication key holds when the send does not say.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(60 * 60);

/// The longest a dead-letter hook may run: after it, the message is dead-lettered without
/// waiting for the hook any longer.
pub const DEAD_LETTER_HOOK_BOUND: Duration = Duration::from_secs(30);

/// How long a singleton processor's lease lasts without a renewal, by default: the
/// holder renews it every third of it, and another host takes over within this plus a
/// third of it after the holder dies.
pub const SINGLETON_TTL: Duration = Duration::from_secs(15);

/// An inbox expires this long after the last reply pushed to it, so an inbox whose
/// requester died is not left behind.
pub const REPLY_KEEP: Duration = Duration::from_secs(60);
