//! Checks of delayed messages by id: read, cancel, reschedule.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{not_checked, start_command, wait_until, Probe};
use bus_core::transport::Source;
use bus_core::{CommandProcessor, Context, Message, MessageKind, ProcessError, Transport};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Later {
    n: u32,
}
command!(Later, "conformance-later");

#[derive(Default)]
struct Ran(Mutex<Vec<u32>>);

impl Ran {
    fn all(&self) -> Vec<u32> {
        let mut ran = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        ran.sort_unstable();
        ran
    }
}

#[async_trait]
impl CommandProcessor<Later> for Arc<Ran> {
    async fn process(&self, message: Later, _: &Context) -> Result<(), ProcessError> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(message.n);
        Ok(())
    }
}

/// A delayed command can be read back by its id (message and due time), cancelled
/// (never delivered; a second cancel, or one after it became ready, says `false`) and
/// rescheduled (delivered at the new time).
pub async fn delayed_commands_can_be_read_cancelled_and_rescheduled(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    if transport.capabilities().delayed_sends.is_none() {
        not_checked(
            "delayed_commands_can_be_read_cancelled_and_rescheduled",
            "everything",
            "delayed_sends: None",
        );
        return;
    }
    let ran = Arc::new(Ran::default());
    let running = start_command::<Later, _>(transport, Arc::clone(&ran)).await;
    let bus = running.bus();
    let hour = SystemTime::now() + Duration::from_secs(3600);

    let cancelled = bus.send_at(&Later { n: 1 }, hour).await.expect("sent");
    let read = bus
        .scheduled::<Later>(&cancelled)
        .await
        .expect("read")
        .expect("it waits");
    assert_eq!(read.message, Later { n: 1 });
    let off = read
        .due
        .duration_since(hour)
        .unwrap_or_else(|e| e.duration());
    assert!(
        off < Duration::from_millis(5),
        "due {off:?} away from the time asked"
    );
    assert!(bus.cancel::<Later>(&cancelled).await.expect("cancel"));
    assert!(
        !bus.cancel::<Later>(&cancelled).await.expect("cancel"),
        "cancelled twice"
    );
    assert!(bus
        .scheduled::<Later>(&cancelled)
        .await
        .expect("read")
        .is_none());
    let unknown = bus_core::MessageId::from("no-such-message".to_owned());
    assert!(!bus
        .reschedule::<Later>(&unknown, hour)
        .await
        .expect("reschedule"));

    let moved = bus.send_at(&Later { n: 2 }, hour).await.expect("sent");
    let sooner = SystemTime::now() + Duration::from_millis(200);
    let asked = Instant::now();
    assert!(bus
        .reschedule::<Later>(&moved, sooner)
        .await
        .expect("reschedule"));
    let due = wait_until(Duration::from_secs(10), || ran.all().contains(&2)).await;
    assert!(due, "the rescheduled command never ran");
    assert!(
        asked.elapsed() >= Duration::from_millis(150),
        "it ran before its new time"
    );

    let soon = bus
        .send_at(
            &Later { n: 3 },
            SystemTime::now() + Duration::from_millis(100),
        )
        .await
        .expect("sent");
    let delivered = wait_until(Duration::from_secs(10), || ran.all().contains(&3)).await;
    assert!(delivered, "the delayed command never ran");
    assert!(
        !bus.cancel::<Later>(&soon).await.expect("cancel"),
        "cancelled after it ran"
    );

    let source = Source::queue(Later::NAME).expect("valid name");
    let end = Instant::now() + Duration::from_secs(5);
    let mut counts = probe.counts(&source).await;
    while counts != [0; 4] && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
        counts = probe.counts(&source).await;
    }
    running.shutdown().await.expect("shutdown");
    assert_eq!(ran.all(), [2, 3], "the cancelled command never ran");
    assert_eq!(
        counts, [0; 4],
        "nothing left: ready, in flight, delayed, dead"
    );
}

#[derive(Debug, Serialize, Deserialize)]
struct Announced {
    n: u32,
}

impl Message for Announced {
    const NAME: &'static str = "conformance-announced";
    const KIND: MessageKind = MessageKind::Event;
}
impl bus_core::Event for Announced {}

/// When each subscription handled each event.
#[derive(Default)]
struct Heard(Mutex<Vec<(&'static str, u32, Instant)>>);

macro_rules! heard_by {
    ($ty:ident, $name:literal) => {
        struct $ty;
        impl bus_core::Subscription for $ty {
            type Event = Announced;
            const NAME: &'static str = $name;
        }
        #[async_trait]
        impl bus_core::EventProcessor<$ty> for Arc<Heard> {
            async fn process(&self, event: Announced, _: &Context) -> Result<(), ProcessError> {
                self.0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(($name, event.n, Instant::now()));
                Ok(())
            }
        }
    };
}
heard_by!(Mail, "mail");
heard_by!(Ledger, "ledger");

/// A delayed publish reaches each subscription once, at its due time and not before.
pub async fn a_delayed_publish_reaches_each_subscription_at_its_time(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let capabilities = transport.capabilities();
    if !capabilities.topics || capabilities.delayed_sends.is_none() {
        not_checked(
            "a_delayed_publish_reaches_each_subscription_at_its_time",
            "everything",
            "topics: false or delayed_sends: None",
        );
        return;
    }
    let heard = Arc::new(Heard::default());
    let running = bus_core::Host::builder()
        .transport(transport)
        .event::<Mail, _>(Arc::clone(&heard))
        .event::<Ledger, _>(Arc::clone(&heard))
        .build()
        .expect("host builds")
        .start()
        .await
        .expect("host starts");
    let bus = running.bus();
    let delay = Duration::from_millis(300);
    let published = Instant::now();
    let options = bus_core::SendOptions::new().delay(delay);
    let sent = bus
        .publish_with(&Announced { n: 9 }, &options)
        .await
        .expect("published");
    assert!(!sent.duplicate);
    let both = wait_until(Duration::from_secs(10), || {
        heard.0.lock().map(|h| h.len() >= 2).unwrap_or(true)
    })
    .await;
    let mut settled = true;
    for name in ["mail", "ledger"] {
        let source = Source::subscription(Announced::NAME, name).expect("valid names");
        let end = Instant::now() + Duration::from_secs(5);
        let mut counts = probe.counts(&source).await;
        while counts != [0; 4] && Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(10)).await;
            counts = probe.counts(&source).await;
        }
        settled &= counts == [0; 4];
    }
    running.shutdown().await.expect("shutdown");
    assert!(both, "not every subscription received the delayed event");
    assert!(settled, "a subscription kept something");
    let mut got = heard.0.lock().expect("not poisoned").clone();
    got.sort_by_key(|h| h.0);
    assert_eq!(
        got.iter().map(|h| (h.0, h.1)).collect::<Vec<_>>(),
        [("ledger", 9), ("mail", 9)]
    );
    for (name, _, at) in got {
        let after = at - published;
        assert!(
            after + Duration::from_millis(5) >= delay
                && after <= delay + super::LATENESS + Duration::from_millis(500),
            "{name} handled the event {after:?} after its publish, due after {delay:?}"
        );
    }
}
