use bus_core::{EventSubscription, RedisCommand, RedisEvent};

// Characters that would break the Redis key layout: separators, hash tags, glob
// patterns, whitespace, non-ASCII.
#[derive(RedisCommand)]
#[bus(queue = "a:b")]
struct Colon;

#[derive(RedisCommand)]
#[bus(queue = "{tag}")]
struct HashTag;

#[derive(RedisEvent)]
#[bus(topic = "cache invalidated")]
struct Space;

#[derive(RedisEvent)]
#[bus(topic = "orders*")]
struct Glob;

#[derive(RedisEvent)]
#[bus(topic = "café")]
struct NonAscii;

#[derive(EventSubscription)]
#[bus(event = Space, name = "cache/eu")]
struct Slash;

fn main() {}
