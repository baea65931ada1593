//! The conformance suites: the same host-level checks run against every transport (the
//! in-memory one in bus-core's tests, Redis in bus-redis's, BabelQueue's), and the saga
//! store rules against every store ([`saga_store`]), and, with the feature `workflows`,
//! bus-workflows' scenarios against every pair of a transport and a workflow store, so
//! "the same semantics" is tested, not promised. A crate of its own so that what an
//! application links (bus-core) does not carry them.
//!
//! Each check builds its own host on a fresh queue name, so checks may share a transport.
//!
//! A transport that cannot do everything declares it ([`Transport::capabilities`]): a
//! check then skips, or scales to the declared step, exactly what is missing, and says
//! so on stderr and in the log, naming the capability. Nothing is skipped silently.

#![warn(missing_docs)]
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use bus_core::{
    Backoff, CommandProcessor, Context, Host, Message, MessageKind, ProcessError,
    ProcessingSettings, Transport,
};

use bus_core::records::DeadLetter;
use bus_core::transport::{DeadLetterReason, Source};

/// How a check reads what a transport stored (transports have no such API of their own).
#[async_trait]
pub trait Probe: Send + Sync {
    /// The dead letters of a queue, oldest first.
    async fn dead_letters(&self, source: &Source) -> Vec<SeenDeadLetter>;
    /// How many messages of a queue are ready (recovered ones included), in flight,
    /// delayed and dead.
    async fn counts(&self, source: &Source) -> [usize; 4];
    /// How many reply inboxes hold replies ([`Bus::request`](bus_core::Bus::request));
    /// `None` (the default): this probe cannot tell, and checks say so.
    async fn reply_inboxes(&self) -> Option<usize> {
        None
    }
    /// How many messages of an ordered queue wait for their key (`QueueStats::keyed`);
    /// `None` (the default): this probe cannot tell, and checks say so.
    async fn keyed(&self, source: &Source) -> Option<usize> {
        let _ = source;
        None
    }
}

/// A dead letter as a probe reads it.
#[derive(Debug, Clone)]
pub struct SeenDeadLetter {
    /// As stored: `undecodable`, `delivery_limit`, ...
    pub reason: String,
    /// The error messages, oldest first.
    pub errors: Vec<String>,
}

impl From<&DeadLetter> for SeenDeadLetter {
    fn from(dead: &DeadLetter) -> Self {
        SeenDeadLetter {
            reason: dead.reason.clone().unwrap_or_default(),
            errors: dead.errors.iter().map(|e| e.message.clone()).collect(),
        }
    }
}

/// How late a delayed message or a retry may start after its due time and still pass.
/// Generous for a loaded 2-core machine; a transport that waits for its idle poll (a
/// second) fails it.
pub const LATENESS: Duration = Duration::from_millis(250);

macro_rules! command {
    ($ty:ident, $queue:literal) => {
        impl Message for $ty {
            const NAME: &'static str = $queue;
            const KIND: MessageKind = MessageKind::Command;
        }
        impl bus_core::Command for $ty {}
    };
}

// After `command!`, which they use.
mod dedup;
pub use dedup::{
    a_batch_with_dedup_keys_stores_each_key_once, a_dedup_key_stores_one_message_per_window,
};
mod flow;
pub use flow::{
    a_concurrency_limit_holds_across_hosts, a_rate_limit_holds_across_hosts,
    pause_stops_reserving_and_resume_restarts,
};
mod breaker;
mod combinations;
pub use breaker::{
    a_fleet_breaker_holds_every_consumer_and_lets_one_probe_through,
    a_fleet_breaker_stops_every_host_until_one_probe_closes_it,
    an_operator_closes_a_fleet_breaker_by_hand,
};
pub use combinations::{
    a_paused_singleton_starts_nothing, a_singleton_with_a_fleet_breaker_trips_and_closes,
    an_ordered_queue_behind_a_fleet_breaker_keeps_each_keys_order,
};
mod ordering;
pub use ordering::{
    a_dead_letter_unblocks_its_key_unless_set_to_block,
    a_delayed_keyed_send_joins_its_key_at_its_due_time,
    a_keyed_send_with_a_dedup_key_keeps_its_keys_order, a_per_key_limit_holds_and_is_reached,
    a_per_key_rate_limit_holds, keyed_messages_run_in_order_per_key, keys_take_turns,
};
mod lifecycle;
pub use lifecycle::{
    expired_messages_are_dead_lettered_unhandled, expired_messages_can_be_dropped,
    the_hook_before_a_dead_letter_sees_why_and_never_stops_it,
};
mod once;
pub use once::a_step_done_once_is_skipped_by_redeliveries;
mod processing;
mod request;
pub use request::a_request_gets_its_reply_and_leaves_no_inbox;
mod recurring;
pub use recurring::{
    a_tick_is_stored_once_and_only_when_newer, missed_ticks_are_skipped_or_caught_up_once,
    three_hosts_with_skewed_clocks_send_each_tick_once,
};
mod saga_timeouts;
pub use saga_timeouts::saga_timeouts_fire_only_for_the_state_that_asked;
pub mod saga_store;
mod schedule;
#[cfg(feature = "workflows")]
pub mod workflows;
pub use processing::{
    an_event_reaches_each_subscription_once, concurrency_stays_within_max_concurrent_calls,
    shutdown_is_prompt_when_idle_and_bounded_by_the_grace,
};
pub use schedule::{
    a_delayed_publish_reaches_each_subscription_at_its_time,
    delayed_commands_can_be_read_cancelled_and_rescheduled,
};

#[derive(Debug, Serialize, Deserialize)]
struct Timed {
    n: u32,
}
command!(Timed, "conformance-timed");

/// Records when each delivery started; fails the first `failures` deliveries.
struct Recorder {
    failures: u32,
    backoff: Backoff,
    starts: Mutex<Vec<Instant>>,
    runs: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Timed> for Arc<Recorder> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .dead_letter_delivery_limit(10)
            .retry(self.backoff.clone())
    }
    async fn process(&self, _: Timed, _: &Context) -> Result<(), ProcessError> {
        self.starts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Instant::now());
        if self.runs.fetch_add(1, Ordering::SeqCst) < self.failures {
            return Err(ProcessError::retry("failing on purpose"));
        }
        Ok(())
    }
}

/// Builds and starts a host with one command processor.
async fn start_command<C: bus_core::Command, P: CommandProcessor<C>>(
    transport: Arc<dyn Transport>,
    processor: P,
) -> bus_core::RunningHost {
    Host::builder()
        .transport(transport)
        .command::<C, _>(processor)
        .build()
        .expect("host builds")
        .start()
        .await
        .expect("host starts")
}

/// Says that `what` of `check` is not checked on this transport, and which declared
/// capability is why.
fn not_checked(check: &str, what: &str, capability: &str) {
    eprintln!("conformance: {check}: {what} not checked: the transport declares {capability}");
    tracing::warn!(
        check,
        what,
        capability,
        "conformance: not checked, by a declared capability"
    );
}

async fn wait_until(deadline: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + deadline;
    while Instant::now() < end {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done()
}

/// A retry starts within [`LATENESS`] of its backoff, for sub-second backoffs too (a
/// transport that rounds retry delays to a step: a backoff of two steps, within a step
/// either way).
pub async fn retries_start_on_time(transport: Arc<dyn Transport>) {
    let Some(step) = transport.capabilities().retry_delays else {
        not_checked(
            "retries_start_on_time",
            "everything",
            "retry_delays: None (retry delays are not honoured)",
        );
        return;
    };
    let delay = if step.is_zero() {
        Duration::from_millis(200)
    } else {
        step * 2
    };
    let recorder = Arc::new(Recorder {
        failures: 3,
        backoff: Backoff::fixed(delay),
        starts: Mutex::default(),
        runs: AtomicU32::new(0),
    });
    let running = start_command::<Timed, _>(transport, Arc::clone(&recorder)).await;
    running.bus().send(&Timed { n: 1 }).await.expect("sent");
    let all = wait_until(Duration::from_secs(10) + delay * 3, || {
        recorder.runs.load(Ordering::SeqCst) >= 4
    })
    .await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "only {} runs", recorder.runs.load(Ordering::SeqCst));
    let starts = recorder.starts.lock().expect("not poisoned").clone();
    for pair in starts.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap + step >= delay - Duration::from_millis(5) && gap <= delay + step + LATENESS,
            "a retry after a {delay:?} backoff started {gap:?} after the attempt before \
             (retry delays in steps of {step:?})"
        );
    }
}

/// A delayed send to an idle host starts within [`LATENESS`] of its due time, and not
/// before; one already due starts at once (a transport that rounds due times to a step:
/// a delay of two steps, within a step either way).
pub async fn delayed_sends_start_on_time(transport: Arc<dyn Transport>) {
    let Some(step) = transport.capabilities().delayed_sends else {
        not_checked(
            "delayed_sends_start_on_time",
            "everything",
            "delayed_sends: None (no delayed sends)",
        );
        return;
    };
    let delay = if step.is_zero() {
        Duration::from_millis(300)
    } else {
        step * 2
    };
    let recorder = Arc::new(Recorder {
        failures: 0,
        backoff: Backoff::default(),
        starts: Mutex::default(),
        runs: AtomicU32::new(0),
    });
    let running = start_command::<Timed, _>(transport, Arc::clone(&recorder)).await;
    let bus = running.bus();
    // Let the consumer settle into its idle wait first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (n, delay) in [(1u32, delay), (2, Duration::ZERO)] {
        let runs = recorder.runs.load(Ordering::SeqCst);
        let sent = Instant::now();
        bus.send_at(&Timed { n }, SystemTime::now() + delay)
            .await
            .expect("sent");
        let arrived = wait_until(Duration::from_secs(5) + delay, || {
            recorder.runs.load(Ordering::SeqCst) > runs
        })
        .await;
        assert!(arrived, "the delayed message never started");
        let started = *recorder
            .starts
            .lock()
            .expect("not poisoned")
            .last()
            .expect("a start");
        let after = started - sent;
        assert!(
            after + Duration::from_millis(5) + step >= delay && after <= delay + step + LATENESS,
            "a message due in {delay:?} started after {after:?} (due times in steps of {step:?})"
        );
    }
    running.shutdown().await.expect("shutdown");
}

/// A body whose `Deserialize` panics.
#[derive(Debug, Serialize)]
struct Explosive {
    fuse: bool,
}
command!(Explosive, "conformance-explosive");

impl<'de> Deserialize<'de> for Explosive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Plain {
            fuse: bool,
        }
        let plain = Plain::deserialize(d)?;
        assert!(!plain.fuse, "the body's Deserialize blew up");
        Ok(Explosive { fuse: plain.fuse })
    }
}

struct Count(AtomicU32);

#[async_trait]
impl CommandProcessor<Explosive> for Arc<Count> {
    async fn process(&self, _: Explosive, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A body whose `Deserialize` panics is dead-lettered `undecodable` at once (not left in
/// flight), and the consumer keeps going.
pub async fn a_panicking_body_decoder_dead_letters_the_message(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let count = Arc::new(Count(AtomicU32::new(0)));
    let running = start_command::<Explosive, _>(transport, Arc::clone(&count)).await;
    let bus = running.bus();
    bus.send(&Explosive { fuse: true }).await.expect("sent");
    bus.send(&Explosive { fuse: false }).await.expect("sent");
    let source = Source::queue(Explosive::NAME).expect("valid name");
    let mut dead = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        dead = probe.dead_letters(&source).await;
        if !dead.is_empty() && count.0.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.shutdown().await.expect("shutdown");
    assert_eq!(
        count.0.load(Ordering::SeqCst),
        1,
        "the good message ran once"
    );
    assert_eq!(dead.len(), 1, "one dead letter: {dead:?}");
    assert_eq!(dead[0].reason, DeadLetterReason::Undecodable.as_str());
    let error = dead[0].errors.last().expect("an error");
    assert!(error.contains("blew up"), "{error}");
}

#[derive(Debug, Serialize, Deserialize)]
struct Blocking {
    n: u32,
}
command!(Blocking, "conformance-blocking");

struct BlockingWork {
    runs: AtomicU32,
    completed: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Blocking> for Arc<BlockingWork> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .message_lock_timeout(Duration::from_millis(300))
            .max_concurrent_calls(8)
    }
    async fn process(&self, _: Blocking, _: &Context) -> Result<(), ProcessError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        // The documented way to run blocking work: off the async runtime's threads, so
        // that lock renewal (and everything else) keeps running.
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(700)))
            .await
            .map_err(ProcessError::retry)?;
        self.completed.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Handlers that block for over twice the lock timeout in `spawn_blocking`, more of them
/// than the runtime has threads, each run once: their locks are renewed.
pub async fn blocking_work_in_spawn_blocking_keeps_its_locks(transport: Arc<dyn Transport>) {
    let work = Arc::new(BlockingWork {
        runs: AtomicU32::new(0),
        completed: AtomicU32::new(0),
    });
    let running = Host::builder()
        .transport(transport)
        .command::<Blocking, _>(Arc::clone(&work))
        .recovery_interval(Duration::from_millis(50))
        .build()
        .expect("host builds")
        .start()
        .await
        .expect("host starts");
    let batch: Vec<Blocking> = (0..16).map(|n| Blocking { n }).collect();
    running.bus().send_batch(&batch).await.expect("sent");
    // A lost lock shows as a second run that starts while the first still blocks, so
    // before the last completion.
    let completed = wait_until(Duration::from_secs(20), || {
        work.completed.load(Ordering::SeqCst) >= 16
    })
    .await;
    running.shutdown().await.expect("shutdown");
    assert!(completed, "not all completed");
    assert_eq!(work.runs.load(Ordering::SeqCst), 16, "each ran once");
}

#[derive(Debug, Serialize, Deserialize)]
struct Doomed {
    n: u32,
}
command!(Doomed, "conformance-doomed");

/// Fails every delivery: with `reject`, asks for no retry.
struct Failing {
    reject: bool,
    runs: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Doomed> for Arc<Failing> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .dead_letter_delivery_limit(4)
            .retry(Backoff::fixed(Duration::from_millis(5)))
    }
    async fn process(&self, message: Doomed, _: &Context) -> Result<(), ProcessError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let error = format!("run {run} of message {} failed", message.n);
        if self.reject {
            return Err(ProcessError::dead_letter(error));
        }
        Err(ProcessError::retry(error))
    }
}

async fn dead_letters_within(
    probe: &dyn Probe,
    source: &Source,
    count: usize,
) -> Vec<SeenDeadLetter> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let dead = probe.dead_letters(source).await;
        if dead.len() >= count || Instant::now() >= end {
            return dead;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A handler that always fails runs exactly the delivery limit, then its message is one
/// dead letter with reason `delivery_limit` and every error in order (only the last one
/// where the transport keeps no history); one that rejects runs once and is
/// dead-lettered `rejected`. Nothing else is left behind.
pub async fn failures_end_in_one_dead_letter_with_their_history(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let history = transport.capabilities().error_history;
    if !history {
        not_checked(
            "failures_end_in_one_dead_letter_with_their_history",
            "the errors before the last",
            "error_history: false",
        );
    }
    for (round, (reject, reason, runs)) in [(false, "delivery_limit", 4), (true, "rejected", 1)]
        .into_iter()
        .enumerate()
    {
        let failing = Arc::new(Failing {
            reject,
            runs: AtomicU32::new(0),
        });
        let running =
            start_command::<Doomed, _>(Arc::clone(&transport), Arc::clone(&failing)).await;
        running.bus().send(&Doomed { n: 7 }).await.expect("sent");
        let source = Source::queue(Doomed::NAME).expect("valid name");
        let dead = dead_letters_within(probe, &source, round + 1).await;
        running.shutdown().await.expect("shutdown");
        let dead = dead.last().expect("a dead letter").clone();
        assert_eq!(dead.reason, reason);
        assert_eq!(failing.runs.load(Ordering::SeqCst), runs);
        let expected: Vec<String> = (1..=runs)
            .map(|run| format!("run {run} of message 7 failed"))
            .collect();
        if history {
            assert_eq!(dead.errors, expected, "the history, oldest first");
        } else {
            assert_eq!(dead.errors.last(), expected.last(), "the last error");
        }
        let [ready, in_flight, delayed, _] = probe.counts(&source).await;
        assert_eq!((ready, in_flight, delayed), (0, 0, 0));
    }
}

/// A message larger than the bus's maximum is refused at send with a clear error, and
/// nothing is stored.
pub async fn oversized_messages_are_refused_at_send(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    // Room for a foreign envelope's overhead (BabelQueue's `meta` and trace id) around
    // the small message, none for the big one.
    let bus = bus_core::Bus::new(
        transport,
        bus_core::BusConfig::default().max_message_size(1000),
    );
    #[derive(Serialize, Deserialize)]
    struct Big {
        text: String,
    }
    command!(Big, "conformance-size");
    let refused = bus
        .send(&Big {
            text: "x".repeat(2000),
        })
        .await
        .expect_err("refused");
    assert!(
        matches!(refused, bus_core::Error::MessageTooLarge { max: 1000, .. }),
        "{refused}"
    );
    assert!(refused
        .to_string()
        .contains("exceeds the maximum of 1000 bytes"));
    bus.send(&Big { text: "x".into() })
        .await
        .expect("a small one is sent");
    let source = Source::queue(Big::NAME).expect("valid name");
    assert_eq!(
        probe.counts(&source).await[0],
        1,
        "only the small one is stored"
    );
}

#[derive(Debug, Serialize, Deserialize)]
struct Held {
    n: u32,
}
command!(Held, "conformance-held");

/// Holds every handler until shutdown cancels it.
struct Gate {
    started: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Held> for Arc<Gate> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(2)
            .prefetch_count(8)
    }
    async fn process(&self, _: Held, ctx: &Context) -> Result<(), ProcessError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        ctx.cancellation().cancelled().await;
        Ok(())
    }
}

/// At shutdown, prefetched messages that never started go back to the ready list with
/// their delivery uncounted, running handlers see their token and finish, and nothing
/// stays in flight.
pub async fn shutdown_releases_prefetched_messages(
    transport: Arc<dyn Transport>,
    probe: &dyn Probe,
) {
    let gate = Arc::new(Gate {
        started: AtomicU32::new(0),
    });
    let running = start_command::<Held, _>(Arc::clone(&transport), Arc::clone(&gate)).await;
    let batch: Vec<Held> = (0..20).map(|n| Held { n }).collect();
    running.bus().send_batch(&batch).await.expect("sent");
    let source = Source::queue(Held::NAME).expect("valid name");
    // Two running, eight prefetched, ten ready.
    let end = Instant::now() + Duration::from_secs(10);
    while !(gate.started.load(Ordering::SeqCst) == 2 && probe.counts(&source).await[1] == 10) {
        assert!(Instant::now() < end, "never held 2 running + 8 prefetched");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.shutdown().await.expect("shutdown");
    let [ready, in_flight, delayed, dead] = probe.counts(&source).await;
    assert_eq!((ready, in_flight, delayed, dead), (18, 0, 0, 0));

    // The released ones run again as first deliveries.
    let counts = Arc::new(DeliveryCounts::default());
    let running = start_command::<Held, _>(transport, Arc::clone(&counts)).await;
    let all = wait_until(Duration::from_secs(10), || {
        counts.0.lock().map(|c| c.len() >= 18).unwrap_or(true)
    })
    .await;
    running.shutdown().await.expect("shutdown");
    assert!(all, "not all released messages ran again");
    let counts = counts.0.lock().expect("not poisoned").clone();
    assert_eq!(
        counts,
        vec![1; 18],
        "the delivery counts of the released messages"
    );
}

/// Records each delivery's count.
#[derive(Default)]
struct DeliveryCounts(Mutex<Vec<u32>>);

#[async_trait]
impl CommandProcessor<Held> for Arc<DeliveryCounts> {
    async fn process(&self, _: Held, ctx: &Context) -> Result<(), ProcessError> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(ctx.delivery_count());
        Ok(())
    }
}
