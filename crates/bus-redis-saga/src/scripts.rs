//! The saga scripts (`lua/*.lua`), run by bus-redis's [`LuaScript`] (SHA with a
//! `NOSCRIPT` fallback, its reply readers and errors), and their status replies.

use std::sync::LazyLock;

use bus_core::{Error, Result};
use bus_redis::{lua, LuaScript};
use fred::prelude::Client;
use fred::types::Value;

// The shared `inspect` helper (lua/common.lua) is prepended at compile time.
// Each script is hashed once per process, on first use.
pub(crate) static CREATE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "create",
        ["common"],
        keys = ["saga"],
        argv = ["data", "stamp", "ttl_ms:int"],
    )
});
pub(crate) static UPDATE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "update",
        ["common"],
        keys = ["saga"],
        argv = ["data", "expected", "stamp"],
    )
});

/// Every script of this crate's `lua/`, for the test that checks them all. Not an API.
#[doc(hidden)]
pub fn catalog() -> Vec<&'static LuaScript> {
    vec![&CREATE, &UPDATE, &COMPLETE, &DELETE, &GET]
}

/// The prelude files of `lua/` (no script of their own).
#[doc(hidden)]
pub const PRELUDES: [&str; 1] = ["common"];
pub(crate) static COMPLETE: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("complete", ["common"], keys = ["saga"], argv = ["expected"],));
pub(crate) static DELETE: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("delete", ["common"], keys = ["saga"], argv = [],));
pub(crate) static GET: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("get", ["common"], keys = ["saga"], argv = [],));

/// What a saga script answered.
#[derive(Debug)]
pub(crate) enum Reply {
    /// Done; any further values of the reply (`get`: data, stamp).
    Ok(Vec<Value>),
    NotFound,
    Exists,
    Conflict,
    /// Something else is at the key; what it is.
    NotASaga(String),
}

impl Reply {
    /// The reply as a store error for `key`; `Ok` is the caller's business.
    pub(crate) fn into_error(self, key: &str, script: &LuaScript) -> Error {
        let key = key.to_owned();
        match self {
            Reply::NotFound => Error::SagaNotFound { key },
            Reply::Exists => Error::SagaExists { key },
            Reply::Conflict => Error::SagaConflict { key },
            Reply::NotASaga(reason) => Error::NotASaga { key, reason },
            Reply::Ok(values) => script.unexpected(&Value::Array(values)).into(),
        }
    }
}

/// Runs a saga script on one saga key and reads its status reply. A Redis failure and a
/// reply no saga script sends are bus-redis's errors, as for every script of the bus.
pub(crate) async fn run(
    script: &LuaScript,
    client: &Client,
    key: &str,
    args: Vec<Value>,
) -> Result<Reply> {
    let mut items = script
        .run_array(client, vec![key.to_owned()], args)
        .await?
        .into_iter();
    let status = items.next().and_then(|v| v.as_string()).unwrap_or_default();
    Ok(match status.as_str() {
        "OK" => Reply::Ok(items.collect()),
        "NOT_FOUND" => Reply::NotFound,
        "EXISTS" => Reply::Exists,
        "CONFLICT" => Reply::Conflict,
        "NOT_A_SAGA" => {
            let what = items.next().and_then(|v| v.as_string());
            Reply::NotASaga(what.unwrap_or_else(|| "something else".into()))
        }
        other => return Err(script.unexpected(&Value::from(other)).into()),
    })
}
