use bus_core::RedisCommand;

// Every mistake is reported in one compile, each at its own span.
#[derive(RedisCommand)]
#[bus(queue = "a:b", colour = "red", format = "yaml", queue = "again")]
#[bus(topic = "t")]
struct ManyErrors;

fn main() {}
