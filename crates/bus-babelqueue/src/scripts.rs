//! The Lua scripts of every transition (`lua/`), run by SHA with a `NOSCRIPT` fallback
//! through bus-redis's [`LuaScript`].

use std::sync::LazyLock;

use bus_redis::{lua, LuaScript};
use fred::prelude::Client;
use fred::types::{MultipleKeys, Value};

use crate::{Error, Result};

pub(crate) static LEGACY_RESERVE: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("legacy_reserve", ["legacy_common"]));
pub(crate) static LEGACY_RECOVER: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("legacy_recover", ["legacy_common"]));
pub(crate) static LEGACY_SETTLE: LazyLock<LuaScript> = LazyLock::new(|| lua!("legacy_settle"));
pub(crate) static RENEW: LazyLock<LuaScript> = LazyLock::new(|| lua!("renew"));
pub(crate) static LARAVEL_RESERVE: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("laravel_reserve", ["laravel_common"]));
pub(crate) static LARAVEL_RECOVER: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("laravel_recover", ["laravel_common"]));
pub(crate) static LARAVEL_PUSH: LazyLock<LuaScript> = LazyLock::new(|| lua!("laravel_push"));
pub(crate) static LARAVEL_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| lua!("laravel_release"));
pub(crate) static LARAVEL_RETURN: LazyLock<LuaScript> = LazyLock::new(|| lua!("laravel_return"));
pub(crate) static LARAVEL_DEAD_LETTER: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("laravel_dead_letter"));
pub(crate) static LARAVEL_OVER_LIMIT: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("laravel_over_limit"));
pub(crate) static REDRIVE: LazyLock<LuaScript> = LazyLock::new(|| lua!("redrive"));
// The operator surface (`operator.rs`).
pub(crate) static ADMIN_DELETE_DEAD: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("admin_delete_dead"));
pub(crate) static ADMIN_PURGE: LazyLock<LuaScript> = LazyLock::new(|| lua!("admin_purge"));

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
