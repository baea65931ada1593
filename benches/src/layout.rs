//! Our own layout without the host: the consumer's scripts (the very files under
//! `crates/bus-redis/lua`, with the header the consumer gives them) and their KEYS.

use bus_redis::keys::QueueKeys;
use bus_redis::LuaScript;
use fred::prelude::{Client, HashesInterface, KeysInterface};
use fred::types::Key;

fn script(name: &'static str, body: &'static str) -> LuaScript {
    LuaScript::new(name, body)
}

/// The scripts as the consumer runs them: the same files, with the same header.
pub fn layout_scripts() -> (LuaScript, LuaScript) {
    (
        script(
            "reserve",
            concat!(
                "#!lua flags=allow-oom\n",
                include_str!("../../crates/bus-redis/lua/common.lua"),
                include_str!("../../crates/bus-redis/lua/reserve.lua")
            ),
        ),
        script(
            "ack",
            concat!(
                "#!lua flags=allow-oom\n",
                include_str!("../../crates/bus-redis/lua/common.lua"),
                include_str!("../../crates/bus-redis/lua/ack.lua")
            ),
        ),
    )
}

/// The KEYS of reserve.lua and ack.lua, in their headers' order.
pub fn layout_keys(k: &QueueKeys) -> (Vec<Key>, Vec<Key>) {
    let keys = |names: &[&String]| names.iter().map(|n| Key::from(n.as_str())).collect();
    (
        keys(&[
            &k.ready,
            &k.msgs,
            &k.deliveries,
            &k.inflight,
            &k.delayed,
            &k.seq,
            &k.dead_info,
            &k.suspects,
            &k.leases,
            &k.leased,
        ]),
        keys(&[
            &k.inflight,
            &k.msgs,
            &k.deliveries,
            &k.errors,
            &k.isolated,
            &k.leases,
            &k.leased,
        ]),
    )
}

/// Messages of the queue stored or in flight: `HLEN msgs` plus the leased ones (`GET
/// leased`); 0 once every message is acked.
pub async fn unsettled(client: &Client, keys: &QueueKeys) -> u64 {
    let stored: u64 = client.hlen(&keys.msgs).await.unwrap();
    let leased: Option<u64> = client.get(&keys.leased).await.unwrap();
    stored + leased.unwrap_or(0)
}
