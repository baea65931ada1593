use bus_core::EventSubscription;

struct CacheInvalidated;

#[derive(EventSubscription)]
#[bus(event = CacheInvalidated)]
struct NoName;

fn main() {}
