//! One command table for every kind of queue: a native queue and BabelQueue queues of
//! both layouts (written by the crate's own client, a dead letter by its consumer) are
//! listed, counted, peeked, their dead letters shown, requeued, deleted and purged with
//! the same `bus` commands, addressed `queue`, `babel:<queue>`, `laravel:<queue>`; what a
//! kind cannot do is refused with a clear error; `bus metrics` serves them side by side.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use bus_babelqueue::{BabelQueue, DeadLetterBlock, Headers, Options, Reason};
use bus_redis::RedisConfig;
use bus_test_redis::TestRedis;
use serde_json::{json, Value};

const URN: &str = "urn:babel:orders:created";

fn bus(redis: &TestRedis, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bus"))
        .env_remove("REDIS_URL")
        .args(["--url", &redis.url(), "--prefix", redis.namespace()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the bus binary runs")
}

fn ok(redis: &TestRedis, args: &[&str]) -> String {
    let out = bus(redis, args);
    assert!(
        out.status.success(),
        "bus {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json_of(redis: &TestRedis, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = ok(redis, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("bus {args:?}: not JSON ({e}): {text}"))
}

/// Runs a command that must fail (exit 1); its stderr.
fn refused(redis: &TestRedis, args: &[&str]) -> String {
    let out = bus(redis, args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "bus {args:?} should fail: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn int(redis: &TestRedis, cmd: &str, key: &str) -> i64 {
    redis.client().cmd(&[cmd, key]).unwrap().as_int().unwrap()
}

/// A BabelQueue client of `layout` on the test's server.
async fn babel(redis: &TestRedis, options: Options) -> BabelQueue {
    let config = RedisConfig::from_url(&redis.url()).unwrap();
    BabelQueue::connect(&config, options).await.unwrap()
}

/// Publishes `n` orders, then takes the first one and dead-letters it as a failed
/// handler would (BabelQueue's `dead_letter` block, written by the crate's consumer).
async fn orders_with_a_dead_letter(bq: &BabelQueue, queue: &str, n: u64) {
    for i in 0..n {
        bq.publish(queue, URN, &json!({ "order": i }), &Headers::new())
            .await
            .unwrap();
    }
    let consumer = bq.consumer(queue).await.unwrap();
    let taken = consumer.reserve(1).await.unwrap();
    assert_eq!(taken.len(), 1);
    let block = DeadLetterBlock::new(
        Reason::Failed,
        queue,
        i64::from(taken[0].delivery_count()),
        Some("card declined (gateway code 51)".into()),
        Some("RuntimeError".into()),
    );
    assert!(consumer.dead_letter(&taken[0], &block).await.unwrap());
}

/// `bus metrics` on a free port, killed on drop.
struct Metrics {
    child: Child,
    addr: String,
}

impl Metrics {
    fn start(redis: &TestRedis) -> Metrics {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bus"))
            .env_remove("REDIS_URL")
            .args(["--url", &redis.url(), "--prefix", redis.namespace()])
            .args(["metrics", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // It prints its address first (a blocking read ends when the process does).
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("metrics on http://")
            .and_then(|rest| rest.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Metrics { child, addr }
    }

    fn scrape(&self) -> String {
        let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        text
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_command_table_serves_native_and_babelqueue_queues() {
    let redis = TestRedis::start().unwrap();
    let ns = redis.namespace().to_owned();
    // Names of the test's own: BabelQueue keys carry no namespace of ours.
    let (legacy, laravel) = (format!("{ns}-orders"), format!("{ns}-jobs"));
    let babel_q = format!("babel:{legacy}");
    let laravel_q = format!("laravel:{laravel}");

    ok(&redis, &["send", "work", "--body", r#"{"n":1}"#]);
    orders_with_a_dead_letter(&babel(&redis, Options::legacy()).await, &legacy, 3).await;
    let lq = babel(&redis, Options::laravel()).await;
    for i in 0..2 {
        lq.publish(&laravel, URN, &json!({ "job": i }), &Headers::new())
            .await
            .unwrap();
    }

    // Listed and counted side by side.
    let queues = json_of(&redis, &["queues"]);
    for name in ["work", babel_q.as_str(), laravel_q.as_str()] {
        assert!(
            queues.as_array().unwrap().contains(&json!(name)),
            "{name} not in {queues}"
        );
    }
    let all = json_of(&redis, &["stats", "--all"]);
    let row = |name: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|r| r["queue"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} row in {all}"))
    };
    assert_eq!(
        (row("work")["ready"].as_u64(), row("work")["dead"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(
        (
            row(&babel_q)["ready"].as_u64(),
            row(&babel_q)["dead"].as_u64()
        ),
        (Some(2), Some(1))
    );
    assert_eq!(row(&laravel_q)["ready"], 2);
    let table = ok(&redis, &["stats", "--all"]);
    assert!(
        table.contains(&babel_q) && table.contains("work"),
        "{table}"
    );

    // `bus metrics`: the BabelQueue queues beside the native one.
    let metrics = Metrics::start(&redis);
    let text = metrics.scrape();
    assert!(
        text.contains(
            "bus_queue_ready_messages{messaging_system=\"bus\",messaging_destination_name=\"work\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "bus_queue_ready_messages{{messaging_system=\"babelqueue\",messaging_destination_name=\"{legacy}\",queue_kind=\"babel\"}} 2"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "bus_queue_dead_letter_messages{{messaging_system=\"babelqueue\",messaging_destination_name=\"{legacy}\",queue_kind=\"babel\"}} 1"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "bus_queue_ready_messages{{messaging_system=\"babelqueue\",messaging_destination_name=\"{laravel}\",queue_kind=\"laravel\"}} 2"
        )),
        "{text}"
    );
    drop(metrics);

    // Peek: the envelopes, typed by their URN, `data` as the body.
    let peeked = json_of(&redis, &["peek", &babel_q]);
    assert_eq!(peeked.as_array().unwrap().len(), 2, "{peeked}");
    assert_eq!(peeked[0]["message"]["type"], URN);
    assert_eq!(peeked[0]["message"]["body"], json!({ "order": 1 }));
    assert_eq!(peeked[0]["message"]["format"], "babelqueue");

    // Dead letters: BabelQueue's block as reason, error and attempts.
    let dead = json_of(&redis, &["dead", &babel_q]);
    assert_eq!(dead[0]["reason"], "failed", "{dead}");
    assert_eq!(dead[0]["delivery_count"], 1);
    assert!(dead[0]["errors"][0]["message"]
        .as_str()
        .is_some_and(|e| e.contains("card declined")));
    let id = dead[0]["storage_id"].as_str().unwrap().to_owned();
    assert!(ok(&redis, &["dead", &babel_q]).contains("card declined"));
    // The old spelling is the same command.
    assert_eq!(
        json_of(&redis, &["babel", "dead", &legacy])[0]["storage_id"],
        json!(id)
    );

    // Requeue by id: back to its queue with attempts reset (BabelQueue's redrive).
    let done = json_of(&redis, &["requeue", &babel_q, "--id", &id]);
    assert_eq!(done["requeued"], json!([id]), "{done}");
    assert_eq!(done["target"], json!(babel_q));
    let stats = json_of(&redis, &["stats", &babel_q]);
    assert_eq!(
        (stats[0]["ready"].as_u64(), stats[0]["dead"].as_u64()),
        (Some(3), Some(0))
    );
    let last = json_of(&redis, &["peek", &babel_q, "-n", "3"]);
    assert_eq!(last[2]["message"]["body"], json!({ "order": 0 }));
    assert_eq!(last[2]["delivery_count"], 0);
    // Again: it is no dead letter any more.
    assert!(refused(&redis, &["requeue", &babel_q, "--id", &id]).contains(&id));

    // Delete one dead letter; a second time it is not there.
    orders_with_a_dead_letter(&babel(&redis, Options::legacy()).await, &legacy, 0).await;
    let id = json_of(&redis, &["dead", &babel_q])[0]["storage_id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&redis, &["delete-dead", &babel_q, &id]);
    assert_eq!(int(&redis, "LLEN", &format!("{legacy}.dlq")), 0);
    assert!(refused(&redis, &["delete-dead", &babel_q, &id]).contains("is not a dead letter"));

    // Purge a Laravel queue: its ready list and its wake-up tokens go together.
    assert_eq!(int(&redis, "LLEN", &format!("queues:{laravel}:notify")), 2);
    let purged = json_of(&redis, &["purge", &laravel_q, "--yes"]);
    assert_eq!(purged["ready"], 2, "{purged}");
    assert_eq!(int(&redis, "LLEN", &format!("queues:{laravel}")), 0);
    assert_eq!(int(&redis, "LLEN", &format!("queues:{laravel}:notify")), 0);

    // What cannot be done is said, never silently skipped.
    let across = refused(&redis, &["requeue", &babel_q, "--all", "--to", "work"]);
    assert!(across.contains("different kinds"), "{across}");
    assert!(refused(&redis, &["stats", "nosuch:x"]).contains("unknown kind"));
    let missing = refused(&redis, &["stats", "babel:no-such-queue"]);
    assert!(
        missing.contains("no babel queue babel:no-such-queue"),
        "{missing}"
    );
    let scheduled = refused(&redis, &["scheduled", &babel_q]);
    assert!(scheduled.contains("the bus's own queues"), "{scheduled}");
}
