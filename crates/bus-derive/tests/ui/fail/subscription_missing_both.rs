use bus_core::EventSubscription;

#[derive(EventSubscription)]
struct Nothing;

fn main() {}
