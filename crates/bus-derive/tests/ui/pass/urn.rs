#![deny(warnings, unused_qualifications, rust_2018_idioms)]

use bus_core::{Message, RedisCommand, RedisEvent};
use serde::{Deserialize, Serialize};

// Several message types on one queue, each with its own URN (BabelQueue routing).
#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(urn = "urn:babel:orders:created", queue = "orders")]
struct OrderCreated {
    id: u64,
}

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders", urn = "urn:babel:orders:paid")]
struct OrderPaid {
    id: u64,
}

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "orders-events", urn = "urn:babel:orders:shipped")]
struct OrderShipped;

fn main() {
    assert_eq!(<OrderCreated as Message>::NAME, "orders");
    assert_eq!(<OrderCreated as Message>::TYPE, "urn:babel:orders:created");
    assert_eq!(<OrderPaid as Message>::TYPE, "urn:babel:orders:paid");
    assert_eq!(<OrderShipped as Message>::TYPE, "urn:babel:orders:shipped");
    assert_eq!(OrderCreated::descriptor().message_type(), "urn:babel:orders:created");
}
