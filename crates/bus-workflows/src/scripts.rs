//! This crate's Lua scripts (`lua/*.lua`), each declared with its shape (its KEYS by name,
//! its ARGV), run by bus-redis's [`LuaScript`] (by SHA, with a `NOSCRIPT` fallback). The
//! batch scripts touch one batch's keys (`<prefix>:{wf:<batch>}:*`); the `index_*` and
//! `run_*` scripts the workflow keys shared by every batch and run (`<prefix>:{wf}:*`):
//! docs/redis-layout.md, "Workflows".

use std::sync::LazyLock;

use bus_redis::{lua, LuaScript};

pub(crate) static BATCH_OPEN: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_open",
        ["fire"],
        keys = ["batch", "callbacks"],
        argv = ["policy", "parent", "callbacks..."],
    )
});
pub(crate) static BATCH_ADD: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_add",
        keys = ["batch", "adds", "done"],
        argv = ["token", "count:int", "adder:int"],
    )
});
pub(crate) static BATCH_CLOSE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_close",
        ["fire"],
        keys = ["batch", "callbacks"],
        argv = [],
    )
});
pub(crate) static BATCH_DEFER: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_defer",
        keys = ["batch", "done", "defer"],
        argv = ["index:int", "child"],
    )
});
pub(crate) static BATCH_MARK: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_mark",
        ["fire"],
        keys = ["batch", "done", "settling"],
        argv = ["marks..."],
    )
});
pub(crate) static BATCH_SETTLE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_settle",
        ["fire"],
        keys = [
            "batch",
            "done",
            "settling",
            "dead",
            "results",
            "defer",
            "callbacks"
        ],
        argv = ["settles..."],
    )
});
pub(crate) static BATCH_SENT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_sent",
        ["fire"],
        keys = [
            "batch",
            "done",
            "settling",
            "dead",
            "results",
            "adds",
            "defer",
            "callbacks"
        ],
        argv = ["retention_ms:int", "kinds..."],
    )
});
pub(crate) static BATCH_DONE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_done",
        keys = [
            "batch",
            "done",
            "settling",
            "dead",
            "results",
            "adds",
            "defer",
            "callbacks"
        ],
        argv = ["retention_ms:int"],
    )
});
pub(crate) static BATCH_INSPECT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_inspect",
        ["fire"],
        keys = ["batch", "settling", "callbacks"],
        argv = ["stale_ms:int", "count:int"],
    )
});
pub(crate) static BATCH_STATUS: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_status",
        keys = ["batch", "dead", "defer"],
        argv = ["dead_limit:int"],
    )
});
pub(crate) static BATCH_RESULTS: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "batch_results",
        keys = ["batch", "done", "results", "dead"],
        argv = ["from:int", "count:int"],
    )
});
pub(crate) static INDEX_SWEEP: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "index_sweep",
        keys = ["open"],
        argv = ["limit:int", "every_ms:int"],
    )
});
pub(crate) static INDEX_DONE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "index_done",
        keys = ["open", "recent"],
        argv = ["batch", "retention_ms:int"],
    )
});
pub(crate) static RUN_PARK: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "run_park",
        keys = ["due", "runs", "envs"],
        argv = ["token", "due_ms:int", "record", "envelope"],
    )
});
pub(crate) static RUN_WAIT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "run_wait",
        keys = ["due", "runs", "envs", "signal", "waiters"],
        argv = [
            "token",
            "due_ms:int",
            "record",
            "envelope",
            "outcome_prefix",
            "keep_ms:int"
        ],
    )
});
pub(crate) static RUN_SIGNAL: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "run_signal",
        keys = ["signal", "waiters", "due"],
        argv = [
            "payload",
            "keep_ms:int",
            "outcome_prefix",
            "outcome_keep_ms:int"
        ],
    )
});
pub(crate) static RUN_TAKE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "run_take",
        keys = ["due", "runs", "envs"],
        argv = [
            "limit:int",
            "claim_ms:int",
            "outcome_prefix",
            "waiters_prefix",
            "keep_ms:int"
        ],
    )
});
pub(crate) static RUN_RELAYED: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "run_relayed",
        keys = ["due", "runs", "envs"],
        argv = ["tokens..."],
    )
});
pub(crate) static RUN_LIST: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "run_list",
        keys = ["due", "runs"],
        argv = ["limit:int", "outcome_prefix"],
    )
});

/// Every script of this crate's `lua/`, for the test that checks them all and the docs'
/// table. Not an API.
#[doc(hidden)]
pub fn catalog() -> Vec<&'static LuaScript> {
    vec![
        &BATCH_OPEN,
        &BATCH_ADD,
        &BATCH_CLOSE,
        &BATCH_DEFER,
        &BATCH_MARK,
        &BATCH_SETTLE,
        &BATCH_SENT,
        &BATCH_DONE,
        &BATCH_INSPECT,
        &BATCH_STATUS,
        &BATCH_RESULTS,
        &INDEX_SWEEP,
        &INDEX_DONE,
        &RUN_PARK,
        &RUN_WAIT,
        &RUN_SIGNAL,
        &RUN_TAKE,
        &RUN_RELAYED,
        &RUN_LIST,
    ]
}

/// The prelude files of `lua/` (no script of their own).
#[doc(hidden)]
pub const PRELUDES: [&str; 1] = ["fire"];
