use bus_core::EventSubscription;

#[derive(EventSubscription)]
#[bus(name = "cache")]
struct NoEvent;

fn main() {}
