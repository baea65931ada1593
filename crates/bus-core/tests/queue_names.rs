//! Queue names at run time: a message type mapped to another queue
//! or topic at start-up, per type or by a naming convention, the same on send and on
//! consume, with errors naming the real queue.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::Source;
use bus_core::{
    Bus, BusConfig, CommandProcessor, Context, EventProcessor, EventSubscription, Host,
    MemoryTransport, ProcessError, RedisCommand, RedisEvent,
};
use bus_test_redis::eventually;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders")]
struct Order {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "order-placed")]
struct OrderPlaced {
    n: u32,
}

#[derive(EventSubscription)]
#[bus(event = OrderPlaced, name = "audit")]
struct Audit;

#[derive(Clone, Default)]
struct Count(Arc<AtomicU32>);

#[async_trait]
impl CommandProcessor<Order> for Count {
    async fn process(&self, order: Order, _: &Context) -> Result<(), ProcessError> {
        if order.n == 0 {
            return Err(ProcessError::dead_letter("order 0 is refused"));
        }
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[async_trait]
impl EventProcessor<Audit> for Count {
    async fn process(&self, _: OrderPlaced, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn queue(name: &str) -> Source {
    Source::queue(name).unwrap()
}

#[tokio::test]
async fn a_type_mapped_per_type_is_sent_and_consumed_on_the_real_queue() {
    let transport = MemoryTransport::new();
    let count = Count::default();
    let failures = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&failures);
    let host = Host::builder()
        .transport(transport.clone())
        .queue_for::<Order>("orders-eu")
        .command::<Order, _>(count.clone())
        .on_error(move |failed| {
            seen.lock()
                .unwrap()
                .push((failed.source.to_string(), failed.error.to_owned()))
        })
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let bus = running.bus();
    bus.send(&Order { n: 1 }).await.unwrap();
    bus.send(&Order { n: 0 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || count.0.load(Ordering::SeqCst)
            == 1
            && transport.stats(&queue("orders-eu")).dead_letters == 1)
        .await,
        "orders-eu: {:?}, orders: {:?}",
        transport.stats(&queue("orders-eu")),
        transport.stats(&queue("orders"))
    );
    // Nothing went to, or was read from, the declared queue.
    let declared = transport.stats(&queue("orders"));
    assert_eq!(
        (declared.ready, declared.in_flight, declared.dead_letters),
        (0, 0, 0)
    );
    // The failure names the real queue.
    let failures = failures.lock().unwrap().clone();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].0, "queue orders-eu", "{failures:?}");
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_convention_names_queues_and_topics_on_both_sides() {
    let transport = MemoryTransport::new();
    let count = Count::default();
    let host = Host::builder()
        .transport(transport.clone())
        .queue_names(|name| format!("staging-{name}"))
        .command::<Order, _>(count.clone())
        .event::<Audit, _>(count.clone())
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    assert_eq!(transport.subscriptions("staging-order-placed"), ["audit"]);
    assert!(transport.subscriptions("order-placed").is_empty());
    // A bus of its own, configured alike, reaches the host's consumers.
    let bus = Bus::new(
        transport.clone(),
        BusConfig::default().queue_names(|name| format!("staging-{name}")),
    );
    bus.send(&Order { n: 1 }).await.unwrap();
    bus.publish(&OrderPlaced { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || count.0.load(Ordering::SeqCst)
            == 2)
        .await
    );
    // A bus without the convention sends to the declared queue, which nobody consumes.
    Bus::new(transport.clone(), BusConfig::default())
        .send(&Order { n: 1 })
        .await
        .unwrap();
    assert_eq!(transport.stats(&queue("orders")).ready, 1);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_per_type_name_wins_over_the_convention() {
    let transport = MemoryTransport::new();
    let bus = Bus::new(
        transport.clone(),
        BusConfig::default()
            .queue_names(|name| format!("staging-{name}"))
            .queue_for::<Order>("orders-eu"),
    );
    bus.send(&Order { n: 1 }).await.unwrap();
    assert_eq!(transport.stats(&queue("orders-eu")).ready, 1);
    assert_eq!(transport.stats(&queue("staging-orders")).ready, 0);
}

#[tokio::test]
async fn an_invalid_run_time_name_is_an_error_naming_it() {
    let err = Host::builder()
        .transport(MemoryTransport::new())
        .queue_for::<Order>("orders:eu")
        .command::<Order, _>(Count::default())
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("orders:eu"), "{err}");
    let bus = Bus::new(
        MemoryTransport::new(),
        BusConfig::default().queue_names(|name| format!("{name} eu")),
    );
    let err = bus.send(&Order { n: 1 }).await.unwrap_err().to_string();
    assert!(err.contains("orders eu"), "{err}");
}
