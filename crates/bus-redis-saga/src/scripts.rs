//! The saga scripts (`lua/*.lua`), run by SHA with a `NOSCRIPT` fallback, and their
//! replies.

use std::sync::LazyLock;

use bus_core::{Error, Result};
use bus_redis::LuaScript;
use fred::prelude::Client;
use fred::types::Value;

/// One script, with the saga replies' reader.
#[derive(Debug)]
pub(crate) struct Lua(LuaScript);

macro_rules! lua {
    ($name:literal) => {
        // The shared `inspect` helper is prepended at compile time.
        Lua(LuaScript::new(
            $name,
            concat!(
                include_str!("../lua/common.lua"),
                include_str!(concat!("../lua/", $name, ".lua"))
            ),
        ))
    };
}

// Each script is hashed once per process, on first use.
pub(crate) static CREATE: LazyLock<Lua> = LazyLock::new(|| lua!("create"));
pub(crate) static UPDATE: LazyLock<Lua> = LazyLock::new(|| lua!("update"));
pub(crate) static COMPLETE: LazyLock<Lua> = LazyLock::new(|| lua!("complete"));
pub(crate) static DELETE: LazyLock<Lua> = LazyLock::new(|| lua!("delete"));
pub(crate) static GET: LazyLock<Lua> = LazyLock::new(|| lua!("get"));

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
    pub(crate) fn into_error(self, key: &str, script: &str) -> Error {
        let key = key.to_owned();
        match self {
            Reply::NotFound => Error::SagaNotFound { key },
            Reply::Exists => Error::SagaExists { key },
            Reply::Conflict => Error::SagaConflict { key },
            Reply::NotASaga(reason) => Error::NotASaga { key, reason },
            Reply::Ok(_) => unexpected(script, "OK"),
        }
    }
}

impl Lua {
    /// Runs the script on one saga key; loads it first if Redis does not know it.
    pub(crate) async fn run(&self, client: &Client, key: &str, args: Vec<Value>) -> Result<Reply> {
        let reply: Value = self
            .0
            .run(client, vec![key.to_owned()], args)
            .await
            .map_err(Error::transport)?;
        let mut items = match reply {
            Value::Array(items) => items.into_iter(),
            other => return Err(unexpected(self.0.name(), &format!("{other:?}"))),
        };
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
            other => return Err(unexpected(self.0.name(), other)),
        })
    }
}

/// A reply no script sends: a bug, or a different script loaded under our SHA.
pub(crate) fn unexpected(script: &str, reply: &str) -> Error {
    Error::transport(format!(
        "unexpected reply from the saga script `{script}`: {reply}"
    ))
}
