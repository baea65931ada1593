//! Dead letters as BabelQueue writes and reads them: an always-failing handler, an
//! unknown URN and garbage, checked with the real SDK's redrive and against the poison
//! records the SDK itself writes for the same garbage.

mod common;

use std::time::{Duration, Instant};

use bus_test_redis::TestRedis;
use common::{consumer, lrange, options, receive, run_py, settle, size, transport, URN};
use serde_json::Value;

const OTHER_URN: &str = "urn:babel:orders:unknown";
const ERROR: &str = "boom: the handler always fails";

fn garbage() -> Vec<Vec<u8>> {
    vec![
        b"not json".to_vec(),
        b"[1,2]".to_vec(),
        br#"{"data":{},"attempts":0}"#.to_vec(),
        b"\xff\xfe{\"job\":1}".to_vec(),
        br#"{"job":"urn:x","attempts":"1","big":9007199254740993}"#.to_vec(),
        format!(
            r#"{{"job":"urn:x","attempts":0,"d":{}{}}}"#,
            "[".repeat(2000),
            "]".repeat(2000)
        )
        .into_bytes(),
    ]
}

fn push_raw(redis: &TestRedis, list: &str, values: &[Vec<u8>]) {
    let mut c = redis.client();
    for v in values {
        let mut args: Vec<&[u8]> = vec![b"RPUSH", list.as_bytes()];
        args.push(v);
        c.cmd(&args).expect("RPUSH");
    }
}

/// A record without what legitimately differs between two SDKs' records of the same body.
fn comparable(record: &[u8]) -> Value {
    let mut v: Value = serde_json::from_slice(record).expect("a JSON record");
    let dl = v["dead_letter"]
        .as_object_mut()
        .expect("a dead_letter block");
    for key in ["failed_at", "lang", "error", "original_queue"] {
        dl.remove(key);
    }
    v
}

async fn dead_letters(layout: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let options = options(layout);
    let transport = transport(&url, options).await;
    let keys = transport.babel_queue().keys("orders");

    // Garbage first, then a good message and one nobody handles.
    push_raw(&redis, &keys.ready, &garbage());
    let base = [
        "--url",
        url.as_str(),
        "--layout",
        layout,
        "--queue",
        "orders",
    ];
    let (good, _) = run_py(&[&["publish"][..], &base[..]].concat()).await;
    let (unknown, _) = run_py(&[&["publish", "--urn", OTHER_URN][..], &base[..]].concat()).await;
    let (good_id, unknown_id) = (good[0]["id"].clone(), unknown[0]["id"].clone());

    let consumer = consumer(&transport, "orders", Duration::from_secs(30), 3).await;
    let expected = garbage().len() as i64 + 2;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut runs = 0;
    while size(&redis, &keys.dlq) < expected {
        assert!(
            Instant::now() < deadline,
            "only {} dead letters",
            size(&redis, &keys.dlq)
        );
        for delivery in receive(&*consumer, 10).await {
            runs += 1;
            settle(&*consumer, &delivery, &[URN], 3, Err(ERROR.to_owned())).await;
        }
    }
    // Three runs of the failing message, one delivery of the unknown one.
    assert_eq!(runs, 4);
    for key in [&keys.ready, &keys.in_flight, &keys.timers] {
        assert_eq!(size(&redis, key), 0, "{key} is not empty");
    }
    let records = lrange(&redis, &keys.dlq);
    let poison = &records[..garbage().len()];
    let by_id = |id: &Value| -> Value {
        records[garbage().len()..]
            .iter()
            .map(|r| serde_json::from_slice::<Value>(r).expect("a record"))
            .find(|r| &r["meta"]["id"] == id)
            .expect("a record of the message")
    };
    let (failed, unknown) = (by_id(&good_id), by_id(&unknown_id));
    assert_eq!(failed["meta"]["id"], good_id);
    assert_eq!(failed["attempts"], 3);
    assert_eq!(failed["data"]["big"].to_string(), "9007199254740993");
    let block = &failed["dead_letter"];
    assert_eq!(block["reason"], "failed");
    assert_eq!(block["error"], ERROR);
    assert_eq!(block["exception"], "HandlerError");
    assert_eq!(block["attempts"], 3);
    assert_eq!(block["original_queue"], "orders");
    assert_eq!(block["lang"], "rust");
    assert_eq!(unknown["meta"]["id"], unknown_id);
    assert_eq!(unknown["dead_letter"]["reason"], "unknown_urn");
    assert_eq!(unknown["dead_letter"]["attempts"], 0);

    // The SDK's poison records of the same garbage, written by a Python worker.
    let py_keys = transport.babel_queue().keys("pyorders");
    push_raw(&redis, &py_keys.ready, &garbage());
    let count = garbage().len().to_string();
    run_py(&[
        "consume", "--url", &url, "--layout", layout, "--queue", "pyorders", "--count", &count,
        "--idle", "0.5",
    ])
    .await;
    let theirs = lrange(&redis, &py_keys.dlq);
    assert_eq!(theirs.len(), poison.len());
    for (ours, theirs) in poison.iter().zip(&theirs) {
        assert_eq!(comparable(ours), comparable(theirs));
        let ours: Value = serde_json::from_slice(ours).expect("record");
        assert_eq!(ours["dead_letter"]["reason"], "poison");
        assert_eq!(ours["dead_letter"]["attempts"], 0);
    }

    // The SDK's redrive finds them (a dry run: every record stays).
    let (items, _) = run_py(&[&["redrive", "--dlq", "orders.dlq"][..], &base[..]].concat()).await;
    assert_eq!(items.len() as i64, expected);
    let find = |id: &Value| items.iter().find(|i| &i["message_id"] == id).cloned();
    let failed_item = find(&good_id).expect("redrive lists the failed message");
    assert_eq!(failed_item["reason"], "failed");
    assert_eq!(failed_item["to"], "orders");
    let unknown_item = find(&unknown_id).expect("redrive lists the unknown URN");
    assert_eq!(unknown_item["reason"], "unknown_urn");
    assert_eq!(
        items.iter().filter(|i| i["message_id"] == "").count(),
        garbage().len()
    );
    assert_eq!(size(&redis, &keys.dlq), expected);
}

bus_test_redis::per_layout!(dead_letters => failures_unknown_urns_and_garbage_dead_letter_like_the_sdk);
