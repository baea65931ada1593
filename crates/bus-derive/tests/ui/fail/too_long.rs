use bus_core::{EventSubscription, RedisCommand};

// 201 bytes: one over the limit.
#[derive(RedisCommand)]
#[bus(
    queue = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
)]
struct TooLong;

// 102 characters but 204 bytes: the limit counts bytes.
#[derive(EventSubscription)]
#[bus(event = TooLong, name = "éééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé")]
struct TooLongInBytes;

fn main() {}
