//! What a send can be beyond a plain, keyed or delayed one (those are `transport.rs`):
//! deduplicated (`dedup.rs`), a delayed message read, cancelled or moved by id
//! (`schedule.rs`), a recurring schedule's tick (`recurring.rs`), a reply to a request
//! (`reply.rs`). Each says what to write; the write layer (`write/`) writes it.

pub(crate) mod dedup;
pub(crate) mod recurring;
pub(crate) mod reply;
pub(crate) mod schedule;
