use bus_core::EventSubscription;

struct NotAnEvent;

#[derive(EventSubscription)]
#[bus(event = NotAnEvent, name = "cache")]
struct Subscription;

fn main() {}
