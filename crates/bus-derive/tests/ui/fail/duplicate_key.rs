use bus_core::{EventSubscription, RedisCommand};

#[derive(RedisCommand)]
#[bus(queue = "first", queue = "second")]
struct SameAttribute;

#[derive(RedisCommand)]
#[bus(queue = "q", format = "json")]
#[bus(format = "msgpack")]
struct SecondAttribute;

#[derive(EventSubscription)]
#[bus(event = SameAttribute, name = "s", event = SecondAttribute)]
struct TwoEvents;

fn main() {}
