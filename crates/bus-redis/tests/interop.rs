//! Interoperability (SPEC §4.3): Python scripts that know only docs/wire-format.md and
//! `lua/` produce messages that the Rust host processes, consume messages that the Rust
//! client sends, and read the dead letters the Rust host wrote.
//!
//! The scripts (`tests/interop/*.py`) use the Python standard library only, with a tiny
//! RESP client of their own (`resp.py`), so CI needs no pip packages. A missing `python3`
//! fails the test with a clear message; `BUS_TEST_PYTHON` names another interpreter.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bus_core::{
    Bus, BusConfig, CommandProcessor, Context, Headers, ProcessError, ProcessingSettings,
    RedisCommand,
};
use bus_test_redis::python::Python;
use bus_test_redis::TestRedis;
use common::{eventually, transport, Counts, Running};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `tests/interop/<script>` on `python3` (or `BUS_TEST_PYTHON`), told where `lua/` is.
fn interop(script: &str) -> Python {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    Python::system(manifest.join("tests").join("interop").join(script))
        .env("BUS_LUA_DIR", manifest.join("lua").display().to_string())
}

/// Runs `tests/interop/<script>` with `args`; returns its stdout lines parsed as JSON.
async fn python(script: &str, args: &[&str]) -> Vec<Value> {
    interop(script).run(args).await.0
}

/// Runs `tests/interop/<script>` with `args`; returns its stdout lines.
async fn python_lines(script: &str, args: &[&str]) -> Vec<String> {
    interop(script).run_lines(args).await.0
}

/// The keys of `queue` that exist, without the namespace (`seq` is a counter that stays).
fn queue_keys(redis: &TestRedis, queue: &str) -> Vec<String> {
    let keys = bus_redis::keys::QueueKeys::new(
        redis.namespace(),
        &bus_core::transport::Source::queue(queue).unwrap(),
    );
    let all = keys.all();
    let base = keys.ready.trim_end_matches("ready");
    redis
        .keys()
        .iter()
        .filter(|k| all.contains(&k.as_str()))
        .filter_map(|k| k.strip_prefix(base).map(str::to_owned))
        .collect()
}

fn headers_of(envelope: &Value) -> Headers {
    match envelope.get("headers") {
        Some(h) => serde_json::from_value(h.clone()).unwrap(),
        None => Headers::new(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "interop-greetings")]
struct Greeting {
    n: u64,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "interop-replies")]
struct Reply {
    n: u64,
}

/// What a handler saw of one message.
#[derive(Debug, Clone)]
struct Seen {
    id: String,
    message_type: String,
    delivery: u32,
    headers: Headers,
    enqueued_ms: u128,
    greeting: Greeting,
}

/// Records every greeting and answers it with a `Reply` sent through the context's bus,
/// which carries the greeting's trace context.
#[derive(Default)]
struct Greeter(Mutex<Vec<Seen>>);

#[async_trait]
impl CommandProcessor<Greeting> for Arc<Greeter> {
    async fn process(&self, greeting: Greeting, ctx: &Context) -> Result<(), ProcessError> {
        ctx.bus().send(&Reply { n: greeting.n }).await?;
        self.0.lock().unwrap().push(Seen {
            id: ctx.message_id().to_string(),
            message_type: ctx.message_type().to_owned(),
            delivery: ctx.delivery_count(),
            headers: ctx.headers().clone(),
            enqueued_ms: ctx
                .enqueued_at()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis(),
            greeting,
        });
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(8)
            .prefetch_count(16)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_producer_rust_host_python_consumer() {
    const N: usize = 100;
    let redis = TestRedis::start().unwrap();
    let greeter = Arc::new(Greeter::default());
    let host = bus_core::Host::builder()
        .transport(transport(&redis).await)
        .command::<Greeting, _>(Arc::clone(&greeter))
        .build()
        .unwrap();
    let running = Running::start(host);

    // Python: one RPUSH of N plain envelopes.
    let url = redis.url();
    let n = N.to_string();
    let sent = python(
        "producer.py",
        &[&url, redis.namespace(), "interop-greetings", &n],
    )
    .await;
    assert_eq!(sent.len(), N);
    assert!(
        eventually(Duration::from_secs(30), || async {
            greeter.0.lock().unwrap().len() >= N
        })
        .await,
        "processed {} of {N}",
        greeter.0.lock().unwrap().len()
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            redis.counts("interop-greetings") == Counts::default()
        })
        .await,
        "left behind: {:?}",
        redis.counts("interop-greetings")
    );
    running.stop().await;

    // Every envelope arrived once, with its id, body, headers and send time.
    let seen: HashMap<String, Seen> = greeter
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|s| (s.id.clone(), s.clone()))
        .collect();
    assert_eq!(seen.len(), N);
    let mut traces = BTreeMap::new();
    for envelope in &sent {
        let id = envelope["id"].as_str().unwrap();
        let got = seen
            .get(id)
            .unwrap_or_else(|| panic!("message {id} never reached the handler"));
        assert_eq!(got.message_type, "interop-greetings");
        assert_eq!(got.delivery, 1);
        assert_eq!(
            got.greeting,
            serde_json::from_value::<Greeting>(envelope["body"].clone()).unwrap()
        );
        assert!(got.greeting.text.contains("héllo ✓"), "{:?}", got.greeting);
        assert_eq!(
            got.enqueued_ms,
            u128::from(envelope["sent"].as_u64().unwrap())
        );
        let headers = headers_of(envelope);
        assert_eq!(got.headers, headers, "headers of {id}");
        if got.greeting.n % 2 == 0 {
            assert!(got.headers["traceparent"].starts_with("00-"), "{headers:?}");
        }
        traces.insert(got.greeting.n, headers);
    }

    // Python again: consume the replies with reserve.lua and ack.lua. Each reply carries
    // the trace context of the greeting it answers, and nothing else of its headers.
    let replies = python(
        "consumer.py",
        &[&url, redis.namespace(), "interop-replies", &n],
    )
    .await;
    assert_eq!(replies.len(), N);
    for reply in &replies {
        let n = reply["body"]["n"].as_u64().unwrap();
        let expected: Headers = traces[&n]
            .iter()
            .filter(|(k, _)| *k == "traceparent" || *k == "tracestate")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(headers_of(reply), expected, "reply {reply}");
    }
    assert_eq!(queue_keys(&redis, "interop-replies"), ["seq"]);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "interop-jobs")]
struct Job {
    n: u64,
    text: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_client_python_consumer() {
    const N: u64 = 200;
    let redis = TestRedis::start().unwrap();
    let bus = Bus::new(transport(&redis).await, BusConfig::default());
    let jobs: Vec<Job> = (0..N)
        .map(|n| Job {
            n,
            text: format!("job {n}: “quoted” \\ \"escaped\" ✓"),
        })
        .collect();
    let ids = bus.send_batch(&jobs).await.unwrap();
    // A delayed one too: the foreign consumer's reserve promotes it when it is due.
    let late = Job {
        n: N,
        text: "late".into(),
    };
    let before = SystemTime::now();
    let late_id = bus
        .send_delayed(&late, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(redis.counts("interop-jobs").delayed, 1);

    let url = redis.url();
    let received = python(
        "consumer.py",
        &[
            &url,
            redis.namespace(),
            "interop-jobs",
            &(N + 1).to_string(),
        ],
    )
    .await;
    assert!(before.elapsed().unwrap() >= Duration::from_millis(300));
    assert_eq!(received.len(), jobs.len() + 1);

    // One consumer: the batch arrives in order, then the delayed job.
    for ((record, job), id) in received.iter().zip(&jobs).zip(&ids) {
        assert_eq!(record["id"], id.as_str());
        assert_eq!(record["type"], "interop-jobs");
        assert_eq!(record["delivery"], 1);
        assert_eq!(
            serde_json::from_value::<Job>(record["body"].clone()).unwrap(),
            *job
        );
        // A sent envelope is leased at reserve: its receipt is the lease token `~L<n>`
        // and its index (docs/redis-layout.md).
        assert!(record["storage_id"].as_str().unwrap().starts_with('~'));
        assert!(record["headers"].as_object().unwrap().is_empty());
    }
    let last = &received[jobs.len()];
    assert_eq!(last["id"], late_id.as_str());
    assert_eq!(
        serde_json::from_value::<Job>(last["body"].clone()).unwrap(),
        late
    );
    // A delayed message is stored under its message id.
    assert_eq!(last["storage_id"], late_id.as_str());

    // Acked: nothing of the queue is left but its id counter.
    assert_eq!(redis.counts("interop-jobs"), Counts::default());
    assert_eq!(queue_keys(&redis, "interop-jobs"), ["seq"]);
}

#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "interop-dead")]
struct Doomed {
    n: u64,
}

struct Rejecter;

#[async_trait]
impl CommandProcessor<Doomed> for Rejecter {
    async fn process(&self, doomed: Doomed, _: &Context) -> Result<(), ProcessError> {
        Err(ProcessError::dead_letter(format!(
            "message {} is never valid",
            doomed.n
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_reads_dead_letters() {
    let redis = TestRedis::start().unwrap();
    let host = bus_core::Host::builder()
        .transport(transport(&redis).await)
        .command::<Doomed, _>(Rejecter)
        .build()
        .unwrap();
    let running = Running::start(host);
    let url = redis.url();
    let sent = python_lines(
        "producer.py",
        &[&url, redis.namespace(), "interop-dead", "2"],
    )
    .await;
    let ready = bus_redis::keys::QueueKeys::ready_of(
        redis.namespace(),
        &bus_core::transport::Source::queue("interop-dead").unwrap(),
    );
    let garbage = "this is not an envelope";
    let stranger = r#"{"v":1,"id":"py-stranger","type":"someone-else","sent":1,"body":{}}"#;
    let mut client = redis.client();
    client.cmd(&["RPUSH", &ready, garbage, stranger]).unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            let c = redis.counts("interop-dead");
            c.dead == 4 && c.ready == 0 && c.inflight == 0
        })
        .await,
        "{:?}",
        redis.counts("interop-dead")
    );
    running.stop().await;

    let dead = python("deadletters.py", &[&url, redis.namespace(), "interop-dead"]).await;
    assert_eq!(dead.len(), 4);
    let by_element: HashMap<&str, &Value> = dead
        .iter()
        .map(|d| (d["element"].as_str().unwrap(), d))
        .collect();
    let check = |element: &str, reason: &str, error: &str| {
        let record = by_element
            .get(element)
            .unwrap_or_else(|| panic!("no dead letter keeps {element} unchanged: {dead:?}"));
        assert_eq!(record["reason"], reason, "{record}");
        assert_eq!(record["deliveries"], 1, "{record}");
        assert!(
            record["at_ms"].as_u64().unwrap() > 1_600_000_000_000,
            "{record}"
        );
        let errors = record["errors"].as_array().unwrap();
        let last = errors
            .last()
            .unwrap_or_else(|| panic!("no errors: {record}"));
        assert!(
            last["message"].as_str().unwrap().contains(error),
            "{record}"
        );
        assert!(last["at_ms"].as_u64().is_some(), "{record}");
    };
    // The producer printed each element exactly as it pushed it.
    for element in &sent {
        let n = serde_json::from_str::<Value>(element).unwrap()["body"]["n"]
            .as_u64()
            .unwrap();
        check(element, "rejected", &format!("message {n} is never valid"));
    }
    check(garbage, "undecodable", "cannot decode envelope");
    check(stranger, "unknown_type", "someone-else");
}

/// A consumer written from docs/wire-format.md ("Protocol 4: fleet circuit breaker")
/// respects a fleet breaker a Rust host tripped: it takes nothing before the cool-down
/// ends, then one message as the probe, closes the breaker when it succeeded, and takes
/// the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_consumer_waits_out_a_fleet_breaker_then_probes_and_closes_it() {
    const N: u64 = 20;
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let jobs: Vec<Job> = (0..N)
        .map(|n| Job {
            n,
            text: format!("job {n}"),
        })
        .collect();
    bus.send_batch(&jobs).await.unwrap();
    let source = bus_core::transport::Source::queue("interop-jobs").unwrap();
    let options = bus_core::transport::ConsumerOptions::new(Duration::from_secs(60), 5);
    let rust = bus_core::Transport::consumer(&transport, &source, options)
        .await
        .unwrap();
    let tripped = SystemTime::now();
    rust.extras()
        .fleet_breaker
        .expect("a fleet breaker")
        .trip(Duration::from_millis(1_500))
        .await
        .unwrap();

    let received = python(
        "consumer.py",
        &[
            &redis.url(),
            redis.namespace(),
            "interop-jobs",
            &N.to_string(),
        ],
    )
    .await;
    assert!(
        tripped.elapsed().unwrap() >= Duration::from_millis(1_500),
        "the foreign consumer took all before the cool-down ended"
    );
    assert_eq!(received.len(), N as usize);
    // Closed by the foreign consumer's successful probe.
    let flow = bus_redis::admin::Admin::new(transport)
        .flow(&source)
        .await
        .unwrap();
    assert_eq!(flow.breaker_until_ms, None);
}
