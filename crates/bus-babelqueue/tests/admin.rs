//! Management against a real redis-server and the real SDK: queues the SDK made are found,
//! counted and peeked; dead letters the SDK's worker and ours wrote are listed; our
//! redrive is consumed by the SDK's worker, leaves poison alone, and its dry run changes
//! nothing at all.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bus_babelqueue::{
    Admin, Area, BabelQueue, Content, DeadLetterBlock, Error, Headers, Layout, Options, Outcome,
    Reason, RedriveOptions,
};
use bus_redis::RedisConfig;
use bus_test_redis::{eventually_async, TestRedis};
use common::{lrange, options, run_py, URN};
use serde_json::Value;

const OTHER_URN: &str = "urn:babel:orders:unknown";

async fn client(redis: &TestRedis, options: Options) -> BabelQueue {
    let config = RedisConfig::from_url(&redis.url()).expect("Redis URL");
    BabelQueue::connect(&config, options)
        .await
        .expect("connecting")
}

fn push_raw(redis: &TestRedis, list: &str, values: &[&[u8]]) {
    let mut c = redis.client();
    for v in values {
        c.cmd(&[&b"RPUSH"[..], list.as_bytes(), v]).expect("RPUSH");
    }
}

/// Every key and its DUMP.
fn dump_all(redis: &TestRedis) -> BTreeMap<String, Vec<u8>> {
    let mut c = redis.client();
    let keys = c.scan_match("*").expect("SCAN");
    keys.into_iter()
        .map(|k| {
            let dump = c.cmd(&["DUMP", k.as_str()]).expect("DUMP");
            let bytes = dump.as_bytes().unwrap_or_default().to_vec();
            (k, bytes)
        })
        .collect()
}

fn py_base<'a>(url: &'a str, layout: &'a str, queue: &'a str) -> Vec<&'a str> {
    vec!["--url", url, "--layout", layout, "--queue", queue]
}

fn envelope(content: &Content) -> &bus_babelqueue::Envelope {
    match content {
        Content::Envelope(env) => env,
        Content::Poison(p) => panic!("poison: {p}"),
    }
}

fn json(raw: &serde_json::value::RawValue) -> Value {
    serde_json::from_str(raw.get()).expect("JSON")
}

async fn list_count_peek(layout_name: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let bq = client(
        &redis,
        options(layout_name).retry_after(Some(Duration::from_secs(1))),
    )
    .await;
    let admin = bq.admin();
    let layout = bq.options().layout_ref().clone();
    let keys = bq.keys("orders");

    let mut args = vec!["publish", "--count", "3", "--headers"];
    args.extend(py_base(&url, layout_name, "orders"));
    let (published, _) = run_py(&args).await;
    push_raw(&redis, &keys.ready, &[b"not json"]);
    if layout_name == "laravel" {
        let mut args = vec!["publish-delayed", "--delay", "60"];
        args.extend(py_base(&url, layout_name, "orders"));
        run_py(&args).await;
    }
    // Keys that are no BabelQueue queue's, and a legacy queue with only a DLQ.
    let mut c = redis.client();
    c.set("notes.dlq", "a string, not a list").expect("SET");
    c.cmd(&["RPUSH", "bus:{native}:ready", "x"]).expect("RPUSH");
    c.cmd(&["RPUSH", "solo", "x"]).expect("RPUSH");
    c.cmd(&["RPUSH", "billing.dlq", "x"]).expect("RPUSH");

    let names = |found: Vec<bus_babelqueue::FoundQueue>| -> BTreeSet<(String, String)> {
        found
            .into_iter()
            .map(|q| (q.layout.name().to_owned(), q.queue))
            .collect()
    };
    let found = names(admin.queues().await.expect("queues"));
    let mut expected: BTreeSet<(String, String)> =
        [("legacy".to_owned(), "billing".to_owned())].into();
    if layout_name == "laravel" {
        expected.insert(("laravel".into(), "orders".into()));
    }
    // A legacy queue with only ready messages is a bare list: not listed (documented).
    assert_eq!(found, expected);

    let counts = admin.counts(&layout, "orders").await.expect("counts");
    assert_eq!(counts.ready, 4);
    assert_eq!(
        (counts.in_flight, counts.lapsed, counts.dead_letters),
        (0, 0, 0)
    );
    if layout_name == "laravel" {
        assert_eq!((counts.delayed, counts.due), (Some(1), Some(0)));
    } else {
        assert_eq!((counts.delayed, counts.due), (None, None));
    }

    let peeked = admin
        .peek(&layout, "orders", Area::Ready, 0, 10)
        .await
        .expect("peek");
    assert_eq!(peeked.len(), 4);
    for (item, sent) in peeked.iter().zip(&published) {
        let env = envelope(&item.content);
        assert_eq!(env.meta().id.as_deref(), sent["id"].as_str());
        assert_eq!(env.trace_id(), sent["trace_id"].as_str());
        assert_eq!(json(env.data()), sent["data"]);
        let headers: Headers = if layout_name == "legacy" {
            serde_json::from_value(sent["headers"].clone()).expect("headers")
        } else {
            Headers::new()
        };
        assert_eq!(item.headers, headers);
        assert_eq!(
            layout_name == "legacy",
            item.stored.starts_with(b"{\"__bq_frame\"")
        );
    }
    assert!(matches!(peeked[3].content, Content::Poison(_)));
    assert_eq!(&peeked[3].body[..], b"not json");
    let second = admin
        .peek(&layout, "orders", Area::Ready, 1, 1)
        .await
        .expect("peek");
    assert_eq!(second[0].position, 1);
    assert_eq!(
        envelope(&second[0].content).meta().id.as_deref(),
        published[1]["id"].as_str()
    );

    // A reservation with a 1 s lease: in flight, then lapsed; and now listed on legacy.
    let consumer = bq.consumer("orders").await.expect("consumer");
    let reserved = consumer.reserve(1).await.expect("reserve");
    assert_eq!(reserved.len(), 1);
    let counts = admin.counts(&layout, "orders").await.expect("counts");
    assert_eq!((counts.ready, counts.in_flight), (3, 1));
    let in_flight = admin
        .peek(&layout, "orders", Area::InFlight, 0, 10)
        .await
        .expect("peek");
    assert_eq!(in_flight.len(), 1);
    let env = envelope(&in_flight[0].content);
    assert_eq!(env.meta().id.as_deref(), published[0]["id"].as_str());
    assert!(
        eventually_async(Duration::from_secs(10), || async {
            admin
                .counts(&layout, "orders")
                .await
                .expect("counts")
                .lapsed
                == 1
        })
        .await
    );
    let found = names(admin.queues().await.expect("queues"));
    assert!(found.contains(&(layout_name.to_owned(), "orders".to_owned())));

    if layout_name == "laravel" {
        let delayed = admin
            .peek(&layout, "orders", Area::Delayed, 0, 10)
            .await
            .expect("peek");
        assert_eq!(delayed.len(), 1);
        let now = bus_core::transport::now_ms() as f64 / 1000.0;
        let due = delayed[0].score.expect("a score");
        assert!(due > now + 50.0 && due < now + 62.0, "due {due}, now {now}");
    } else {
        let err = admin.peek(&layout, "orders", Area::Delayed, 0, 1).await;
        assert!(matches!(err, Err(Error::Unsupported { .. })));
    }
    // A key of the wrong type is a clear error, not WRONGTYPE.
    c.set(&bq.keys("broken").ready, "x").expect("SET");
    let err = admin.counts(&layout, "broken").await;
    assert!(matches!(err, Err(Error::WrongType { .. })), "{err:?}");
}

bus_test_redis::per_layout!(list_count_peek => sdk_queues_are_listed_counted_and_peeked);

async fn dead_letters_and_redrive(layout_name: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let bq = client(&redis, options(layout_name)).await;
    let admin = bq.admin();
    let layout = bq.options().layout_ref().clone();
    let keys = bq.keys("orders");

    // The SDK's worker dead-letters 3 failing messages, 1 unknown URN and 2 poison bodies.
    let mut args = vec!["publish", "--count", "3", "--headers"];
    args.extend(py_base(&url, layout_name, "orders"));
    let (failing, _) = run_py(&args).await;
    let mut args = vec!["publish", "--urn", OTHER_URN];
    args.extend(py_base(&url, layout_name, "orders"));
    let (unknown, _) = run_py(&args).await;
    push_raw(&redis, &keys.ready, &[b"not json", b"\xff\xfe{}"]);
    let mut args = vec!["fail", "--max-attempts", "2", "--idle", "0.5"];
    args.extend(py_base(&url, layout_name, "orders"));
    run_py(&args).await;
    assert_eq!(common::size(&redis, &keys.dlq), 6);

    // Ours: one failed message and one poison body.
    let ours = bq
        .publish("orders", URN, &serde_json::json!({"n": 1}), &Headers::new())
        .await
        .expect("publish");
    push_raw(&redis, &keys.ready, &[b"[1,2]"]);
    let consumer = bq.consumer("orders").await.expect("consumer");
    let reserved = consumer.reserve(10).await.expect("reserve");
    assert_eq!(reserved.len(), 2);
    for r in &reserved {
        let block = match r.content() {
            Content::Envelope(_) => DeadLetterBlock::new(
                Reason::Failed,
                "orders",
                1,
                Some("boom from Rust".into()),
                Some("HandlerError".into()),
            ),
            Content::Poison(p) => {
                DeadLetterBlock::new(Reason::Poison, "orders", 0, Some(p.to_string()), None)
            }
        };
        assert!(consumer.dead_letter(r, &block).await.expect("dead-letter"));
    }

    let records = admin
        .dead_letters(&layout, "orders", 0, 100)
        .await
        .expect("dead letters");
    assert_eq!(records.len(), 8);
    let id_of = |r: &bus_babelqueue::DeadLetter| match &r.record.content {
        Content::Envelope(env) => env.meta().id.clone(),
        Content::Poison(_) => None,
    };
    let block_of = |id: &Value| {
        records
            .iter()
            .find(|r| id_of(r).as_deref() == id.as_str())
            .unwrap_or_else(|| panic!("no record of {id}"))
    };
    for sent in &failing {
        let record = block_of(&sent["id"]);
        let block = record.block.as_ref().expect("a block");
        assert_eq!(block.reason.as_deref(), Some("failed"));
        assert_eq!(block.error.as_deref(), Some("boom from the Python SDK"));
        assert_eq!(block.exception.as_deref(), Some("RuntimeError"));
        assert_eq!(block.original_queue.as_deref(), Some("orders"));
        assert_eq!(block.attempts, Some(2));
        assert_eq!(block.lang.as_deref(), Some("python"));
        assert!(block.failed_at.is_some());
        // Legacy keeps the frame in the DLQ; we read through it.
        if layout_name == "legacy" {
            assert!(record.record.stored.starts_with(b"{\"__bq_frame\""));
            assert_eq!(record.record.headers.len(), 2);
        }
    }
    let unknown_block = block_of(&unknown[0]["id"]).block.clone().expect("block");
    assert_eq!(unknown_block.reason.as_deref(), Some("unknown_urn"));
    let rust_block = block_of(&Value::from(ours.meta().id.clone()))
        .block
        .clone()
        .expect("block");
    assert_eq!(rust_block.reason.as_deref(), Some("failed"));
    assert_eq!(rust_block.error.as_deref(), Some("boom from Rust"));
    assert_eq!(rust_block.lang.as_deref(), Some("rust"));
    let poison: Vec<_> = records
        .iter()
        .filter(|r| matches!(r.record.content, Content::Poison(_)))
        .collect();
    assert_eq!(poison.len(), 3);
    for p in &poison {
        let block = p.block.as_ref().expect("poison records have a block");
        assert_eq!(block.reason.as_deref(), Some("poison"));
    }
    let poison_bytes: Vec<Vec<u8>> = poison.iter().map(|p| p.record.stored.to_vec()).collect();

    // A dry run plans and writes nothing: every key dumps the same.
    let before = dump_all(&redis);
    let plan = admin
        .redrive(&layout, "orders", &RedriveOptions::new().dry_run(true))
        .await
        .expect("dry run");
    assert_eq!((plan.redriven, plan.poison, plan.skipped), (5, 3, 0));
    assert!(plan
        .items
        .iter()
        .all(|i| matches!(i.outcome, Outcome::WouldRedrive | Outcome::Poison)));
    assert_eq!(dump_all(&redis), before);
    // The SDK's dry run pops and re-pushes every record: on legacy that strips the frames,
    // so the comparison above can fail (on Laravel it ends byte-identical, one wake-up
    // token popped and one pushed per record, but the DLQ was empty meanwhile).
    let mut args = vec!["redrive", "--dlq", "orders.dlq"];
    args.extend(py_base(&url, layout_name, "orders"));
    let (sdk_plan, _) = run_py(&args).await;
    assert_eq!(sdk_plan.len(), 8);
    if layout_name == "legacy" {
        assert_ne!(dump_all(&redis), before);
    }
    assert_eq!(common::size(&redis, &keys.dlq), 8);

    // The unknown URN to a sandbox queue, the rest back to their source.
    let sandbox = admin
        .redrive(
            &layout,
            "orders",
            &RedriveOptions::new().reason("unknown_urn").to("sandbox"),
        )
        .await
        .expect("redrive");
    assert_eq!(
        (sandbox.redriven, sandbox.poison, sandbox.skipped),
        (1, 3, 4)
    );
    let report = admin
        .redrive(&layout, "orders", &RedriveOptions::new())
        .await
        .expect("redrive");
    assert_eq!((report.redriven, report.poison, report.vanished), (4, 3, 0));
    assert!(report
        .items
        .iter()
        .filter(|i| i.outcome == Outcome::Redriven)
        .all(|i| i.to.as_deref() == Some("orders")));
    // Poison stays, byte for byte; on Laravel one DLQ wake-up token left per record.
    assert_eq!(lrange(&redis, &keys.dlq), poison_bytes);
    if layout_name == "laravel" {
        assert_eq!(common::size(&redis, &keys.dlq_notify), 3);
        assert_eq!(common::size(&redis, &keys.notify), 4);
    }
    // Bare, reset bodies: no frame, no block, attempts 0.
    for stored in lrange(&redis, &keys.ready) {
        let v: Value = serde_json::from_slice(&stored).expect("a bare envelope");
        assert!(v.get("__bq_frame").is_none() && v.get("dead_letter").is_none());
        assert_eq!(v["attempts"], 0);
    }

    // The SDK's worker consumes what we redrove.
    let mut args = vec!["consume", "--count", "4", "--idle", "1"];
    args.extend(py_base(&url, layout_name, "orders"));
    let (consumed, _) = run_py(&args).await;
    let got: BTreeSet<String> = consumed
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_owned())
        .collect();
    let mut want: BTreeSet<String> = failing
        .iter()
        .map(|m| m["id"].as_str().expect("id").to_owned())
        .collect();
    want.insert(ours.meta().id.clone().expect("id"));
    assert_eq!(got, want);
    for m in &consumed {
        assert_eq!(m["attempts"], 0);
        assert_eq!(m["headers"], serde_json::json!({}));
        assert!(!m["keys"]
            .as_array()
            .expect("keys")
            .contains(&Value::from("dead_letter")));
    }
    let mut args = vec!["consume", "--urn", OTHER_URN, "--idle", "1"];
    args.extend(py_base(&url, layout_name, "sandbox"));
    let (sandboxed, _) = run_py(&args).await;
    assert_eq!(sandboxed.len(), 1);
    assert_eq!(sandboxed[0]["id"], unknown[0]["id"]);
    let counts = admin.counts(&layout, "orders").await.expect("counts");
    assert_eq!(
        (counts.ready, counts.in_flight, counts.dead_letters),
        (0, 0, 3)
    );
}

bus_test_redis::per_layout!(dead_letters_and_redrive => dead_letters_of_both_sides_are_listed_and_redriven);

/// Two redrives of one DLQ at once, each on its own connection: every record moves
/// exactly once.
#[tokio::test]
async fn concurrent_redrives_move_each_record_once() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = client(&redis, Options::legacy()).await;
    let keys = bq.keys("orders");
    let mut ids = BTreeSet::new();
    let mut records = Vec::new();
    for i in 0..600 {
        if i % 50 == 0 {
            records.push(format!("poison {i}").into_bytes());
            continue;
        }
        let data = serde_json::value::to_raw_value(&serde_json::json!({ "i": i })).expect("data");
        let env = bus_babelqueue::Envelope::new(URN, &data, "orders").expect("envelope");
        ids.insert(env.meta().id.clone().expect("id"));
        let block = DeadLetterBlock::new(Reason::Failed, "orders", 3, None, None);
        records.push(env.dead_lettered(&block));
    }
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    push_raw(&redis, &keys.dlq, &refs);
    let other = client(&redis, Options::legacy()).await;
    let (a, b) = (bq.admin(), other.admin());
    let layout = Layout::Legacy;
    let opts = RedriveOptions::new();
    let (ra, rb) = tokio::join!(
        a.redrive(&layout, "orders", &opts),
        b.redrive(&layout, "orders", &opts)
    );
    let (ra, rb) = (ra.expect("redrive"), rb.expect("redrive"));
    assert_eq!(ra.redriven + rb.redriven, ids.len(), "{ra:?} {rb:?}");
    let moved: Vec<String> = lrange(&redis, &keys.ready)
        .iter()
        .map(|b| {
            let v: Value = serde_json::from_slice(b).expect("envelope");
            v["meta"]["id"].as_str().expect("id").to_owned()
        })
        .collect();
    assert_eq!(moved.len(), ids.len());
    assert_eq!(moved.into_iter().collect::<BTreeSet<_>>(), ids);
    assert_eq!(common::size(&redis, &keys.dlq), 12);
    // Both runs see the poison; a second run has nothing left to move.
    let again = Admin::new(bq.client().clone())
        .redrive(&layout, "orders", &opts)
        .await
        .expect("redrive");
    assert_eq!((again.redriven, again.poison), (0, 12));
}

/// Bad input: a clear error and nothing touched; `max` and an empty DLQ.
#[tokio::test]
async fn bad_input_is_refused_and_max_is_honoured() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = client(&redis, Options::legacy()).await;
    let admin = bq.admin();
    let layout = Layout::Legacy;
    let keys = bq.keys("orders");
    let mut records = Vec::new();
    for i in 0..5 {
        let data = serde_json::value::to_raw_value(&serde_json::json!({ "i": i })).expect("data");
        let env = bus_babelqueue::Envelope::new(URN, &data, "orders").expect("envelope");
        let block = DeadLetterBlock::new(Reason::Failed, "orders", 3, None, None);
        records.push(env.dead_lettered(&block));
    }
    let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    push_raw(&redis, &keys.dlq, &refs);
    let before = dump_all(&redis);

    let bad_target = admin
        .redrive(&layout, "orders", &RedriveOptions::new().to("no spaces"))
        .await;
    assert!(
        matches!(bad_target, Err(Error::Config(_))),
        "{bad_target:?}"
    );
    let bad_queue = admin.counts(&layout, "").await;
    assert!(matches!(bad_queue, Err(Error::Config(_))), "{bad_queue:?}");
    redis.client().set("strings.dlq", "x").expect("SET");
    let wrong = admin
        .redrive(&layout, "strings", &RedriveOptions::new())
        .await;
    assert!(matches!(wrong, Err(Error::WrongType { .. })), "{wrong:?}");
    let none = admin
        .peek(&layout, "orders", Area::DeadLetters, 0, 0)
        .await
        .expect("peek");
    assert!(none.is_empty());
    redis.client().cmd(&["DEL", "strings.dlq"]).expect("DEL");
    assert_eq!(dump_all(&redis), before);

    let two = admin
        .redrive(&layout, "orders", &RedriveOptions::new().max(2))
        .await
        .expect("redrive");
    assert_eq!(two.redriven, 2);
    assert_eq!(common::size(&redis, &keys.dlq), 3);
    assert_eq!(common::size(&redis, &keys.ready), 2);
    // The two oldest moved, in order.
    assert_eq!(lrange(&redis, &keys.dlq), records[2..].to_vec());
    let empty = admin
        .redrive(&layout, "nothing", &RedriveOptions::new())
        .await
        .expect("redrive of a missing DLQ");
    assert_eq!(empty, bus_babelqueue::RedriveReport::default());
}
