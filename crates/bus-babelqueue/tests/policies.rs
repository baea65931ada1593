//! What a bus host does with a message that no processor of its queue knows, under each
//! `UnknownUrn` policy, and with a message that arrives with more `attempts` than the
//! processor allows. Both layouts, a real redis-server, the host's default settings but
//! for the delivery limit (3, BabelQueue's default `max_attempts`).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_babelqueue::{BabelQueue, Envelope, Headers, UnknownUrn};
use bus_core::{
    Command, CommandProcessor, Context, Host, Message, MessageKind, ProcessError,
    ProcessingSettings, RunningHost,
};
use bus_test_redis::{eventually, TestRedis};
use common::{lrange, options, size, URN};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

const LIMIT: u32 = 3;
const UNKNOWN: &str = "urn:babel:orders:refunded";
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Serialize, Deserialize)]
struct Created {}
impl Message for Created {
    const NAME: &'static str = "orders";
    const TYPE: &'static str = URN;
    const KIND: MessageKind = MessageKind::Command;
}
impl Command for Created {}

/// Counts its runs.
#[derive(Default)]
struct Runs(AtomicUsize);

#[async_trait]
impl CommandProcessor<Created> for Arc<Runs> {
    async fn process(&self, _: Created, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, Ordering::SeqCst);
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
    /// Deliveries the host's error observer saw.
    failures: Arc<AtomicUsize>,
    host: RunningHost,
}

async fn start(layout: &str, policy: UnknownUrn) -> Fixture {
    let redis = TestRedis::start().expect("redis-server");
    let options = options(layout).on_unknown_urn(policy);
    let transport = common::transport(&redis.url(), options).await;
    let bq = transport.babel_queue().clone();
    let (runs, failures) = (Arc::new(Runs::default()), Arc::new(AtomicUsize::new(0)));
    let seen = Arc::clone(&failures);
    let host = Host::builder()
        .transport(transport)
        .command::<Created, _>(Arc::clone(&runs))
        .on_error(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        })
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

impl Fixture {
    /// The only dead letter, unframed, once there is one.
    async fn dead_letter(&self) -> Value {
        let dlq = self.bq.keys("orders").dlq;
        assert!(
            eventually(WAIT, || size(&self.redis, &dlq) == 1).await,
            "nothing was dead-lettered"
        );
        let record: Value = serde_json::from_slice(&lrange(&self.redis, &dlq)[0]).expect("JSON");
        match record.get("__bq_frame") {
            Some(_) => serde_json::from_str(record["body"].as_str().expect("body")).expect("JSON"),
            None => record,
        }
    }

    /// Waits until the queue holds nothing ready or in flight.
    async fn drained(&self) -> bool {
        let keys = self.bq.keys("orders");
        eventually(WAIT, || {
            size(&self.redis, &keys.ready) == 0 && size(&self.redis, &keys.in_flight) == 0
        })
        .await
    }
}

async fn unknown_urn(layout: &str, policy: UnknownUrn) {
    let f = start(layout, policy).await;
    let sent =
        f.bq.publish("orders", UNKNOWN, &json!({"order_id": 7}), &Headers::new())
            .await
            .expect("publish");
    match policy {
        UnknownUrn::Acknowledge => {
            assert!(
                eventually(WAIT, || f.failures.load(Ordering::SeqCst) == 1).await,
                "the host never saw the message"
            );
            assert!(f.drained().await, "the message is still in the queue");
            assert_eq!(size(&f.redis, &f.bq.keys("orders").dlq), 0);
        }
        _ => {
            let record = f.dead_letter().await;
            assert_eq!(record["meta"]["id"].as_str(), sent.meta().id.as_deref());
            let block = &record["dead_letter"];
            assert_eq!(block["reason"], "unknown_urn");
            assert_eq!(block["exception"], "UnknownUrnError");
            // Retry: like the Python SDK, `max_attempts` deliveries, then attempts = max.
            let (attempts, deliveries) = match policy {
                UnknownUrn::Retry => (i64::from(LIMIT), LIMIT as usize),
                _ => (0, 1),
            };
            assert_eq!(block["attempts"], attempts);
            assert_eq!(record["attempts"], attempts);
            assert_eq!(f.failures.load(Ordering::SeqCst), deliveries);
            assert!(f.drained().await);
        }
    }
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 0);
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

/// A message that arrives with attempts 7 on a processor whose limit is 3: dead-lettered
/// without running, and the error says it arrived with attempts 7.
async fn past_the_limit(layout: &str) {
    let f = start(layout, UnknownUrn::default()).await;
    let data = serde_json::value::to_raw_value(&json!({"order_id": 8})).expect("data");
    let mut envelope = Envelope::new(URN, &data, "orders").expect("envelope");
    envelope.set_attempts(7);
    f.bq.publish_encoded("orders", vec![(envelope.encode(), Headers::new())])
        .await
        .expect("publish");
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
    assert_eq!(f.runs.0.load(Ordering::SeqCst), 0, "the handler ran");
    assert!(f.drained().await);
    f.host.shutdown().await.expect("shutdown");
}

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    past_the_limit => a_message_arriving_past_the_limit_says_so
);
