//! Checks of delayed messages by id: read, cancel, reschedule.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::{not_checked, start_command, wait_until, Probe};
use crate::transport::Source;
use crate::{CommandProcessor, Context, Message, MessageKind, ProcessError, Transport};

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
    let unknown = crate::MessageId::from("no-such-message".to_owned());
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
