//! `bus babel ...` against a real redis-server holding BabelQueue queues: listed,
//! counted, peeked, dead letters shown and redriven (a dry run first, which moves
//! nothing). `stats`, `peek` and `dead` are aliases of the command table's commands on
//! `babel:<queue>`, so they print the same records (tests/operator.rs has the table).

use std::process::{Command, Output, Stdio};

use bus_test_redis::TestRedis;
use serde_json::Value;

fn bus(url: &str, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_bus"))
        .arg("--url")
        .arg(url)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "bus {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn json(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_slice(&bus(url, &all).stdout).unwrap()
}

#[test]
fn babelqueue_queues_are_listed_counted_peeked_and_redriven() {
    let redis = TestRedis::start().unwrap();
    let url = redis.url();
    let mut client = redis.client();
    let envelope = |id: &str| {
        format!(
            r#"{{"job":"urn:babel:orders:created","trace_id":"t-{id}","data":{{"order":1}},"meta":{{"id":"{id}","queue":"orders","lang":"python","schema_version":1,"created_at":1}},"attempts":0}}"#
        )
    };
    client.cmd(&["RPUSH", "orders", &envelope("m-1")]).unwrap();
    // A dead letter as BabelQueue's SDKs write it, and a poison record beside it.
    let dead = envelope("m-2").replacen(
        r#""attempts":0}"#,
        r#""attempts":3,"dead_letter":{"reason":"failed","error":"card declined","exception":"RuntimeError","failed_at":1,"original_queue":"orders","attempts":3,"lang":"python"}}"#,
        1,
    );
    client.cmd(&["RPUSH", "orders.dlq", &dead]).unwrap();
    client
        .cmd(&[
            "RPUSH",
            "orders.dlq",
            r#"{"raw":"not json","dead_letter":{"reason":"poison"}}"#,
        ])
        .unwrap();

    let queues = json(&url, &["babel", "queues"]);
    assert_eq!(queues, serde_json::json!(["babel:orders"]), "{queues}");
    let stats = json(&url, &["babel", "stats", "orders"]);
    assert_eq!(
        stats[0]["queue"],
        json(&url, &["stats", "babel:orders"])[0]["queue"]
    );
    assert_eq!(
        (stats[0]["ready"].as_u64(), stats[0]["dead"].as_u64()),
        (Some(1), Some(2))
    );
    let peeked = json(&url, &["babel", "peek", "orders"]);
    assert_eq!(peeked[0]["message"]["id"], "m-1");
    assert_eq!(peeked[0]["message"]["type"], "urn:babel:orders:created");
    let dead = json(&url, &["babel", "dead", "orders"]);
    assert_eq!(dead[0]["reason"], "failed");
    assert_eq!(
        dead[0]["errors"][0]["message"],
        "RuntimeError: card declined"
    );
    assert_eq!(dead[1]["reason"], "poison");
    let table =
        String::from_utf8_lossy(&bus(&url, &["babel", "dead", "orders"]).stdout).into_owned();
    assert!(
        table.contains("failed") && table.contains("card declined"),
        "{table}"
    );

    let dry = json(&url, &["babel", "redrive", "orders", "--dry-run"]);
    assert_eq!(
        (dry["redriven"].as_u64(), dry["poison"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(json(&url, &["babel", "stats", "orders"])[0]["dead"], 2);

    let done =
        String::from_utf8_lossy(&bus(&url, &["babel", "redrive", "orders"]).stdout).into_owned();
    assert!(done.contains("redrove 1"), "{done}");
    let stats = json(&url, &["babel", "stats", "orders"]);
    assert_eq!(
        (stats[0]["ready"].as_u64(), stats[0]["dead"].as_u64()),
        (Some(2), Some(1))
    );
    let redriven = &json(&url, &["babel", "peek", "orders"])[1];
    assert_eq!(
        (&redriven["message"]["id"], &redriven["delivery_count"]),
        (&Value::from("m-2"), &Value::from(0))
    );
}
