use bus_core::{EventSubscription, RedisCommand, RedisEvent};

#[derive(RedisCommand)]
#[bus(queue = "")]
struct EmptyQueue;

#[derive(RedisEvent)]
#[bus(topic = "")]
struct EmptyTopic;

#[derive(EventSubscription)]
#[bus(event = EmptyTopic, name = "")]
struct EmptySubscription;

fn main() {}
