use bus_core::{EventSubscription, RedisCommand, RedisEvent};

#[derive(RedisCommand)]
#[bus(queue = "q", foo = "bar")]
struct Command;

#[derive(RedisEvent)]
#[bus(retries = 3, topic = "t")]
struct Event;

#[derive(EventSubscription)]
#[bus(event = Event, name = "s", format = "json")]
struct Subscription;

#[derive(RedisCommand)]
#[bus(queue = "q", serde::rename = "x")]
struct PathKey;

fn main() {}
