//! The management scripts (`lua/*.lua`), run by SHA with a `NOSCRIPT` fallback (fred's
//! `evalsha_with_reload`), like bus-redis's.

use std::sync::LazyLock;

use bus_redis::LuaScript;
use bytes::Bytes;
use fred::prelude::Client;
use fred::types::Value;

use crate::{Error, Result};

/// One script, with the reply readers of this crate.
#[derive(Debug)]
pub(crate) struct Lua(LuaScript);

macro_rules! lua {
    ($name:literal) => {
        // The shared helpers are prepended at compile time.
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
pub(crate) static REQUEUE: LazyLock<Lua> = LazyLock::new(|| lua!("requeue"));
pub(crate) static MOVE_DEAD: LazyLock<Lua> = LazyLock::new(|| lua!("move"));
pub(crate) static DEAD_ENVELOPES: LazyLock<Lua> = LazyLock::new(|| lua!("dead_envelopes"));
pub(crate) static DELETE_DEAD: LazyLock<Lua> = LazyLock::new(|| lua!("delete_dead"));
pub(crate) static PURGE: LazyLock<Lua> = LazyLock::new(|| lua!("purge"));
pub(crate) static UNSUBSCRIBE: LazyLock<Lua> = LazyLock::new(|| lua!("unsubscribe"));
pub(crate) static STATS: LazyLock<Lua> = LazyLock::new(|| lua!("stats"));

impl Lua {
    /// Runs the script; loads it first if Redis does not know it (after a restart).
    pub(crate) async fn run(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value> {
        Ok(self.0.run(client, keys, args).await?)
    }

    /// Runs the script and reads an array reply.
    pub(crate) async fn run_array(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Vec<Value>> {
        match self.run(client, keys, args).await? {
            Value::Array(values) => Ok(values),
            // An empty Lua table comes back as an empty array or as nil.
            Value::Null => Ok(Vec::new()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Reads an array of strings (ids) from a reply.
    pub(crate) fn strings(&self, value: Value) -> Result<Vec<String>> {
        let values = match value {
            Value::Array(values) => values,
            Value::Null => Vec::new(),
            other => return Err(self.unexpected(&other)),
        };
        values
            .into_iter()
            .map(|v| v.as_string().ok_or_else(|| self.unexpected(&v)))
            .collect()
    }

    /// Reads an integer from a reply.
    pub(crate) fn int(&self, value: &Value) -> Result<i64> {
        value.as_i64().ok_or_else(|| self.unexpected(value))
    }

    /// Reads an optional binary string from a reply.
    pub(crate) fn bytes(&self, value: Value) -> Result<Option<Bytes>> {
        match value {
            Value::Null => Ok(None),
            Value::Bytes(b) => Ok(Some(b)),
            Value::String(s) => Ok(Some(s.into_inner())),
            other => Err(self.unexpected(&other)),
        }
    }

    pub(crate) fn unexpected(&self, reply: &Value) -> Error {
        Error::Protocol {
            script: self.0.name(),
            detail: format!("{reply:?}"),
        }
    }
}
