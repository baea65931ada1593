//! The version of the script protocol (the keys, the scripts' KEYS and ARGV, their
//! replies), recorded in Redis per prefix and checked when a client connects
//! (docs/wire-format.md, "Versioning").

use fred::prelude::{Client, KeysInterface, SetsInterface};
use fred::types::{SetOptions, Value};

use crate::{keys, Error, Result};

/// The protocol this build speaks (docs/wire-format.md, "Versioning" lists what each
/// version added).
pub const PROTOCOL: u32 = 10;

/// The protocols this one upgrades in place: every later one only added keys and script
/// arguments to the same layout, so their queues need no migration (a lock taken by an
/// older client has no recorded holder, and recovery treats it as it always did; protocol
/// 6 added workflows' own keys and scripts beside the queues; the keys protocol 7 left
/// ready to start, reserve drains into protocol 8's heads; protocol 9 only gave those keys
/// to the operator's purge and per-key backlogs; a lease's `done` set that protocol 9 and
/// before left, protocol 10's scripts read as it is and rewrite as a bitmap when they
/// write it).
const UPGRADES: [u32; 8] = [2, 3, 4, 5, 6, 7, 8, 9];

/// Records [`PROTOCOL`] under `prefix` if no version is recorded yet (`SET NX`), else
/// checks it: another version is [`Error::ProtocolMismatch`], except the [`UPGRADES`],
/// which are raised to this one (so that their clients are refused from then on). A
/// refused write (a full Redis, a read-only replica) is only a warning, so that consumers
/// still start and drain.
pub(crate) async fn check(client: &Client, prefix: &str) -> Result<()> {
    let key = keys::protocol(prefix);
    let mut found = read(client, &key).await?;
    if found.is_none() {
        let set: Result<Value, _> = client
            .set(
                key.as_str(),
                PROTOCOL.to_string(),
                None,
                Some(SetOptions::NX),
                false,
            )
            .await;
        match set {
            Ok(Value::Null) => found = read(client, &key).await?, // Another client won.
            Ok(_) => return recorded(client, prefix).await,
            Err(e) => {
                tracing::warn!(key, error = %Error::from(e),
                    "could not record the bus protocol version in Redis; going on unchecked");
                return Ok(());
            }
        }
    }
    match found {
        Some(found) if found == PROTOCOL.to_string() => Ok(()),
        Some(found) if UPGRADES.iter().any(|v| found == v.to_string()) => {
            upgrade(client, &key, &found).await
        }
        Some(found) => Err(Error::ProtocolMismatch {
            key,
            found,
            speaks: PROTOCOL,
        }),
        None => Ok(()), // Deleted meanwhile: the next connect records it.
    }
}

/// Raises an older record to [`PROTOCOL`] (one `SET`: every writer writes the same value).
async fn upgrade(client: &Client, key: &str, from: &str) -> Result<()> {
    tracing::warn!(
        key,
        from,
        to = PROTOCOL,
        "raising the recorded bus protocol: older consumers still running are refused by \
         every script whose shape changed, and must be restarted on this build; new ones are \
         refused (docs/wire-format.md, \"Versioning\")"
    );
    let set: Result<Value, _> = client
        .set(key, PROTOCOL.to_string(), None, None, false)
        .await;
    if let Err(e) = set {
        tracing::warn!(key, error = %Error::from(e), "could not raise the bus protocol version");
    }
    Ok(())
}

/// The recorded version as text (lossy, cut short: it is shown in an error).
async fn read(client: &Client, key: &str) -> Result<Option<String>> {
    let value: Value = client.get(key).await?;
    Ok(value.as_bytes().map(|bytes| {
        let text = String::from_utf8_lossy(bytes);
        text.chars().take(32).collect()
    }))
}

/// The first record under a prefix. Queues already there were written by an unversioned
/// client: protocol 2 before versions existed, or protocol 1, whose consumers must be
/// stopped before later protocols' start (docs/operations.md, "Upgrades").
async fn recorded(client: &Client, prefix: &str) -> Result<()> {
    let queues: i64 = client
        .scard(keys::queue_registry(prefix))
        .await
        .unwrap_or(0);
    if queues > 0 {
        tracing::warn!(
            prefix,
            protocol = PROTOCOL,
            queues,
            "recorded the bus protocol version under a prefix that has queues: if a consumer \
             of a build before the lease layout (protocol 1) still runs there, stop it \
             (docs/operations.md, \"Upgrades\")"
        );
    }
    Ok(())
}
