//! Checks of per-key ordering (bus_core::flow::PerKey) on every transport that offers it,
//! from the handlers' own start and end records.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::{start_command, wait_until, Probe};
use bus_core::flow::{FlowControl, PerKey};
use bus_core::transport::Source;
use bus_core::{
    Backoff, Bus, BusConfig, CommandProcessor, Context, Message, MessageKind, ProcessError,
    ProcessingSettings, SendOptions, Transport,
};

#[derive(Debug, Serialize, Deserialize)]
struct Ordered {
    key: String,
    seq: u32,
    /// Fails (retry) this many deliveries, then succeeds; `u32::MAX`: dead-letters at once.
    fail: u32,
}
command!(Ordered, "conformance-ordered");

/// One handler run, as the handler recorded it.
#[derive(Debug, Clone)]
struct Run {
    key: String,
    seq: u32,
    start: Instant,
    end: Instant,
    ok: bool,
}

/// Every run's record; each works `work`.
struct Log {
    work: Duration,
    concurrency: usize,
    runs: Mutex<Vec<Run>>,
}

impl Log {
    fn new(work: Duration, concurrency: usize) -> Arc<Self> {
        Arc::new(Log {
            work,
            concurrency,
            runs: Mutex::new(Vec::new()),
        })
    }

    fn runs(&self) -> Vec<Run> {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn succeeded(&self) -> usize {
        self.runs().iter().filter(|r| r.ok).count()
    }

    /// Each key's runs, by start.
    fn by_key(&self) -> BTreeMap<String, Vec<Run>> {
        let mut keys: BTreeMap<String, Vec<Run>> = BTreeMap::new();
        for run in self.runs() {
            keys.entry(run.key.clone()).or_default().push(run);
        }
        for runs in keys.values_mut() {
            runs.sort_by_key(|r| r.start);
        }
        keys
    }
}

/// The most of `runs` that ran at once (ends before starts at the same instant).
fn peak<'a>(runs: impl IntoIterator<Item = &'a Run>) -> usize {
    let mut edges: Vec<(Instant, i32)> = runs
        .into_iter()
        .flat_map(|r| [(r.start, 1), (r.end, -1)])
        .collect();
    edges.sort();
    let (mut now, mut peak) = (0, 0);
    for (_, edge) in edges {
        now += edge;
        peak = peak.max(now);
    }
    usize::try_from(peak).unwrap_or(0)
}

#[async_trait]
impl CommandProcessor<Ordered> for Arc<Log> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(self.concurrency)
            .prefetch_count(0)
            .dead_letter_delivery_limit(10)
            .retry(Backoff::fixed(Duration::from_millis(50)))
    }
    async fn process(&self, message: Ordered, context: &Context) -> Result<(), ProcessError> {
        let start = Instant::now();
        tokio::time::sleep(self.work).await;
        let ok = message.fail != u32::MAX && context.delivery_count() > message.fail;
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Run {
                key: message.key,
                seq: message.seq,
                start,
                end: Instant::now(),
                ok,
            });
        match (ok, message.fail) {
            (true, _) => Ok(()),
            (false, u32::MAX) => Err(ProcessError::dead_letter("poison on purpose")),
            (false, _) => Err(ProcessError::retry("failing on purpose")),
        }
    }
}

fn source() -> Source {
    Source::queue(Ordered::NAME).expect("valid name")
}

fn ordered(key: &str, seq: u32, fail: u32) -> Ordered {
    Ordered {
        key: key.to_owned(),
        seq,
        fail,
    }
}

/// FIFO per key over two hosts: within each key no run overlaps another and the runs
/// come in the order sent, a retried message (twice, with a delayed retry) keeping its
/// place; other keys run meanwhile; unkeyed messages on the same queue all run.
pub async fn keyed_messages_run_in_order_per_key(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    const KEYS: u32 = 8;
    const EACH: u32 = 15;
    let source = source();
    flow.order_per_key(&source, Some(PerKey::fifo()))
        .await
        .expect("ordered");
    assert_eq!(
        flow.flow(&source).await.expect("read").per_key,
        Some(PerKey::fifo())
    );
    let log = Log::new(Duration::from_millis(5), 8);
    let a = start_command::<Ordered, _>(Arc::clone(&transport), Arc::clone(&log)).await;
    let b = start_command::<Ordered, _>(transport, Arc::clone(&log)).await;
    for seq in 0..EACH {
        for k in 0..KEYS {
            let key = format!("key-{k}");
            let fail = if k == 0 && seq == 3 { 2 } else { 0 };
            let bus = if seq % 2 == 0 { a.bus() } else { b.bus() };
            bus.send_keyed(&ordered(&key, seq, fail), &key)
                .await
                .expect("sent");
        }
    }
    let unkeyed: Vec<Ordered> = (0..10).map(|seq| ordered("", seq, 0)).collect();
    a.bus().send_batch(&unkeyed).await.expect("sent");
    let total = (KEYS * EACH + 10) as usize;
    let all = wait_until(Duration::from_secs(60), || log.succeeded() == total).await;
    a.shutdown().await.expect("shutdown");
    b.shutdown().await.expect("shutdown");
    assert!(all, "only {} of {total} succeeded", log.succeeded());
    let keys = log.by_key();
    for (key, runs) in keys.iter().filter(|(key, _)| !key.is_empty()) {
        assert_eq!(runs.iter().filter(|r| r.ok).count(), EACH as usize, "{key}");
        for pair in runs.windows(2) {
            assert!(
                pair[1].start >= pair[0].end,
                "{key}: #{} started before #{} ended",
                pair[1].seq,
                pair[0].seq
            );
            assert!(
                pair[1].seq == pair[0].seq + u32::from(pair[0].ok),
                "{key}: #{} ran after #{} (ok: {}): out of order",
                pair[1].seq,
                pair[0].seq,
                pair[0].ok
            );
        }
    }
    assert_eq!(
        keys["key-0"].len(),
        EACH as usize + 2,
        "two failed runs of #3"
    );
    let keyed: Vec<&Run> = keys
        .iter()
        .filter(|(key, _)| !key.is_empty())
        .flat_map(|(_, runs)| runs)
        .collect();
    assert!(peak(keyed) > 1, "keys never ran side by side");
}

/// Keys take turns: a key with 200 waiting messages does not starve one with 5 sent after
/// it, even when its limit (8) would let it fill every handler (2).
pub async fn keys_take_turns(transport: Arc<dyn Transport>, flow: &dyn FlowControl) {
    let source = source();
    let order = PerKey::new(8).expect("valid");
    flow.order_per_key(&source, Some(order))
        .await
        .expect("ordered");
    let log = Log::new(Duration::from_millis(10), 2);
    let running = start_command::<Ordered, _>(transport, Arc::clone(&log)).await;
    let big: Vec<Ordered> = (0..200).map(|seq| ordered("big", seq, 0)).collect();
    let small: Vec<Ordered> = (0..5).map(|seq| ordered("small", seq, 0)).collect();
    running
        .bus()
        .send_batch_keyed(&big, "big")
        .await
        .expect("sent");
    running
        .bus()
        .send_batch_keyed(&small, "small")
        .await
        .expect("sent");
    let all = wait_until(Duration::from_secs(60), || log.succeeded() == 205).await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "only {} of 205 ran", log.succeeded());
    let keys = log.by_key();
    let small_done = keys["small"].iter().map(|r| r.end).max().expect("ran");
    let big_started = keys["big"].iter().filter(|r| r.start < small_done).count();
    assert!(
        big_started <= 30,
        "{big_started} messages of the big key started before the small key's 5 were done"
    );
}

/// A per-key limit of 2 over 8 handlers: no key ever has more than 2 in flight, each key
/// reaches 2, and keys run side by side.
pub async fn a_per_key_limit_holds_and_is_reached(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let source = source();
    let order = PerKey::new(2).expect("valid");
    flow.order_per_key(&source, Some(order))
        .await
        .expect("ordered");
    assert_eq!(flow.flow(&source).await.expect("read").per_key, Some(order));
    let log = Log::new(Duration::from_millis(20), 8);
    let running = start_command::<Ordered, _>(transport, Arc::clone(&log)).await;
    for key in ["a", "b", "c"] {
        let batch: Vec<Ordered> = (0..20).map(|seq| ordered(key, seq, 0)).collect();
        running
            .bus()
            .send_batch_keyed(&batch, key)
            .await
            .expect("sent");
    }
    let all = wait_until(Duration::from_secs(60), || log.succeeded() == 60).await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "only {} of 60 ran", log.succeeded());
    let keys = log.by_key();
    for (key, runs) in &keys {
        let most = peak(runs);
        assert!(most <= 2, "{key}: {most} ran at once; the limit is 2");
        assert_eq!(most, 2, "{key}: the limit was never reached");
    }
    let every: Vec<&Run> = keys.values().flatten().collect();
    assert!(peak(every) > 2, "keys never ran side by side");
}

/// A dead letter gives its key's slot back by default; with `dead_letter_blocks`, later
/// messages of the key wait (and the setting reads back), counted as keyed, not ready.
pub async fn a_dead_letter_unblocks_its_key_unless_set_to_block(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
    probe: &dyn Probe,
) {
    let source = source();
    flow.order_per_key(&source, Some(PerKey::fifo()))
        .await
        .expect("ordered");
    let log = Log::new(Duration::ZERO, 4);
    let running = start_command::<Ordered, _>(transport, Arc::clone(&log)).await;
    let batch = [
        ordered("k", 0, u32::MAX),
        ordered("k", 1, 0),
        ordered("k", 2, 0),
    ];
    running
        .bus()
        .send_batch_keyed(&batch, "k")
        .await
        .expect("sent");
    assert!(
        wait_until(Duration::from_secs(10), || log.succeeded() == 2).await,
        "the messages after a dead letter never ran"
    );
    assert_eq!(
        probe.keyed(&source).await,
        Some(0),
        "keyed count after a drain"
    );
    let blocking = PerKey::fifo().dead_letter_blocks(true);
    flow.order_per_key(&source, Some(blocking))
        .await
        .expect("ordered");
    assert_eq!(
        flow.flow(&source).await.expect("read").per_key,
        Some(blocking)
    );
    let batch = [ordered("j", 0, u32::MAX), ordered("j", 1, 0)];
    running
        .bus()
        .send_batch_keyed(&batch, "j")
        .await
        .expect("sent");
    assert!(
        wait_until(Duration::from_secs(10), || log.runs().len() == 4).await,
        "the poison message never ran"
    );
    assert!(
        !wait_until(Duration::from_millis(1500), || log.succeeded() > 2).await,
        "a message ran after its key's dead letter, which blocks"
    );
    running.shutdown().await.expect("shutdown");
    assert_eq!(probe.dead_letters(&source).await.len(), 2);
    let counts = probe.counts(&source).await;
    assert_eq!((counts[0], counts[3]), (0, 2), "ready, dead");
    assert_eq!(
        probe.keyed(&source).await,
        Some(1),
        "the message behind the blocking dead letter waits for its key"
    );
}

/// A delayed keyed send waits for its due time, then joins its key's order there: behind
/// the key's messages sent before it fell due, ahead of those sent after, even when no
/// consumer ran in between (sent before any host starts). A failing message's delayed
/// retry keeps its key's slot meanwhile. With a consumer running, a delayed keyed
/// message starts at its due time, not before, after an earlier-sent one of its key.
pub async fn a_delayed_keyed_send_joins_its_key_at_its_due_time(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
) {
    let source = source();
    flow.order_per_key(&source, Some(PerKey::fifo()))
        .await
        .expect("ordered");
    let bus = Bus::new(Arc::clone(&transport), BusConfig::default());
    let keyed = |at: SystemTime| SendOptions::new().key("k").at(at);
    // #0 fails once (a delayed retry of 50 ms); #2 is due in 300 ms; #1 is sent before
    // #2 is due, #3 after: the key's order is 0, 1, 2, 3.
    bus.send_keyed(&ordered("k", 0, 1), "k")
        .await
        .expect("sent");
    let due = SystemTime::now() + Duration::from_millis(300);
    bus.send_with(&ordered("k", 2, 0), &keyed(due))
        .await
        .expect("sent");
    bus.send_keyed(&ordered("k", 1, 0), "k")
        .await
        .expect("sent");
    let fell_due = wait_until(Duration::from_secs(5), || {
        SystemTime::now() > due + Duration::from_millis(20)
    })
    .await;
    assert!(fell_due, "the clock did not pass the due time");
    bus.send_keyed(&ordered("k", 3, 0), "k")
        .await
        .expect("sent");
    let log = Log::new(Duration::from_millis(5), 4);
    let running = start_command::<Ordered, _>(transport, Arc::clone(&log)).await;
    assert!(
        wait_until(Duration::from_secs(10), || log.succeeded() == 4).await,
        "only {} of 4 ran",
        log.succeeded()
    );
    // A consumer runs: "late" #0 is due in 300 ms, #1 sent now goes first.
    let delay = Duration::from_millis(300);
    let (due, due_at) = (Instant::now() + delay, SystemTime::now() + delay);
    running
        .bus()
        .send_with(
            &ordered("late", 1, 0),
            &SendOptions::new().key("late").at(due_at),
        )
        .await
        .expect("sent");
    running
        .bus()
        .send_keyed(&ordered("late", 0, 0), "late")
        .await
        .expect("sent");
    let all = wait_until(Duration::from_secs(10), || log.succeeded() == 6).await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "only {} of 6 ran", log.succeeded());
    let keys = log.by_key();
    let order: Vec<(u32, bool)> = keys["k"].iter().map(|r| (r.seq, r.ok)).collect();
    assert_eq!(
        order,
        [(0, false), (0, true), (1, true), (2, true), (3, true)],
        "k: (seq, ok) by start"
    );
    for runs in keys.values() {
        for pair in runs.windows(2) {
            assert!(pair[1].start >= pair[0].end, "{pair:?}: overlapped");
        }
    }
    let late: Vec<u32> = keys["late"].iter().map(|r| r.seq).collect();
    assert_eq!(late, [0, 1], "late: seq by start");
    // (Redis keeps due times in whole ms: a few ms early is the rounding.)
    let started = keys["late"][1].start;
    assert!(
        started + Duration::from_millis(5) >= due,
        "the delayed keyed message started {:?} before its due time",
        due - started
    );
    assert!(
        started <= due + super::LATENESS,
        "the delayed keyed message started {:?} after its due time",
        started - due
    );
}

/// A keyed send with a deduplication key is ordered like any keyed send: it waits in its
/// key's list (counted as keyed, not ready), runs in its place, and its duplicate is not
/// stored; sent with a due time as well, it joins its key's order at its due time.
pub async fn a_keyed_send_with_a_dedup_key_keeps_its_keys_order(
    transport: Arc<dyn Transport>,
    flow: &dyn FlowControl,
    probe: &dyn Probe,
) {
    let source = source();
    flow.order_per_key(&source, Some(PerKey::fifo()))
        .await
        .expect("ordered");
    let bus = Bus::new(Arc::clone(&transport), BusConfig::default());
    let once = |dedup: &str| SendOptions::new().key("k").dedup_key(dedup);
    // #0 fails once (its retry holds the key); #1 and #3 are deduplicated, #3 delayed
    // until after #2 was sent; #4 is sent after #3 fell due.
    bus.send_keyed(&ordered("k", 0, 1), "k")
        .await
        .expect("sent");
    let first = bus
        .send_with(&ordered("k", 1, 0), &once("d1"))
        .await
        .expect("sent");
    let again = bus
        .send_with(&ordered("k", 99, 0), &once("d1"))
        .await
        .expect("sent");
    assert!(!first.duplicate && again.duplicate, "{first:?} {again:?}");
    assert_eq!(again.id, first.id);
    bus.send_keyed(&ordered("k", 2, 0), "k")
        .await
        .expect("sent");
    let due = SystemTime::now() + Duration::from_millis(200);
    bus.send_with(&ordered("k", 3, 0), &once("d3").at(due))
        .await
        .expect("sent");
    assert_eq!(probe.counts(&source).await[0], 0, "nothing went onto ready");
    if let Some(keyed) = probe.keyed(&source).await {
        assert_eq!(keyed, 3, "#0, #1 and #2 wait in the key's list");
    }
    let fell_due = wait_until(Duration::from_secs(5), || {
        SystemTime::now() > due + Duration::from_millis(20)
    })
    .await;
    assert!(fell_due, "the clock did not pass the due time");
    bus.send_keyed(&ordered("k", 4, 0), "k")
        .await
        .expect("sent");
    // A batch of keyed deduplicated sends joins the key's list too, in its order; its
    // #98 is a duplicate of #1.
    let batch = [ordered("k", 5, 0), ordered("k", 98, 0), ordered("k", 6, 0)];
    let sent = bus
        .send_batch_deduplicated(&batch, &["d5", "d1", "d6"], &SendOptions::new().key("k"))
        .await
        .expect("sent");
    let duplicates: Vec<bool> = sent.iter().map(|s| s.duplicate).collect();
    assert_eq!(duplicates, [false, true, false], "{sent:?}");
    assert_eq!(sent[1].id, first.id, "a duplicate names the first message");
    assert_eq!(probe.counts(&source).await[0], 0, "nothing went onto ready");
    if let Some(keyed) = probe.keyed(&source).await {
        assert_eq!(
            keyed, 7,
            "#0 to #6 (but the duplicate) wait in the key's list"
        );
    }
    let log = Log::new(Duration::from_millis(5), 4);
    let running = start_command::<Ordered, _>(transport, Arc::clone(&log)).await;
    let all = wait_until(Duration::from_secs(10), || log.succeeded() == 7).await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "only {} of 7 ran", log.succeeded());
    let runs = &log.by_key()["k"];
    let order: Vec<(u32, bool)> = runs.iter().map(|r| (r.seq, r.ok)).collect();
    assert_eq!(
        order,
        [
            (0, false),
            (0, true),
            (1, true),
            (2, true),
            (3, true),
            (4, true),
            (5, true),
            (6, true)
        ],
        "(seq, ok) by start; the duplicates (#99, #98) never run"
    );
    for pair in runs.windows(2) {
        assert!(pair[1].start >= pair[0].end, "{pair:?}: overlapped");
    }
}

/// A per-key rate limit (3 starts per 400 ms per key, up to 4 of a key at once): no key
/// ever starts more than 3 messages within 400 ms, from the handlers' records, while the
/// keys run side by side and unkeyed messages run too.
pub async fn a_per_key_rate_limit_holds(transport: Arc<dyn Transport>, flow: &dyn FlowControl) {
    const STARTS: usize = 3;
    const PER: Duration = Duration::from_millis(400);
    // Between a reservation and its handler's start.
    const JITTER: Duration = Duration::from_millis(50);
    let source = source();
    let rate = bus_core::flow::RateLimit::new(STARTS as u32, PER).expect("valid");
    let order = PerKey::new(4).expect("valid").rate(Some(rate));
    flow.order_per_key(&source, Some(order))
        .await
        .expect("ordered");
    assert_eq!(flow.flow(&source).await.expect("read").per_key, Some(order));
    let log = Log::new(Duration::from_millis(10), 8);
    let running = start_command::<Ordered, _>(transport, Arc::clone(&log)).await;
    for key in ["a", "b", "c"] {
        let batch: Vec<Ordered> = (0..9).map(|seq| ordered(key, seq, 0)).collect();
        running
            .bus()
            .send_batch_keyed(&batch, key)
            .await
            .expect("sent");
    }
    let unkeyed: Vec<Ordered> = (0..5).map(|seq| ordered("", seq, 0)).collect();
    running.bus().send_batch(&unkeyed).await.expect("sent");
    let all = wait_until(Duration::from_secs(30), || log.succeeded() == 32).await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "only {} of 32 ran", log.succeeded());
    let keys = log.by_key();
    for key in ["a", "b", "c"] {
        let starts: Vec<Instant> = keys[key].iter().map(|r| r.start).collect();
        for (i, window) in starts.windows(STARTS + 1).enumerate() {
            let span = window[STARTS] - window[0];
            assert!(
                span + JITTER >= PER,
                "{key}: starts {i} to {} came within {span:?}: more than {STARTS} per {PER:?}",
                i + STARTS
            );
        }
        let total = starts[starts.len() - 1] - starts[0];
        assert!(total + JITTER >= 2 * PER, "{key}: 9 starts took {total:?}");
    }
    let keyed: Vec<&Run> = ["a", "b", "c"].iter().flat_map(|k| &keys[*k]).collect();
    assert!(peak(keyed) > 1, "keys never ran side by side");
}
