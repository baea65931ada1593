//! The Lua scripts of every transition (see `lua/` and docs/redis-layout.md), run by SHA
//! with a `NOSCRIPT` fallback (fred's `evalsha_with_reload`).

use std::sync::LazyLock;

use fred::prelude::Client;
use fred::types::scripts::Script;
use fred::types::{MultipleKeys, Value};

use crate::{Error, Result};

/// A Lua script and its name (for error messages), run by SHA with a `NOSCRIPT`
/// fallback: Redis forgets scripts when it restarts without persistence, and fred then
/// loads the script on every primary and runs it again. The saga store and the
/// management tool run theirs through this too.
#[derive(Debug)]
pub struct LuaScript {
    name: &'static str,
    script: Script,
}

impl LuaScript {
    /// A script; its SHA is computed here, once.
    pub fn new(name: &'static str, source: &'static str) -> Self {
        LuaScript {
            name,
            script: Script::from_lua(source),
        }
    }

    /// The script's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the script, loading it first if Redis does not know it.
    pub async fn run(
        &self,
        client: &Client,
        keys: impl Into<MultipleKeys> + Send,
        args: Vec<Value>,
    ) -> Result<Value, fred::error::Error> {
        self.script.evalsha_with_reload(client, keys, args).await
    }
}

macro_rules! lua {
    ($name:literal) => {
        // The shared helpers are prepended at compile time.
        LuaScript::new(
            $name,
            concat!(
                include_str!("../lua/common.lua"),
                include_str!(concat!("../lua/", $name, ".lua"))
            ),
        )
    };
    // A consumer-side script runs on a full Redis (`maxmemory`, `noeviction`): it only
    // moves, counts or removes existing messages, and draining a full Redis needs it.
    // Sends are refused there, with Redis's OOM error.
    ($name:literal, allow_oom) => {
        LuaScript::new(
            $name,
            concat!(
                "#!lua flags=allow-oom\n",
                include_str!("../lua/common.lua"),
                include_str!(concat!("../lua/", $name, ".lua"))
            ),
        )
    };
}

// Each script is hashed once per process, on first use.
pub(crate) static SEND_AT: LazyLock<LuaScript> = LazyLock::new(|| lua!("send_at"));
pub(crate) static PUBLISH: LazyLock<LuaScript> = LazyLock::new(|| lua!("publish"));
pub(crate) static RESERVE: LazyLock<LuaScript> = LazyLock::new(|| lua!("reserve", allow_oom));
pub(crate) static RESERVE_ALONE: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("reserve_alone", allow_oom));
pub(crate) static ACK: LazyLock<LuaScript> = LazyLock::new(|| lua!("ack", allow_oom));
pub(crate) static RENEW: LazyLock<LuaScript> = LazyLock::new(|| lua!("renew", allow_oom));
pub(crate) static RETRY: LazyLock<LuaScript> = LazyLock::new(|| lua!("retry", allow_oom));
pub(crate) static DEAD_LETTER: LazyLock<LuaScript> =
    LazyLock::new(|| lua!("dead_letter", allow_oom));
pub(crate) static RELEASE: LazyLock<LuaScript> = LazyLock::new(|| lua!("release", allow_oom));
pub(crate) static RECOVER: LazyLock<LuaScript> = LazyLock::new(|| lua!("recover", allow_oom));
pub(crate) static IN_FLIGHT: LazyLock<LuaScript> = LazyLock::new(|| lua!("in_flight"));

impl LuaScript {
    /// Runs the script and reads an integer reply.
    pub(crate) async fn run_int(
        &self,
        client: &Client,
        keys: impl Into<MultipleKeys> + Send,
        args: Vec<Value>,
    ) -> Result<i64> {
        let reply = self.run(client, keys, args).await?;
        reply.as_i64().ok_or_else(|| self.unexpected(&reply))
    }

    pub(crate) fn unexpected(&self, reply: &Value) -> Error {
        Error::Protocol {
            script: self.name,
            detail: format!("{reply:?}"),
        }
    }
}
