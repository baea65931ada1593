//! The version of the script protocol (the keys, the scripts' KEYS and ARGV, their
//! replies), recorded in Redis per prefix and checked when a client connects
//! (docs/wire-format.md, "Versioning").

use fred::prelude::{Client, KeysInterface, SetsInterface};
use fred::types::{SetOptions, Value};

use crate::{keys, Error, Result};

/// The protocol this build speaks: 4, protocol 3 plus per-key ordering (keyed sends run
/// `send_keyed.lua`; reserve, ack, dead-letter and recover take the keys' state as KEYS;
/// docs/wire-format.md, "Versioning") and the fleet circuit breaker (`breaker_trip.lua`,
/// reserve statuses 5 and 6). Protocol 3 is the lease layout of protocol 2 plus
/// flow control, message deadlines and the lifecycle scripts; protocol 1 is the layout
/// before leases, which recorded no version. `lua/common.lua`'s `PROTOCOL` says the same.
pub const PROTOCOL: u32 = 4;

/// The protocols this one upgrades in place: the same keys and scripts, to which protocol 3
/// added flow control, deadlines and new scripts, and protocol 4 the per-key ordering keys
/// (`kready`, `kbusy`, `kof`, `kq:<key>`), so their queues need no migration.
const UPGRADES: [u32; 2] = [2, 3];

/// Records [`PROTOCOL`] under `prefix` if no version is recorded yet (`SET NX`), else
/// checks it: another version is [`Error::ProtocolMismatch`], except protocols 2 and 3,
/// which are raised to 4 (so that their clients are refused from then on: they would
/// ignore per-key ordering, and protocol 2's flow control too). A refused write (a full Redis, a read-only replica) is only a warning,
/// so that consumers still start and drain.
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

/// Raises a protocol-2 or -3 record to 4 (one `SET`: every writer writes the same value).
async fn upgrade(client: &Client, key: &str, from: &str) -> Result<()> {
    tracing::warn!(
        key,
        from,
        to = PROTOCOL,
        "raising the recorded bus protocol: older consumers still running ignore per-key \
         ordering (they neither serve nor release keys; protocol 2's also flow control and \
         message deadlines), and must be restarted on this build; new ones are refused (docs/wire-format.md, \"Versioning\")"
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
