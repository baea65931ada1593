//! Reliability tests (see `tests/`) and the consumer process they kill
//! (`chaos-consumer`). Shared here: the message and the keys both sides use, and how
//! each of those processes starts (`process`).

#![warn(missing_docs)]
pub mod outbox;
pub mod process;

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

/// A request that `lifecycle-host` answers with `n * 2` (request/reply tests).
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "ask")]
pub struct Ask {
    /// Doubled in the reply.
    pub n: u64,
    /// How long the responder waits before it replies.
    pub delay_ms: u64,
}

/// String set (to the responder's pid) when `lifecycle-host` starts handling the `Ask`
/// with this `n`.
pub fn asked_key(prefix: &str, n: u64) -> String {
    format!("{prefix}:test:asked:{n}")
}

/// A message whose handler charges once (`lifecycle-host`, effects-once tests).
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "charge")]
pub struct Charge {
    /// The order charged.
    pub order: u64,
}

/// Counter of the charges made for `order`: the step's effect, outside the bus's keys.
pub fn charges_key(prefix: &str, order: u64) -> String {
    format!("{prefix}:test:charges:{order}")
}

/// String set (to the pid) once a first delivery of `order` finished its step; that
/// delivery then blocks until its process is killed.
pub fn charged_key(prefix: &str, order: u64) -> String {
    format!("{prefix}:test:charged:{order}")
}

/// List of `"<order> <step result> <delivery count> <pid>"`, one per handler that got past
/// the step and finished.
pub fn charge_done_key(prefix: &str) -> String {
    format!("{prefix}:test:charge-done")
}

/// String set by a `lifecycle-host` process to its pid once its host runs.
pub fn lifecycle_up_key(prefix: &str, pid: u32) -> String {
    format!("{prefix}:test:lifecycle-up:{pid}")
}

/// The message of the recurring runs (`cron-host`), on a queue of its own.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "cron-beat")]
pub struct Beat;

/// List of `"<pid> <tick ms>"`, one per `Beat` handled by a `cron-host` (the tick from
/// the message's `bus-schedule-tick` header).
pub fn cron_ticks_key(prefix: &str) -> String {
    format!("{prefix}:test:cron-ticks")
}

/// String set by a `cron-host` process to its pid once its host runs.
pub fn cron_up_key(prefix: &str, pid: u32) -> String {
    format!("{prefix}:test:cron-up:{pid}")
}

/// While this key exists, handlers in `flaky` mode fail (a downstream outage).
pub fn failing_key(prefix: &str) -> String {
    format!("{prefix}:test:failing")
}

/// While this key exists, handlers in `flaky` mode push `"<pid> <start_ms>"` to
/// `held_key` and never finish (a downstream call that hangs).
pub fn holding_key(prefix: &str) -> String {
    format!("{prefix}:test:holding")
}

/// List of `"<pid> <start_ms>"`, one per `flaky` run held by `holding_key`.
pub fn held_key(prefix: &str) -> String {
    format!("{prefix}:test:held")
}

/// List of `"<pid> <start_ms> <end_ms> <ok|fail>"`, one per `flaky` handler run (wall
/// clock of the one machine the processes share): the breaker tests measure from it.
pub fn attempts_key(prefix: &str) -> String {
    format!("{prefix}:test:attempts")
}
