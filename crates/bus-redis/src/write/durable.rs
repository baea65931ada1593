//! Durable sends: a write that returns only after N replicas have it (`WAIT`).
//!
//! Redis replicates asynchronously: a primary acknowledges a write before any replica
//! has it, and a failover in between loses it. `WAIT n timeout` blocks until `n`
//! replicas confirmed every write made so far *on the same connection*, or the timeout
//! passes, and answers how many did. So the write and its `WAIT` go out together, in one
//! pipeline on one connection (in a cluster, both to the node of the key's slot).
//!
//! Why a connection of its own: Redis blocks the whole connection while a `WAIT` waits,
//! so on the shared one every plain send and every consumer call would queue behind it
//! (for the full timeout when a replica is down).
//!
//! Why the `WAIT` is never re-sent: on a connection that wrote nothing, `WAIT` answers at
//! once with every connected replica. If the connection drops between the write's reply
//! and the `WAIT`'s (a failover), a `WAIT` re-sent on the new connection would confirm a
//! write it never covered. It is written once; a lost answer is an unknown outcome.

use std::time::Duration;

use fred::clients::Pipeline;
use fred::error::Error as FredError;
use fred::interfaces::{ClientLike, ServerInterface};
use fred::prelude::{Client, ListInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::scripts::LuaScript;

/// How many replicas must confirm a durable write, and how long it waits for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Durability {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

/// Why a durable write did not return `Ok`. Cheap to clone: a coalesced write hands the
/// same outcome to every send it carried.
#[derive(Debug, Clone)]
pub(crate) enum WriteError {
    /// The write failed or got no reply in time (nothing is known to be stored).
    Redis(FredError),
    /// Stored on the primary; `confirmed` replicas (fewer than asked) had it in time.
    /// `written` is the write's own reply (a script may answer that it wrote nothing).
    NotReplicated { confirmed: u32, written: Value },
    /// Stored on the primary, but the `WAIT`'s answer was lost (the connection dropped):
    /// whether a replica has it is unknown.
    Unconfirmed(FredError),
    /// The pipeline got no answer as a whole (the connection dropped or timed out): the
    /// write may or may not be stored, and no replica confirmed it.
    Unknown(FredError),
}

impl Durability {
    /// The timeout of the pipeline: Redis answers the `WAIT` within `timeout`, so the
    /// client waits that long plus its usual command timeout.
    fn call_timeout(&self, client: &Client) -> Duration {
        self.timeout + client.perf_config().default_command_timeout
    }

    /// `WAIT`'s timeout argument in ms; at least 1, since 0 waits forever.
    fn wait_ms(&self) -> i64 {
        i64::try_from(self.timeout.as_millis())
            .unwrap_or(i64::MAX)
            .max(1)
    }

    /// `RPUSH ready envelopes`, then `WAIT`.
    pub(crate) async fn rpush(
        &self,
        client: &Client,
        ready: &str,
        envelopes: Vec<Value>,
    ) -> Result<(), WriteError> {
        let pipeline = client.pipeline();
        let queued: Result<(), FredError> = pipeline
            .with_options(&self.write_options(client))
            .rpush(ready, envelopes)
            .await;
        queued.map_err(WriteError::Redis)?;
        self.wait_after(client, &pipeline, ready).await.map(drop)
    }

    /// Runs `script` (by SHA, loading it on `NOSCRIPT`), then `WAIT`. `slot_key` is one
    /// of its keys (they share a slot).
    pub(crate) async fn script(
        &self,
        client: &Client,
        script: &LuaScript,
        slot_key: &str,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<Value, WriteError> {
        // fred's pipelines have no EVALSHA of their own: the command is spelt out.
        let slot = fred::util::redis_keyslot(slot_key.as_bytes());
        let evalsha = CustomCommand::new("EVALSHA", ClusterHash::Custom(slot), false);
        let mut call = Vec::with_capacity(2 + keys.len() + args.len());
        call.push(Value::from(script.fred().sha1().clone()));
        call.push(Value::from(i64::try_from(keys.len()).unwrap_or(i64::MAX)));
        call.extend(keys.into_iter().map(Value::from));
        call.extend(args);
        for attempt in 0..2 {
            let pipeline = client.pipeline();
            let queued: Result<(), FredError> = pipeline
                .with_options(&self.write_options(client))
                .custom(evalsha.clone(), call.clone())
                .await;
            queued.map_err(WriteError::Redis)?;
            match self.wait_after(client, &pipeline, slot_key).await {
                // Redis forgot the script (a restart, a promoted replica): nothing ran.
                Err(WriteError::Redis(e))
                    if attempt == 0 && e.details().starts_with("NOSCRIPT") =>
                {
                    script
                        .fred()
                        .load(client)
                        .await
                        .map_err(WriteError::Redis)?;
                }
                outcome => return outcome,
            }
        }
        Err(WriteError::Redis(FredError::new(
            fred::error::ErrorKind::Unknown,
            "NOSCRIPT after loading the script",
        )))
    }

    fn write_options(&self, client: &Client) -> Options {
        Options {
            timeout: Some(self.call_timeout(client)),
            ..Options::default()
        }
    }

    /// Queues `WAIT` behind the write already in `pipeline`, sends both, and reads the
    /// write's reply.
    async fn wait_after(
        &self,
        client: &Client,
        pipeline: &Pipeline<Client>,
        slot_key: &str,
    ) -> Result<Value, WriteError> {
        let options = Options {
            max_attempts: Some(1),
            timeout: Some(self.call_timeout(client)),
            cluster_hash: Some(ClusterHash::Custom(fred::util::redis_keyslot(
                slot_key.as_bytes(),
            ))),
            ..Options::default()
        };
        let queued: Result<(), FredError> = pipeline
            .with_options(&options)
            .wait(i64::from(self.replicas), self.wait_ms())
            .await;
        queued.map_err(WriteError::Redis)?;
        let mut replies = pipeline.try_all::<Value>().await.into_iter();
        let (write, wait) = match (replies.next(), replies.next()) {
            (Some(write), Some(wait)) => (write, wait),
            // The pipeline as a whole failed (dropped, timed out): nothing is known.
            (Some(Err(e)), None) => return Err(WriteError::Unknown(e)),
            _ => {
                return Err(WriteError::Redis(FredError::new(
                    fred::error::ErrorKind::Protocol,
                    "a write and WAIT pipeline answered with neither two replies nor an error",
                )))
            }
        };
        let written = write.map_err(WriteError::Redis)?;
        let confirmed = wait
            .map_err(WriteError::Unconfirmed)?
            .as_i64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        if confirmed >= self.replicas {
            Ok(written)
        } else {
            Err(WriteError::NotReplicated { confirmed, written })
        }
    }
}
