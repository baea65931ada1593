use bus_core::RedisCommand;

#[derive(RedisCommand)]
#[bus(queue = "orders", urn = "")]
struct Empty;

#[derive(RedisCommand)]
#[bus(queue = "orders", urn = "urn:babel:orders created")]
struct Spaced;

#[derive(RedisCommand)]
#[bus(queue = "orders", urn = "urn:a", urn = "urn:b")]
struct Twice;

fn main() {}
