use bus_core::{EventSubscription, RedisCommand, RedisEvent};

#[derive(RedisCommand)]
#[bus(queue = thumbnail_requested)]
struct Ident;

#[derive(RedisEvent)]
#[bus(topic = 42, format = json)]
struct Number;

#[derive(EventSubscription)]
#[bus(event = Number, name = true, crate = bus_core)]
struct Bool;

fn main() {}
