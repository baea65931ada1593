//! What a bus host does with a message that no processor of its queue knows, under each
//! `UnknownUrn` policy (and what its error hook is told), with a message that arrives
//! with `attempts` at or past the processor's limit, under each `OverLimit` policy (the
//! default against the real Python SDK's worker), and what a handler reads of the stored
//! `attempts`. Both layouts, a real redis-server, the host's default settings but for the
//! delivery limit (3, BabelQueue's default `max_attempts`).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_babelqueue::{BabelQueue, ContextExt, Envelope, Headers, Options, OverLimit, UnknownUrn};
use bus_core::{
    Command, CommandProcessor, Context, Host, Message, MessageKind, ProcessError,
    ProcessingSettings, RunningHost,
};
use bus_test_redis::{eventually, TestRedis};
use common::{lrange, options, receive, run_py, size, URN};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

const LIMIT: u32 = 3;
const UNKNOWN: &str = "urn:babel:orders:refunded";
const WAIT: Duration = Duration::from_secs(30);

/// Fails when `fail` is set.
#[derive(Debug, Serialize, Deserialize)]
struct Created {
    #[serde(default)]
    fail: bool,
}
impl Message for Created {
    const NAME: &'static str = "orders";
    const TYPE: &'static str = URN;
    const KIND: MessageKind = MessageKind::Command;
}
impl Command for Created {}

/// Each run's delivery count and stored attempts, as the handler's context gave them.
#[derive(Default)]
struct Runs(Mutex<Vec<(u32, Option<i64>)>>);

impl Runs {
    fn seen(&self) -> Vec<(u32, Option<i64>)> {
        self.0.lock().unwrap().clone()
    }
}

#[async_trait]
impl CommandProcessor<Created> for Arc<Runs> {
    async fn process(&self, m: Created, ctx: &Context) -> Result<(), ProcessError> {
        let run = (ctx.delivery_count(), ctx.stored_attempts());
        self.0.lock().unwrap().push(run);
        if m.fail {
            return Err(ProcessError::retry(std::io::Error::other(
                "it always fails",
            )));
        }
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default().dead_letter_delivery_limit(LIMIT)
    }
}

struct Fixture {
    redis: TestRedis,
    bq: BabelQueue,
    runs: Arc<Runs>,
    /// The outcome of each failed delivery, as the host's error hook was told it.
    failures: Arc<Mutex<Vec<String>>>,
    host: RunningHost,
}

async fn start(layout: &str, options: impl FnOnce(Options) -> Options) -> Fixture {
    let redis = TestRedis::start().expect("redis-server");
    start_on(redis, layout, options).await
}

async fn start_on(
    redis: TestRedis,
    layout: &str,
    options: impl FnOnce(Options) -> Options,
) -> Fixture {
    let transport = common::transport(&redis.url(), options(common::options(layout))).await;
    let bq = transport.babel_queue().clone();
    let (runs, failures) = (Arc::new(Runs::default()), Arc::new(Mutex::new(Vec::new())));
    let seen = Arc::clone(&failures);
    let host = Host::builder()
        .transport(transport)
        .command::<Created, _>(Arc::clone(&runs))
        .on_error(move |failed| seen.lock().unwrap().push(failed.outcome.to_owned()))
        .build()
        .expect("host")
        .start()
        .await
        .expect("host starts");
    Fixture {
        redis,
        bq,
        runs,
        failures,
        host,
    }
}

/// `queue`'s only dead letter, unframed, once there is one.
async fn dead_letter_of(redis: &TestRedis, bq: &BabelQueue, queue: &str) -> Value {
    let dlq = bq.keys(queue).dlq;
    assert!(
        eventually(WAIT, || size(redis, &dlq) == 1).await,
        "nothing was dead-lettered"
    );
    let record: Value = serde_json::from_slice(&lrange(redis, &dlq)[0]).expect("JSON");
    match record.get("__bq_frame") {
        Some(_) => serde_json::from_str(record["body"].as_str().expect("body")).expect("JSON"),
        None => record,
    }
}

/// Publishes an envelope of `data` that arrives with `attempts`.
async fn publish_with_attempts(bq: &BabelQueue, queue: &str, data: Value, attempts: i64) {
    let data = serde_json::value::to_raw_value(&data).expect("data");
    let mut envelope = Envelope::new(URN, &data, queue).expect("envelope");
    envelope.set_attempts(attempts);
    bq.publish_encoded(queue, vec![(envelope.encode(), Headers::new())])
        .await
        .expect("publish");
}

impl Fixture {
    async fn dead_letter(&self) -> Value {
        dead_letter_of(&self.redis, &self.bq, "orders").await
    }

    /// Waits until the queue holds nothing ready or in flight.
    async fn drained(&self) -> bool {
        let keys = self.bq.keys("orders");
        eventually(WAIT, || {
            size(&self.redis, &keys.ready) == 0 && size(&self.redis, &keys.in_flight) == 0
        })
        .await
    }

    fn failures(&self) -> Vec<String> {
        self.failures.lock().unwrap().clone()
    }
}

async fn unknown_urn(layout: &str, policy: UnknownUrn) {
    let f = start(layout, |o| o.on_unknown_urn(policy)).await;
    let sent =
        f.bq.publish("orders", UNKNOWN, &json!({"order_id": 7}), &Headers::new())
            .await
            .expect("publish");
    match policy {
        UnknownUrn::Acknowledge => {
            assert!(f.drained().await, "the message is still in the queue");
            assert_eq!(size(&f.redis, &f.bq.keys("orders").dlq), 0);
            // Acknowledged is what happened: not a failure, not a dead letter.
            assert_eq!(f.failures(), Vec::<String>::new());
        }
        _ => {
            let record = f.dead_letter().await;
            assert_eq!(record["meta"]["id"].as_str(), sent.meta().id.as_deref());
            let block = &record["dead_letter"];
            assert_eq!(block["reason"], "unknown_urn");
            assert_eq!(block["exception"], "UnknownUrnError");
            // Retry: like the Python SDK, `max_attempts` deliveries, then attempts = max;
            // the error hook hears of each retry as a retry and of one dead letter.
            let (attempts, outcomes) = match policy {
                UnknownUrn::Retry => (i64::from(LIMIT), vec!["retry", "retry", "dead_letter"]),
                _ => (0, vec!["dead_letter"]),
            };
            assert_eq!(block["attempts"], attempts);
            assert_eq!(record["attempts"], attempts);
            assert!(f.drained().await);
            assert_eq!(f.failures(), outcomes);
        }
    }
    assert_eq!(f.runs.seen(), Vec::new(), "a handler ran");
    f.host.shutdown().await.expect("shutdown");
}

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    unknown_urn(UnknownUrn::default()) => an_unknown_urn_is_dead_lettered_at_once_by_default
);

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    unknown_urn(UnknownUrn::Retry) => an_unknown_urn_is_retried_to_the_limit_then_dead_lettered
);

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    unknown_urn(UnknownUrn::Acknowledge) => an_unknown_urn_is_acknowledged
);

/// By default a message that arrives with attempts 7 against a limit of 3 runs once, as
/// the real SDK's worker (`max_attempts=3`) runs it: handled, it is acked; failing, it is
/// dead-lettered `failed` with attempts 8, as the SDK records it.
async fn over_limit_runs_once_like_the_sdk(layout: &str) {
    let f = start(layout, |o| o).await;
    let url = f.redis.url();
    let sdk = |command: &'static str| {
        vec![
            command,
            "--url",
            url.as_str(),
            "--layout",
            layout,
            "--queue",
            "sdk",
            "--max-attempts",
            "3",
            "--idle",
            "1",
        ]
    };

    // Handled.
    publish_with_attempts(&f.bq, "sdk", json!({"order_id": 1}), 7).await;
    let (handled, _) = run_py(&sdk("consume")).await;
    assert_eq!(handled.len(), 1, "the SDK ran it {} times", handled.len());
    assert_eq!(handled[0]["attempts"], 7);
    publish_with_attempts(&f.bq, "orders", json!({"order_id": 1}), 7).await;
    assert!(f.drained().await);
    // The last delivery the limit allows; the envelope's count as the SDK handler saw it.
    assert_eq!(f.runs.seen(), vec![(LIMIT, Some(7))]);
    assert_eq!(size(&f.redis, &f.bq.keys("orders").dlq), 0);

    // Failing.
    publish_with_attempts(&f.bq, "sdk", json!({"order_id": 2}), 7).await;
    let (failing, _) = run_py(&sdk("fail")).await;
    assert_eq!(failing.len(), 1, "the SDK ran it {} times", failing.len());
    let theirs = dead_letter_of(&f.redis, &f.bq, "sdk").await;
    publish_with_attempts(&f.bq, "orders", json!({"order_id": 2, "fail": true}), 7).await;
    let ours = f.dead_letter().await;
    assert_eq!(f.runs.seen().len(), 2, "ours ran it more than once");
    for record in [&theirs, &ours] {
        assert_eq!(record["dead_letter"]["reason"], "failed", "{record}");
        assert_eq!(record["dead_letter"]["attempts"], 8, "{record}");
        assert_eq!(record["attempts"], 8, "{record}");
    }
    assert_eq!(f.failures(), vec!["dead_letter"]);
    // Laravel: the records of the two last runs are gone once they were settled.
    let records = f.bq.keys("orders").over_limit;
    if !records.is_empty() {
        assert!(
            eventually(WAIT, || size(&f.redis, &records) == 0).await,
            "settled last runs stay recorded"
        );
    }
    f.host.shutdown().await.expect("shutdown");
}

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    over_limit_runs_once_like_the_sdk => a_message_arriving_past_the_limit_runs_once_as_the_sdk_runs_it
);

/// With `OverLimit::DeadLetter` a message that arrives with attempts 7 on a processor
/// whose limit is 3 is dead-lettered without running, and the error says it arrived with
/// attempts 7.
async fn past_the_limit_refused(layout: &str) {
    let f = start(layout, |o| o.on_over_limit(OverLimit::DeadLetter)).await;
    publish_with_attempts(&f.bq, "orders", json!({"order_id": 8}), 7).await;
    let record = f.dead_letter().await;
    let block = &record["dead_letter"];
    assert_eq!(block["reason"], "failed");
    assert_eq!(block["exception"], "DeliveryLimit");
    assert_eq!(block["attempts"], 7);
    assert_eq!(record["attempts"], 7);
    let error = block["error"].as_str().expect("an error");
    assert!(
        error.contains("arrived with attempts 7") && error.contains("limit of 3"),
        "the error does not say what happened: {error}"
    );
    assert_eq!(f.runs.seen(), Vec::new(), "the handler ran");
    assert!(f.drained().await);
    f.host.shutdown().await.expect("shutdown");
}

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    past_the_limit_refused => a_message_arriving_past_the_limit_is_refused_when_set_so
);

/// A last run (delivery count = the limit: the last regular attempt, or a message that
/// arrived past the limit) whose consumer stops mid-message is not run again after its
/// recovery, on either layout: on legacy the recovery is counted out of band, on Laravel
/// (where a recovery adds to `attempts` and reads like an arrival past the limit) the
/// run was recorded.
async fn a_stopped_last_run(layout: &str, attempts: i64) {
    let redis = TestRedis::start().expect("redis-server");
    let transport = common::transport(&redis.url(), options(layout)).await;
    let bq = transport.babel_queue().clone();
    // A 1 s lock: the lease lapses within 2 s.
    let consumer = common::consumer(&transport, "orders", Duration::from_secs(1), LIMIT).await;
    publish_with_attempts(&bq, "orders", json!({"order_id": 9}), attempts).await;
    let first = receive(&*consumer, 10).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].delivery_count, LIMIT, "not its last run");
    // Never settled: its consumer stopped mid-message.
    let deadline = Instant::now() + WAIT;
    while size(&redis, &bq.keys("orders").dlq) == 0 {
        assert!(Instant::now() < deadline, "never dead-lettered");
        let again = receive(&*consumer, 10).await;
        assert!(
            again.is_empty(),
            "it ran again: delivery {}",
            again[0].delivery_count
        );
    }
    let record = dead_letter_of(&redis, &bq, "orders").await;
    let block = &record["dead_letter"];
    assert_eq!(block["exception"], "DeliveryLimit");
    let error = block["error"].as_str().expect("an error");
    assert!(error.contains("mid-message"), "{error}");
}

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_stopped_last_run(2) => a_last_attempt_that_stops_mid_message_is_not_run_again
);

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_stopped_last_run(7) => a_run_past_the_limit_that_stops_mid_message_is_not_run_again
);

/// A handler reads the envelope's `attempts` as stored: on legacy a recovered copy still
/// says 0 (the adapter counts the recovery out of band, in the delivery count only); on
/// Laravel the recovery is in `attempts`. A retry writes its count into the element.
async fn stored_attempts(layout: &str) {
    let redis = TestRedis::start().expect("redis-server");
    {
        let transport = common::transport(&redis.url(), options(layout)).await;
        let consumer = common::consumer(&transport, "orders", Duration::from_secs(1), LIMIT).await;
        let bq = transport.babel_queue();
        publish_with_attempts(bq, "orders", json!({"fail": true}), 0).await;
        // Reserved and never settled: recovered once its 1 s lock lapses.
        assert_eq!(receive(&*consumer, 10).await.len(), 1);
    }
    let f = start_on(redis, layout, |o| o).await;
    f.dead_letter().await;
    let recovered = if layout == "legacy" { 0 } else { 1 };
    assert_eq!(
        f.runs.seen(),
        vec![(2, Some(recovered)), (3, Some(2))],
        "(delivery count, stored attempts) of each run"
    );
    f.host.shutdown().await.expect("shutdown");
}

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    stored_attempts => a_handler_reads_the_stored_attempts
);
