//! The connection a handle writes on: a script runs on it plainly, or, on a durable
//! handle, followed by `WAIT` (`durable.rs`); and a write's error as the caller sees it.

use std::time::Duration;

use fred::prelude::Client;
use fred::types::Value;

use super::durable::{Durability, WriteError};
use crate::scripts::LuaScript;
use crate::{Error, RedisError};

#[derive(Debug)]
pub(crate) struct Connection {
    client: Client,
    /// Set on a durable handle's connection: its writes wait for replicas.
    durability: Option<Durability>,
}

impl Connection {
    pub(crate) fn new(client: Client, durability: Option<Durability>) -> Self {
        Connection { client, durability }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn durability(&self) -> Option<Durability> {
        self.durability
    }

    /// Runs a script that writes; a shared call's outcome is cheap to clone
    /// (`once.rs`), so it becomes the caller's error only in [`Connection::error`].
    pub(crate) async fn run(
        &self,
        script: &LuaScript,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, WriteError> {
        let Some(durability) = &self.durability else {
            return script
                .run(&self.client, keys, args)
                .await
                .map_err(WriteError::Redis);
        };
        let slot_key = keys.first().cloned().unwrap_or_default();
        durability
            .script(&self.client, script, &slot_key, keys, args)
            .await
    }

    /// The error of a write, as the caller sees it.
    pub(crate) fn error(&self, error: WriteError) -> bus_core::Error {
        match error {
            WriteError::Redis(e) => Error::from(e).into(),
            WriteError::Unconfirmed(e) => Error::ReplicationUnconfirmed(RedisError::from(e)).into(),
            WriteError::Unknown(e) => Error::DurableOutcomeUnknown(RedisError::from(e)).into(),
            WriteError::NotReplicated { confirmed, .. } => self.not_replicated(confirmed),
        }
    }

    pub(crate) fn not_replicated(&self, confirmed: u32) -> bus_core::Error {
        bus_core::Error::NotReplicated {
            wanted: self.durability.map_or(0, |d| d.replicas),
            confirmed,
            timeout: self.durability.map_or(Duration::ZERO, |d| d.timeout),
        }
    }
}
