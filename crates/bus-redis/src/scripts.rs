//! The Lua scripts of every transition (see `lua/` and docs/redis-layout.md), run by SHA
//! with a `NOSCRIPT` fallback (fred's `evalsha_with_reload`).

use std::sync::OnceLock;

use fred::prelude::Client;
use fred::types::scripts::Script;
use fred::types::Value;

use crate::{Error, Result};

/// One script and its name, for error messages.
#[derive(Debug)]
pub(crate) struct Lua {
    name: &'static str,
    script: Script,
}

macro_rules! lua {
    ($name:literal) => {
        Lua {
            name: $name,
            // The shared helpers are prepended at compile time.
            script: Script::from_lua(concat!(
                include_str!("../lua/common.lua"),
                include_str!(concat!("../lua/", $name, ".lua"))
            )),
        }
    };
}

/// All scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) send_at: Lua,
    pub(crate) publish: Lua,
    pub(crate) reserve: Lua,
    pub(crate) ack: Lua,
    pub(crate) renew: Lua,
    pub(crate) retry: Lua,
    pub(crate) dead_letter: Lua,
    pub(crate) release: Lua,
    pub(crate) recover: Lua,
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

impl Lua {
    /// Runs the script; loads it first if Redis does not know it (after a restart).
    pub(crate) async fn run(
        &self,
        client: &Client,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value> {
        Ok(self.script.evalsha_with_reload(client, keys, args).await?)
    }

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
