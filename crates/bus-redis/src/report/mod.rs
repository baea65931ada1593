//! What hosts report for operators: heartbeats (`heartbeat.rs`) and per-type timing
//! (`timing.rs`), each a reporter the host's runner calls.

pub(crate) mod heartbeat;
pub(crate) mod timing;
