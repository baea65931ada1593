use bus_core::{RedisCommand, RedisEvent};

#[derive(RedisCommand)]
#[bus(topic = "thumbnail-requested")]
struct Command;

#[derive(RedisEvent)]
#[bus(queue = "cache-invalidated")]
struct Event;

fn main() {}
