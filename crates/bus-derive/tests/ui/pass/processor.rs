use async_trait::async_trait;
use bus_core::{
    processor, CommandProcessor, Context, EventProcessor, EventSubscription, ProcessError,
    ProcessorEntry, RedisCommand, RedisEvent,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders")]
struct Order;

#[derive(Serialize, Deserialize, RedisEvent)]
#[bus(topic = "shipped")]
struct Shipped;

#[derive(EventSubscription)]
#[bus(event = Shipped, name = "mail")]
struct Mail;

#[derive(Default)]
struct Orders;

#[processor]
#[async_trait]
impl CommandProcessor<Order> for Orders {
    async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

struct Mailer(u32);

fn mailer() -> Mailer {
    Mailer(1)
}

// Below `#[async_trait]` works too: the impl is then the expanded one.
#[async_trait]
#[processor(new = mailer, crate = "::bus_core")]
impl EventProcessor<Mail> for Mailer {
    async fn process(&self, _: Shipped, _: &Context) -> Result<(), ProcessError> {
        let _ = self.0;
        Ok(())
    }
}

fn main() {
    let all: Vec<_> = ProcessorEntry::all()
        .into_iter()
        .map(|e| (e.processor(), e.message()))
        .collect();
    assert_eq!(all, [("Mailer", "Mail"), ("Orders", "Order")]);
}
