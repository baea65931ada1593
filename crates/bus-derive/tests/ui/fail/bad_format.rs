use bus_core::RedisCommand;

#[derive(RedisCommand)]
#[bus(queue = "q", format = "xml")]
struct Xml;

#[derive(RedisCommand)]
#[bus(queue = "q", format = "")]
struct Empty;

fn main() {}
