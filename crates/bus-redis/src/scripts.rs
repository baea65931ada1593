//! The Lua scripts of every transition (see `lua/` and docs/redis-layout.md), run by SHA
//! with a `NOSCRIPT` fallback (fred's `evalsha_with_reload`).

use std::sync::OnceLock;

use fred::prelude::Client;
use fred::types::scripts::Script;
use fred::types::Value;

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
        keys: Vec<String>,
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
}

/// All scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) send_at: LuaScript,
    pub(crate) publish: LuaScript,
    pub(crate) reserve: LuaScript,
    pub(crate) ack: LuaScript,
    pub(crate) renew: LuaScript,
    pub(crate) retry: LuaScript,
    pub(crate) dead_letter: LuaScript,
    pub(crate) release: LuaScript,
    pub(crate) recover: LuaScript,
}

pub(crate) fn scripts() -> &'static Scripts {
    static SCRIPTS: OnceLock<Scripts> = OnceLock::new();
    SCRIPTS.get_or_init(|| Scripts {
        send_at: lua!("send_at"),
        publish: lua!("publish"),
        reserve: lua!("reserve"),
        ack: lua!("ack"),
        renew: lua!("renew"),
        retry: lua!("retry"),
        dead_letter: lua!("dead_letter"),
        release: lua!("release"),
        recover: lua!("recover"),
    })
}

impl LuaScript {
    /// Runs the script and reads an integer reply.
    pub(crate) async fn run_int(
        &self,
        client: &Client,
        keys: Vec<String>,
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
