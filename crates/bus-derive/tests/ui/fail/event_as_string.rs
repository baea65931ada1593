use bus_core::EventSubscription;

#[derive(EventSubscription)]
#[bus(event = "CacheInvalidated", name = "cache")]
struct StringEvent;

fn main() {}
