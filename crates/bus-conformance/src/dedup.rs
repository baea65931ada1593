//! Checks of deduplication at send.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{not_checked, start_command, wait_until, Probe};
use bus_core::transport::Source;
use bus_core::{
    CommandProcessor, Context, Message, MessageKind, ProcessError, SendOptions, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Unique {
    n: u32,
}
command!(Unique, "conformance-unique");

#[derive(Default)]
struct Seen(Mutex<Vec<u32>>);

impl Seen {
    fn all(&self) -> Vec<u32> {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        seen.sort_unstable();
        seen
    }
}

#[async_trait]
impl CommandProcessor<Unique> for Arc<Seen> {
    async fn process(&self, message: Unique, _: &Context) -> Result<(), ProcessError> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(message.n);
        Ok(())
    }
}

/// A send with a deduplication key stores the message once per key and window: a
/// second send with the key stores nothing and returns the first message's id, marked as
/// a duplicate, for plain and delayed sends; other keys and sends without a key are not
/// affected; once the window is over, the key stores a message again.
pub async fn a_dedup_key_stores_one_message_per_window(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let delays = transport.capabilities().delayed_sends.is_some();
    let seen = Arc::new(Seen::default());
    let running = start_command::<Unique, _>(transport, Arc::clone(&seen)).await;
    let bus = running.bus();
    let once = |key: &str| SendOptions::new().dedup_key(key);

    let first = bus
        .send_with(&Unique { n: 1 }, &once("a"))
        .await
        .expect("sent");
    let again = bus
        .send_with(&Unique { n: 2 }, &once("a"))
        .await
        .expect("sent");
    assert!(!first.duplicate, "{first:?}");
    assert!(again.duplicate, "{again:?}");
    assert_eq!(again.id, first.id, "a duplicate names the first message");
    let other = bus
        .send_with(&Unique { n: 3 }, &once("b"))
        .await
        .expect("sent");
    assert!(!other.duplicate && other.id != first.id, "{other:?}");
    bus.send(&Unique { n: 4 }).await.expect("sent");
    let mut expected = vec![1, 3, 4];
    if delays {
        let later = once("c").delay(Duration::from_millis(200));
        let delayed = bus.send_with(&Unique { n: 5 }, &later).await.expect("sent");
        let twice = bus
            .send_with(&Unique { n: 6 }, &once("c"))
            .await
            .expect("sent");
        assert!(!delayed.duplicate && twice.duplicate && twice.id == delayed.id);
        expected.push(5);
    } else {
        not_checked(
            "a_dedup_key_stores_one_message_per_window",
            "delayed sends",
            "delayed_sends: None",
        );
    }
    // The window: a short one ends, and the key stores again.
    let window = Duration::from_millis(300);
    let short = || once("d").dedup_window(window);
    let started = Instant::now();
    let opened = bus
        .send_with(&Unique { n: 7 }, &short())
        .await
        .expect("sent");
    assert!(!opened.duplicate);
    expected.push(7);
    let mut reopened = None;
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        let sent = bus
            .send_with(&Unique { n: 8 }, &short())
            .await
            .expect("sent");
        if !sent.duplicate {
            reopened = Some(started.elapsed());
            break;
        }
        assert_eq!(sent.id, opened.id);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reopened = reopened.expect("the key held past its window");
    assert!(
        reopened + Duration::from_millis(5) >= window,
        "the key held {reopened:?}, less than its {window:?} window"
    );
    expected.push(8);

    let all = wait_until(Duration::from_secs(10), || {
        seen.all().len() >= expected.len()
    })
    .await;
    let source = Source::queue(Unique::NAME).expect("valid name");
    let end = Instant::now() + Duration::from_secs(5);
    let mut counts = probe.counts(&source).await;
    while counts != [0; 4] && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
        counts = probe.counts(&source).await;
    }
    running.shutdown().await.expect("shutdown");
    assert!(all, "handled: {:?}", seen.all());
    assert_eq!(
        seen.all(),
        expected,
        "each stored message ran once, no duplicate"
    );
    assert_eq!(
        counts, [0; 4],
        "nothing left: ready, in flight, delayed, dead"
    );
}

/// Keys that do not match the commands, or a batch-wide key: refused before anything is
/// stored.
async fn refuses_batches_of_the_wrong_shape(bus: &bus_core::Bus) {
    let plain = SendOptions::new();
    let unique = |from: u32, to: u32| (from..to).map(|n| Unique { n }).collect::<Vec<_>>();
    let wrong = bus
        .send_batch_deduplicated(&unique(100, 102), &["x"], &plain)
        .await;
    assert!(
        matches!(wrong, Err(bus_core::Error::Config(_))),
        "{wrong:?}"
    );
    let wrong = bus
        .send_batch_deduplicated(&unique(100, 101), &["x"], &plain.clone().dedup_key("x"))
        .await;
    assert!(
        matches!(wrong, Err(bus_core::Error::Config(_))),
        "{wrong:?}"
    );
}

/// A large batch, over several script calls: keys repeat across them, and each repeat
/// names its key's first (commands 1000..2200 stored).
async fn a_large_batch_stores_each_key_once(bus: &bus_core::Bus) {
    let plain = SendOptions::new();
    let commands: Vec<Unique> = (1000..3500).map(|n| Unique { n }).collect();
    let keys: Vec<String> = (0..2500).map(|i| format!("many-{}", i % 1200)).collect();
    let sent = bus
        .send_batch_deduplicated(&commands, &keys, &plain)
        .await
        .expect("sent");
    for (i, s) in sent.iter().enumerate() {
        assert_eq!(s.duplicate, i >= 1200, "#{i}: {s:?}");
        if i >= 1200 {
            assert_eq!(s.id, sent[i % 1200].id, "#{i} names its key's first");
        }
    }
}

/// A batch with one deduplication key per command stores each key once: a command whose
/// key is held (by an earlier send, or by an earlier command of the same batch, also in
/// another chunk of a large batch) stores nothing and names the first message; delayed
/// batches alike. A batch of the wrong shape is refused and stores nothing.
pub async fn a_batch_with_dedup_keys_stores_each_key_once(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let delays = transport.capabilities().delayed_sends.is_some();
    let seen = Arc::new(Seen::default());
    let running = start_command::<Unique, _>(transport, Arc::clone(&seen)).await;
    let bus = running.bus();
    let plain = SendOptions::new();
    let unique = |from: u32, to: u32| (from..to).map(|n| Unique { n }).collect::<Vec<_>>();

    refuses_batches_of_the_wrong_shape(&bus).await;
    let single = bus
        .send_with(&Unique { n: 1 }, &SendOptions::new().dedup_key("x"))
        .await
        .expect("sent");
    let sent = bus
        .send_batch_deduplicated(&unique(2, 8), &["a", "b", "a", "x", "c", "b"], &plain)
        .await
        .expect("sent");
    let duplicates: Vec<bool> = sent.iter().map(|s| s.duplicate).collect();
    assert_eq!(
        duplicates,
        [false, false, true, true, false, true],
        "{sent:?}"
    );
    assert_eq!(
        sent[2].id, sent[0].id,
        "a duplicate names the batch's first"
    );
    assert_eq!(sent[5].id, sent[1].id);
    assert_eq!(sent[3].id, single.id, "a duplicate names an earlier send");
    let mut expected = vec![1, 2, 3, 6];
    let again = bus
        .send_with(&Unique { n: 8 }, &SendOptions::new().dedup_key("c"))
        .await
        .expect("sent");
    assert!(again.duplicate && again.id == sent[4].id, "{again:?}");

    a_large_batch_stores_each_key_once(&bus).await;
    expected.extend(1000..2200);

    if delays {
        let later = plain.clone().delay(Duration::from_millis(200));
        let sent = bus
            .send_batch_deduplicated(&unique(10, 13), &["l1", "l1", "l2"], &later)
            .await
            .expect("sent");
        let duplicates: Vec<bool> = sent.iter().map(|s| s.duplicate).collect();
        assert_eq!(duplicates, [false, true, false], "{sent:?}");
        let twice = bus
            .send_with(&Unique { n: 13 }, &SendOptions::new().dedup_key("l2"))
            .await
            .expect("sent");
        assert!(twice.duplicate && twice.id == sent[2].id, "{twice:?}");
        expected.extend([10, 12]);
    } else {
        not_checked(
            "a_batch_with_dedup_keys_stores_each_key_once",
            "delayed batches",
            "delayed_sends: None",
        );
    }
    expected.sort_unstable();

    let all = wait_until(Duration::from_secs(20), || {
        seen.all().len() >= expected.len()
    })
    .await;
    let source = Source::queue(Unique::NAME).expect("valid name");
    let end = Instant::now() + Duration::from_secs(5);
    let mut counts = probe.counts(&source).await;
    while counts != [0; 4] && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(10)).await;
        counts = probe.counts(&source).await;
    }
    running.shutdown().await.expect("shutdown");
    assert!(all, "handled {} of {}", seen.all().len(), expected.len());
    assert_eq!(
        seen.all(),
        expected,
        "each stored message ran once, no duplicate"
    );
    assert_eq!(
        counts, [0; 4],
        "nothing left: ready, in flight, delayed, dead"
    );
}
