//! Our own layout without the host: what the raw-layout baseline reads. Its scripts and
//! their KEYS come from bus-redis (`raw::reserve_script`, `raw::ack_script`, `keys::ScriptKeys`).

use bus_redis::keys::QueueKeys;
use fred::prelude::{Client, HashesInterface, KeysInterface};

/// Messages of the queue stored or in flight: `HLEN msgs` plus the leased ones (`GET
/// leased`); 0 once every message is acked.
pub async fn unsettled(client: &Client, keys: &QueueKeys) -> u64 {
    let stored: u64 = client.hlen(&keys.msgs).await.unwrap();
    let leased: Option<u64> = client.get(&keys.leased).await.unwrap();
    stored + leased.unwrap_or(0)
}
