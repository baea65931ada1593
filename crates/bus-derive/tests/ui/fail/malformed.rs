use bus_core::RedisCommand;

#[derive(RedisCommand)]
#[bus = "q"]
struct NotAList;

#[derive(RedisCommand)]
#[bus(queue)]
struct NoValue;

fn main() {}
