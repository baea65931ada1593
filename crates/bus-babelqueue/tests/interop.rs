//! Interoperability with the real BabelQueue SDK (`babelqueue[redis]==1.24.0` from PyPI,
//! driven by tests/python/bq.py) over a real redis-server, in both layouts.

mod common;

use bus_core::transport::Placement;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bus_babelqueue::{ATTEMPTS_HEADER, TRACE_ID_HEADER};
use bus_core::transport::{Outgoing, WireFormat};
use bus_core::{Format, Headers, MessageId, Transport};
use bus_test_redis::TestRedis;
use common::{consumer, options, receive, run_py, size, transport, URN};
use serde_json::{json, Value};

const N: usize = 1000;

/// Python publishes N messages; the Rust adapter consumes each once with the same
/// meta.id, trace_id, data and headers.
async fn python_to_rust(layout: &str, headers: bool) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let queue = "orders";
    let mut args = vec![
        "publish", "--url", &url, "--layout", layout, "--queue", queue, "--count",
    ];
    let count = N.to_string();
    args.push(&count);
    if headers {
        args.push("--headers");
    }
    let (published, _) = run_py(&args).await;
    assert_eq!(published.len(), N);
    let expected: HashMap<String, Value> = published
        .into_iter()
        .map(|p| (p["id"].as_str().expect("id").to_owned(), p))
        .collect();

    let transport = transport(&url, options(layout)).await;
    let consumer = consumer(&transport, queue, Duration::from_secs(30), 3).await;
    let mut seen: HashMap<String, usize> = HashMap::new();
    while seen.len() < N {
        let batch = receive(&*consumer, 100).await;
        assert!(!batch.is_empty(), "stalled after {} messages", seen.len());
        for delivery in &batch {
            let native = delivery.decoded.as_deref().expect("read by the adapter");
            assert_eq!(native.message_type, URN);
            assert_eq!(delivery.delivery_count, 1);
            let want = &expected[native.id.as_str()];
            let data: Value = serde_json::from_slice(&native.body).expect("data");
            assert_eq!(data, want["data"]);
            // Bytes too: 9007199254740993 and [] survive.
            assert!(String::from_utf8_lossy(&native.body).contains("9007199254740993"));
            let mut expected_headers: BTreeMap<String, String> = if layout == "legacy" {
                serde_json::from_value(want["headers"].clone()).expect("headers")
            } else {
                BTreeMap::new() // Laravel stores bare envelopes: headers are dropped
            };
            expected_headers.insert(
                TRACE_ID_HEADER.to_owned(),
                want["trace_id"].as_str().expect("trace").to_owned(),
            );
            expected_headers.insert(ATTEMPTS_HEADER.to_owned(), "0".to_owned());
            assert_eq!(native.headers, expected_headers);
            *seen.entry(native.id.to_string()).or_default() += 1;
        }
        let receipts: Vec<_> = batch.iter().map(|d| d.receipt.clone()).collect();
        consumer.ack(&receipts).await.expect("ack");
    }
    assert!(
        seen.values().all(|n| *n == 1),
        "a message was delivered twice"
    );
    let keys = transport.babel_queue().keys(queue);
    for key in [&keys.ready, &keys.in_flight, &keys.timers, &keys.dlq] {
        assert_eq!(size(&redis, key), 0, "{key} is not empty");
    }
}

bus_test_redis::per_layout!(python_to_rust(false) => python_publishes_rust_consumes);
bus_test_redis::per_layout!(python_to_rust(true) => python_publishes_with_headers_rust_consumes);

/// The Rust adapter sends N messages; the Python SDK consumes them with identical fields
/// and logs no warning.
async fn rust_to_python(layout: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let queue = "orders";
    let transport = transport(&url, options(layout)).await;
    let mut sent = HashMap::new();
    let mut batch = Vec::new();
    for i in 0..N {
        let data = json!({"i": i, "text": "ü / \"q\"", "big": 9007199254740993u64, "empty": []});
        let mut native =
            bus_core::Envelope::new(URN, Format::Json, serde_json::to_vec(&data).expect("json"));
        native.id = MessageId::generate();
        let mut headers = Headers::new();
        headers.insert(
            "traceparent".into(),
            format!("00-{:032x}-{:016x}-01", i + 1, i + 1),
        );
        headers.insert(TRACE_ID_HEADER.into(), format!("trace-{i}"));
        native.headers = headers;
        sent.insert(native.id.to_string(), (data, native.sent_at_ms, i));
        batch.push(Outgoing {
            id: native.id.clone(),
            payload: transport
                .format(queue)
                .encode(&native)
                .expect("encode")
                .into(),
        });
        if batch.len() == 100 {
            transport
                .send(queue, Placement::now(), std::mem::take(&mut batch))
                .await
                .expect("send");
        }
    }
    let count = N.to_string();
    let (consumed, stderr) = run_py(&[
        "consume", "--url", &url, "--layout", layout, "--queue", queue, "--count", &count,
        "--idle", "2",
    ])
    .await;
    assert!(!stderr.contains("WARNING"), "the SDK warned:\n{stderr}");
    assert!(
        !stderr.contains("ERROR"),
        "the SDK logged an error:\n{stderr}"
    );
    assert_eq!(consumed.len(), N);
    for got in &consumed {
        let id = got["id"].as_str().expect("id");
        let (data, sent_at, i) = &sent[id];
        assert_eq!(&got["data"], data);
        assert_eq!(got["trace_id"], format!("trace-{i}"));
        assert_eq!(got["attempts"], 0);
        assert_eq!(
            got["keys"],
            json!(["attempts", "data", "job", "meta", "trace_id"])
        );
        let meta = &got["meta"];
        assert_eq!(meta["lang"], "rust");
        assert_eq!(meta["schema_version"], 1);
        assert_eq!(meta["queue"], queue);
        assert_eq!(meta["created_at"], json!(sent_at));
        let headers = &got["headers"];
        if layout == "legacy" {
            assert_eq!(
                headers,
                &json!({"traceparent": format!("00-{:032x}-{:016x}-01", i + 1, i + 1)})
            );
        } else {
            assert_eq!(headers, &json!({}));
        }
    }
    let ids: std::collections::HashSet<_> = consumed.iter().map(|c| c["id"].clone()).collect();
    assert_eq!(ids.len(), N, "a message was handled twice");
}

bus_test_redis::per_layout!(rust_to_python => rust_publishes_python_consumes);
