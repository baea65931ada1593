use bus_core::RedisCommand;

#[derive(RedisCommand)]
struct NoAttribute;

#[derive(RedisCommand)]
#[bus(format = "json")]
struct NoQueue;

fn main() {}
