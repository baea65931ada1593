use bus_core::RedisEvent;

#[derive(RedisEvent)]
#[bus()]
struct NoTopic;

fn main() {}
