//! Several message types on one queue, routed by type (SPEC §10), with the
//! unknown-type hook and the error observer, on the in-memory transport.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{DeadLetterReason, Source};
use bus_core::{
    Command, CommandProcessor, Context, Host, MemoryTransport, Message, MessageKind, ProcessError,
    ProcessingSettings,
};
use bus_test_redis::eventually;
use serde::{Deserialize, Serialize};

macro_rules! on_orders {
    ($ty:ident, $urn:literal) => {
        #[derive(Debug, Serialize, Deserialize)]
        struct $ty {
            order: u32,
        }
        impl Message for $ty {
            const NAME: &'static str = "orders";
            const TYPE: &'static str = $urn;
            const KIND: MessageKind = MessageKind::Command;
        }
        impl Command for $ty {}
    };
}
on_orders!(Created, "urn:babel:orders:created");
on_orders!(Paid, "urn:babel:orders:paid");
on_orders!(Shipped, "urn:babel:orders:shipped");

#[derive(Default)]
struct Seen {
    created: AtomicU32,
    paid: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Created> for Arc<Seen> {
    async fn process(&self, _: Created, ctx: &Context) -> Result<(), ProcessError> {
        assert_eq!(ctx.message_type(), "urn:babel:orders:created");
        self.created.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[async_trait]
impl CommandProcessor<Paid> for Arc<Seen> {
    async fn process(&self, paid: Paid, _: &Context) -> Result<(), ProcessError> {
        self.paid.fetch_add(1, Ordering::SeqCst);
        if paid.order == 0 {
            return Err(ProcessError::dead_letter("order 0 cannot be paid"));
        }
        Ok(())
    }
}

fn host(transport: &MemoryTransport, seen: &Arc<Seen>) -> bus_core::HostBuilder {
    Host::builder()
        .transport(transport.clone())
        .command::<Created, _>(Arc::clone(seen))
        .command::<Paid, _>(Arc::clone(seen))
}

#[tokio::test]
async fn each_type_on_one_queue_reaches_its_processor() {
    let transport = MemoryTransport::new();
    let seen = Arc::new(Seen::default());
    let failures = Arc::new(Mutex::new(Vec::new()));
    let observed = Arc::clone(&failures);
    let running = host(&transport, &seen)
        .on_error(move |failed| {
            let (message_type, _) = failed.message.expect("decoded");
            observed.lock().unwrap().push((
                message_type.to_owned(),
                failed.outcome,
                failed.error.to_owned(),
            ));
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let bus = running.bus();
    for order in 1..=3 {
        bus.send(&Created { order }).await.unwrap();
        bus.send(&Paid { order }).await.unwrap();
    }
    bus.send(&Paid { order: 0 }).await.unwrap();
    bus.send(&Shipped { order: 9 }).await.unwrap();
    let orders = Source::queue("orders").unwrap();
    assert!(
        eventually(Duration::from_secs(10), || transport
            .stats(&orders)
            .dead_letters
            == 2)
        .await
    );
    running.shutdown().await.unwrap();
    assert_eq!(seen.created.load(Ordering::SeqCst), 3);
    assert_eq!(seen.paid.load(Ordering::SeqCst), 4);
    let mut reasons: Vec<DeadLetterReason> = transport
        .dead_letters(&orders)
        .iter()
        .filter_map(|d| d.known_reason())
        .collect();
    reasons.sort_by_key(|r| r.as_str());
    assert_eq!(
        reasons,
        [DeadLetterReason::Rejected, DeadLetterReason::UnknownType]
    );
    let failures = failures.lock().unwrap();
    assert!(
        failures
            .iter()
            .any(|(t, outcome, error)| t == "urn:babel:orders:paid"
                && *outcome == "dead_letter"
                && error.contains("cannot be paid")),
        "{failures:?}"
    );
}

#[tokio::test]
async fn an_unknown_type_goes_to_its_hook_and_is_acknowledged() {
    let transport = MemoryTransport::new();
    let seen = Arc::new(Seen::default());
    let unknown = Arc::new(Mutex::new(Vec::new()));
    let hooked = Arc::clone(&unknown);
    let running = host(&transport, &seen)
        .on_unknown_type(move |message| {
            hooked.lock().unwrap().push(message.message_type.to_owned());
        })
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    running.bus().send(&Shipped { order: 1 }).await.unwrap();
    running.bus().send(&Created { order: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || seen
            .created
            .load(Ordering::SeqCst)
            == 1)
        .await
    );
    assert!(
        eventually(Duration::from_secs(10), || unknown.lock().unwrap().len()
            == 1)
        .await
    );
    running.shutdown().await.unwrap();
    let stats = transport.stats(&Source::queue("orders").unwrap());
    assert_eq!(
        (stats.ready, stats.in_flight, stats.dead_letters),
        (0, 0, 0)
    );
    assert_eq!(*unknown.lock().unwrap(), ["urn:babel:orders:shipped"]);
}

#[test]
fn two_processors_of_one_type_on_one_queue_are_refused() {
    let transport = MemoryTransport::new();
    let seen = Arc::new(Seen::default());
    let error = host(&transport, &seen)
        .command::<Created, _>(Arc::clone(&seen))
        .build()
        .unwrap_err();
    assert!(
        error.to_string().contains("urn:babel:orders:created"),
        "{error}"
    );
}

#[derive(Debug, Serialize, Deserialize)]
struct Spaced;
impl Message for Spaced {
    const NAME: &'static str = "has space";
    const KIND: MessageKind = MessageKind::Command;
}
impl Command for Spaced {}

#[derive(Debug, Serialize, Deserialize)]
struct Slashed;
impl Message for Slashed {
    const NAME: &'static str = "has/slash";
    const KIND: MessageKind = MessageKind::Command;
}
impl Command for Slashed {}

struct Nothing;
#[async_trait]
impl<C: Command> CommandProcessor<C> for Nothing {
    async fn process(&self, _: C, _: &Context) -> Result<(), ProcessError> {
        Ok(())
    }
}

#[test]
fn every_invalid_registration_is_reported_not_only_the_first() {
    let error = Host::builder()
        .transport(MemoryTransport::new())
        .command::<Spaced, _>(Nothing)
        .command::<Slashed, _>(Nothing)
        .build()
        .unwrap_err()
        .to_string();
    assert!(error.contains("2 registrations are invalid"), "{error}");
    assert!(
        error.contains("\"has space\"") && error.contains("\"has/slash\""),
        "{error}"
    );
}

#[test]
fn processors_of_one_queue_with_different_settings_are_refused() {
    // `Paid`'s processor takes the default settings, this one asks for more concurrency.
    struct Eager;
    #[async_trait]
    impl CommandProcessor<Shipped> for Eager {
        fn settings(&self) -> ProcessingSettings {
            ProcessingSettings::default().max_concurrent_calls(64)
        }
        async fn process(&self, _: Shipped, _: &Context) -> Result<(), ProcessError> {
            Ok(())
        }
    }
    let seen = Arc::new(Seen::default());
    let error = Host::builder()
        .transport(MemoryTransport::new())
        .command::<Paid, _>(Arc::clone(&seen))
        .command::<Shipped, _>(Eager)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("different processing settings") && error.contains("queue orders"),
        "{error}"
    );
}
