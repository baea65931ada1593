//! The Lua scripts of every transition (`lua/`), run by SHA with a `NOSCRIPT` fallback
//! through bus-redis's [`LuaScript`].

use std::sync::LazyLock;

use bus_redis::{lua, LuaScript};
use fred::prelude::Client;
use fred::types::{MultipleKeys, Value};

use crate::{Error, Result};

pub(crate) static LEGACY_RESERVE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "legacy_reserve",
        ["legacy_common"],
        keys = ["ready", "processing", "deadlines", "recoveries"],
        argv = ["now", "batch:int", "deadline", "max:int", "token_prefix"],
    )
});
pub(crate) static LEGACY_RECOVER: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "legacy_recover",
        ["legacy_common"],
        keys = ["ready", "processing", "deadlines", "recoveries"],
        argv = ["now", "batch:int"],
    )
});
pub(crate) static LEGACY_SETTLE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "legacy_settle",
        keys = ["processing", "deadlines", "target", "recoveries"],
        argv = ["mode", "items..."],
    )
});
pub(crate) static RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "renew",
        keys = ["reservations"],
        argv = ["score", "members..."],
    )
});
pub(crate) static LARAVEL_RESERVE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "laravel_reserve",
        ["laravel_common"],
        keys = ["ready", "reserved", "notify", "delayed"],
        argv = ["now", "batch:int", "until", "max:int", "recover_reserved"],
    )
});
pub(crate) static LARAVEL_RECOVER: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "laravel_recover",
        ["laravel_common"],
        keys = ["ready", "reserved", "notify", "delayed"],
        argv = ["now", "batch:int", "recover_reserved"],
    )
});
pub(crate) static LARAVEL_PUSH: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "laravel_push",
        keys = ["ready", "notify"],
        argv = ["jobs..."],
    )
});
pub(crate) static LARAVEL_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "laravel_release",
        keys = ["reserved", "delayed"],
        argv = ["member", "body", "available_at"],
    )
});
pub(crate) static LARAVEL_RETURN: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "laravel_return",
        keys = ["reserved", "ready", "notify"],
        argv = ["pairs..."],
    )
});
pub(crate) static LARAVEL_DEAD_LETTER: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "laravel_dead_letter",
        keys = ["reserved", "dead", "dead-notify"],
        argv = ["member", "record"],
    )
});
pub(crate) static LARAVEL_OVER_LIMIT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "laravel_over_limit",
        keys = ["over-limit"],
        argv = ["mode", "items..."],
    )
});
pub(crate) static REDRIVE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "redrive",
        keys = ["dead", "target-ready", "notify..."],
        argv = ["pairs..."],
    )
});
// The operator surface (`operator.rs`).
pub(crate) static ADMIN_DELETE_DEAD: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_delete_dead",
        keys = ["dead", "notify..."],
        argv = ["record"],
    )
});
pub(crate) static ADMIN_PURGE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_purge",
        keys = ["ready", "laravel..."],
        argv = ["max_ready:int", "max_delayed:int"],
    )
});

/// Every script of this crate's `lua/`, for the test that checks them all. Not an API.
#[doc(hidden)]
pub fn catalog() -> Vec<&'static LuaScript> {
    vec![
        &LEGACY_RESERVE,
        &LEGACY_RECOVER,
        &LEGACY_SETTLE,
        &RENEW,
        &LARAVEL_RESERVE,
        &LARAVEL_RECOVER,
        &LARAVEL_PUSH,
        &LARAVEL_RELEASE,
        &LARAVEL_RETURN,
        &LARAVEL_DEAD_LETTER,
        &LARAVEL_OVER_LIMIT,
        &REDRIVE,
        &ADMIN_DELETE_DEAD,
        &ADMIN_PURGE,
    ]
}

/// The prelude files of `lua/` (no script of their own).
#[doc(hidden)]
pub const PRELUDES: [&str; 2] = ["legacy_common", "laravel_common"];

// The runner, its reply readers and its errors are bus-redis's, as for every script of
// the bus: a Redis failure or an unexpected reply is a `bus_redis::Error`.

/// Runs a script; its reply as a value.
pub(crate) async fn run(
    script: &LuaScript,
    client: &Client,
    keys: impl Into<MultipleKeys> + Send,
    args: Vec<Value>,
) -> Result<Value> {
    Ok(script.call(client, keys, args).await?)
}

/// Runs a script that replies with an integer.
pub(crate) async fn run_int(
    script: &LuaScript,
    client: &Client,
    keys: impl Into<MultipleKeys> + Send,
    args: Vec<Value>,
) -> Result<i64> {
    Ok(script.run_int(client, keys, args).await?)
}

/// Runs a script that replies with an array of 1/0 flags.
pub(crate) async fn run_flags(
    script: &LuaScript,
    client: &Client,
    keys: impl Into<MultipleKeys> + Send,
    args: Vec<Value>,
) -> Result<Vec<bool>> {
    let items = script.run_array(client, keys, args).await?;
    Ok(items
        .iter()
        .map(|v| script.int(v).map(|n| n == 1))
        .collect::<bus_redis::Result<_>>()?)
}

/// A reply the script never sends.
pub(crate) fn unexpected(script: &LuaScript, reply: &Value) -> Error {
    script.unexpected(reply).into()
}
