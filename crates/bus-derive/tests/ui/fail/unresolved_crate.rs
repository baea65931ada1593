use bus_core::RedisCommand;

#[derive(serde::Serialize, serde::Deserialize, RedisCommand)]
#[bus(queue = "q", crate = "no_such_crate")]
struct Unresolved;

fn main() {}
