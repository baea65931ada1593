#![deny(warnings, unused_qualifications, rust_2018_idioms)]

use bus_core::{Format, Message, RedisCommand, RedisEvent};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "as-json", format = "json")]
struct AsJson;

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(format = "msgpack", queue = "as-msgpack")]
struct AsMsgpack;

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "as-messagepack", format = "messagepack")]
struct AsMessagePack;

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "as-default")]
struct AsDefault;

fn main() {
    assert!(matches!(<AsJson as Message>::FORMAT, Some(Format::Json)));
    assert!(matches!(
        <AsMsgpack as Message>::FORMAT,
        Some(Format::MessagePack)
    ));
    assert!(matches!(
        <AsMessagePack as Message>::FORMAT,
        Some(Format::MessagePack)
    ));
    assert!(<AsDefault as Message>::FORMAT.is_none());
}
