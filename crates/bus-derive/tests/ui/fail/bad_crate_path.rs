use bus_core::RedisCommand;

#[derive(RedisCommand)]
#[bus(queue = "q", crate = "not a path")]
struct Spaces;

#[derive(RedisCommand)]
#[bus(queue = "q", crate = "")]
struct Empty;

fn main() {}
