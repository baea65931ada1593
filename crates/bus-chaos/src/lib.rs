//! Reliability tests (see `tests/`) and the consumer process they kill
//! (`chaos-consumer`). Shared here: the message and the keys both sides use.

use bus_core::RedisCommand;
use serde::{Deserialize, Serialize};

/// The message of every chaos run.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "chaos")]
pub struct Job {
    /// Unique per run.
    pub n: u64,
}

/// Set of the `n` of every job a handler finished (before its ack).
pub fn processed_key(prefix: &str) -> String {
    format!("{prefix}:test:processed")
}

/// Counter of handler runs, duplicates included.
pub fn runs_key(prefix: &str) -> String {
    format!("{prefix}:test:runs")
}

/// Counter of the runs of job 0 in `poison` mode (the one that aborts the process).
pub fn poison_runs_key(prefix: &str) -> String {
    format!("{prefix}:test:poison-runs")
}

/// List of `"<n> <start_ms> <end_ms>"` per handler run, by the handlers' own clock, when
/// the consumer runs with `CHAOS_TIMELINE=1` (flow-control tests measure from it).
pub fn timeline_key(prefix: &str) -> String {
    format!("{prefix}:test:timeline")
}

/// The message of the singleton runs (`singleton-host`), on a queue of its own.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "solo")]
pub struct Solo {
    /// Unique per run.
    pub n: u64,
}

/// List of `"<pid> <n> <start µs> <end µs>"`, one per finished `Solo` handler run (wall
/// clock of the one machine the processes share).
pub fn solo_runs_key(prefix: &str) -> String {
    format!("{prefix}:test:solo-runs")
}

/// String set by a `singleton-host` process to its pid once its host runs.
pub fn solo_up_key(prefix: &str, pid: u32) -> String {
    format!("{prefix}:test:solo-up:{pid}")
}

/// While this key exists, handlers in `flaky` mode fail (a downstream outage).
pub fn failing_key(prefix: &str) -> String {
    format!("{prefix}:test:failing")
}

/// List of `"<pid> <start_ms> <end_ms> <ok|fail>"`, one per `flaky` handler run (wall
/// clock of the one machine the processes share): the breaker tests measure from it.
pub fn attempts_key(prefix: &str) -> String {
    format!("{prefix}:test:attempts")
}
