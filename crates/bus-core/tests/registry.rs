//! Processors that register themselves: `#[processor]` and
//! `HostBuilder::register_processors`, its errors at `build()` (two processors of one
//! command; an event processor on a transport without topics) and how it mixes with
//! explicit registration. Finding processors of another crate is in
//! samples/tests/register_processors.rs, a binary without deliberate conflicts.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{Capabilities, Source};
use bus_core::{
    processor, CommandProcessor, Context, EventProcessor, EventSubscription, Host, MemoryTransport,
    ProcessError, ProcessingSettings, ProcessorEntry, RedisCommand, RedisEvent,
};
use bus_test_redis::eventually;
use common::{Tap, Tapped};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "registry-orders")]
struct Order {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "registry-shipped")]
struct Shipped {
    n: u32,
}

#[derive(EventSubscription)]
#[bus(event = Shipped, name = "mail")]
struct Mail;

/// What every processor here counts into, so a test can tell which one ran.
static COUNTED: [AtomicU32; 3] = [AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)];

/// Two processors of one command.
mod duplicate {
    use super::*;

    #[derive(Default)]
    pub struct FirstOrders;

    #[processor]
    #[async_trait]
    impl CommandProcessor<Order> for FirstOrders {
        async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
            Ok(())
        }
    }

    #[derive(Default)]
    pub struct SecondOrders;

    #[processor]
    #[async_trait]
    impl CommandProcessor<Order> for SecondOrders {
        async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
            Ok(())
        }
    }
}

/// An event processor, made by a constructor named in the attribute, with settings.
mod events {
    use super::*;

    pub struct MailProcessor {
        pub slot: usize,
    }

    pub fn mail_processor() -> MailProcessor {
        MailProcessor { slot: 0 }
    }

    #[processor(new = mail_processor)]
    #[async_trait]
    impl EventProcessor<Mail> for MailProcessor {
        async fn process(&self, shipped: Shipped, _: &Context) -> Result<(), ProcessError> {
            COUNTED[self.slot].fetch_add(1, Ordering::SeqCst);
            if shipped.n == 0 {
                return Err(ProcessError::retry("shipment 0 fails"));
            }
            Ok(())
        }
        // One delivery only: a failure is dead-lettered at once, which shows that the
        // host took these settings.
        fn settings(&self) -> ProcessingSettings {
            ProcessingSettings::default().dead_letter_delivery_limit(1)
        }
    }
}

/// One processor type, registered both ways.
mod both_ways {
    use super::*;

    pub struct Orders {
        pub slot: usize,
    }

    impl Default for Orders {
        fn default() -> Self {
            Orders { slot: 1 }
        }
    }

    #[processor]
    #[async_trait]
    impl CommandProcessor<Order> for Orders {
        async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
            COUNTED[self.slot].fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }
}

fn in_module(name: &str) -> String {
    format!("{}::{name}", module_path!())
}

#[test]
fn the_registry_holds_every_processor_of_the_binary_in_a_stable_order() {
    let all: Vec<(&str, &str, &str)> = ProcessorEntry::all()
        .into_iter()
        .map(|e| (e.module(), e.processor(), e.message()))
        .collect();
    assert_eq!(
        all,
        [
            ("registry::both_ways", "Orders", "Order"),
            ("registry::duplicate", "FirstOrders", "Order"),
            ("registry::duplicate", "SecondOrders", "Order"),
            ("registry::events", "MailProcessor", "Mail"),
        ]
    );
}

#[test]
fn two_registered_processors_of_one_command_are_an_error_naming_both() {
    let err = Host::builder()
        .transport(MemoryTransport::new())
        .register_processors_in(&in_module("duplicate"))
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("two processors"), "{err}");
    assert!(
        err.contains("registry::duplicate::FirstOrders")
            && err.contains("registry::duplicate::SecondOrders")
            && err.contains("queue registry-orders"),
        "{err}"
    );
    // The whole binary's registry has the same conflict.
    let err = Host::builder()
        .transport(MemoryTransport::new())
        .register_processors()
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("two processors"), "{err}");
}

#[test]
fn a_registered_and_an_explicit_processor_of_one_command_are_an_error_naming_both() {
    let err = Host::builder()
        .transport(MemoryTransport::new())
        .command::<Order, _>(both_ways::Orders::default())
        .register_processors_in(&in_module("duplicate"))
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("registry::both_ways::Orders") && err.contains("registry::duplicate::"),
        "{err}"
    );
}

#[tokio::test]
async fn a_processor_registered_both_ways_runs_once_as_registered_explicitly() {
    let transport = MemoryTransport::new();
    // Registered by the registry before and after the explicit call: the explicit one
    // (slot 2) is kept either way.
    let host = Host::builder()
        .transport(transport.clone())
        .register_processors_in(&in_module("both_ways"))
        .command::<Order, _>(both_ways::Orders { slot: 2 })
        .register_processors_in(&in_module("both_ways"))
        .build()
        .unwrap();
    assert_eq!(host.messages().len(), 1);
    let running = host.start().await.unwrap();
    running.bus().send(&Order { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || COUNTED[2]
            .load(Ordering::SeqCst)
            == 1)
        .await
    );
    assert_eq!(COUNTED[1].load(Ordering::SeqCst), 0);
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_registered_event_processor_runs_with_its_constructor_and_settings() {
    let transport = MemoryTransport::new();
    let host = Host::builder()
        .transport(transport.clone())
        .register_processors_in(&in_module("events"))
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    assert_eq!(transport.subscriptions("registry-shipped"), ["mail"]);
    running.bus().publish(&Shipped { n: 1 }).await.unwrap();
    running.bus().publish(&Shipped { n: 0 }).await.unwrap();
    let mail = Source::subscription("registry-shipped", "mail").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || transport
            .dead_letters(&mail)
            .len()
            == 1)
        .await,
        "{:?}",
        transport.stats(&mail)
    );
    // Two deliveries in all: the failing one was not retried.
    assert_eq!(COUNTED[0].load(Ordering::SeqCst), 2);
    running.shutdown().await.unwrap();
    // Its settings are the processor's own: a different explicit processor of the same
    // subscription with other settings is refused as a duplicate, not merged.
    let err = Host::builder()
        .transport(MemoryTransport::new())
        .register_processors_in(&in_module("events"))
        .event::<Mail, _>(Explicit)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("MailProcessor") && err.contains("Explicit"),
        "{err}"
    );
}

struct Explicit;

#[async_trait]
impl EventProcessor<Mail> for Explicit {
    async fn process(&self, _: Shipped, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

/// No topics (as BabelQueue's).
#[derive(Debug, Default)]
struct NoTopicsTap;

impl Tap for NoTopicsTap {
    fn capabilities(&self, _: &MemoryTransport) -> Capabilities {
        Capabilities::ALL.topics(false)
    }
}

/// A transport without topics (as BabelQueue's), over the in-memory one.
type NoTopics = Tapped<NoTopicsTap>;

#[test]
fn an_event_processor_on_a_transport_without_topics_is_an_error_naming_it() {
    let err = Host::builder()
        .transport(NoTopics::default())
        .register_processors_in(&in_module("events"))
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("registry::events::MailProcessor")
            && err.contains("Shipped")
            && err.contains("NoTopics")
            && err.contains("no topics"),
        "{err}"
    );
    // Commands are fine there.
    Host::builder()
        .transport(NoTopics::default())
        .register_processors_in(&in_module("both_ways"))
        .build()
        .unwrap();
}
