//! Our own layout without the host: the consumer's scripts (the very files under
//! `crates/bus-redis/lua`, with the header the consumer gives them) and their KEYS.

use bus_redis::keys::QueueKeys;
use bus_redis::LuaScript;
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
        ]),
        keys(&[&k.inflight, &k.msgs, &k.deliveries, &k.errors, &k.isolated]),
    )
}
