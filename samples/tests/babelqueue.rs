//! The BabelQueue sample: a Rust worker routes a BabelQueue queue by URN and publishes
//! BabelQueue envelopes, on both layouts, against a real redis-server.

use std::process::Command;

use bus_test_redis::RedisServer;

fn run(layout: &str) {
    let server = RedisServer::start().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_babelqueue"))
        .env("REDIS_URL", server.url())
        .env("BABELQUEUE_LAYOUT", layout)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("handled 4 orders; 3 invoices wait"),
        "{stdout}"
    );
    let key = if layout == "laravel" {
        "queues:invoices"
    } else {
        "invoices"
    };
    let mut client = server.client();
    let invoices = client.cmd(&["LRANGE", key, "0", "-1"]).unwrap();
    let invoices = invoices.as_array().unwrap();
    assert_eq!(invoices.len(), 3);
    for raw in invoices {
        let envelope: serde_json::Value = serde_json::from_slice(raw.as_bytes().unwrap()).unwrap();
        assert_eq!(envelope["job"], "urn:babel:invoices:issue");
        assert_eq!(envelope["meta"]["lang"], "rust");
        assert_eq!(envelope["meta"]["queue"], "invoices");
        assert_eq!(envelope["attempts"], 0);
        assert!(envelope["data"]["total_cents"].as_u64().unwrap() % 1250 == 0);
    }
    // Nothing left on the orders queue, nothing dead-lettered.
    let orders = if layout == "laravel" {
        "queues:orders"
    } else {
        "orders"
    };
    for key in [orders.to_owned(), format!("{orders}.dlq")] {
        assert_eq!(
            client.cmd(&["LLEN", &key]).unwrap().as_int(),
            Some(0),
            "{key}"
        );
    }
}

#[test]
fn the_sample_works_a_legacy_fleet() {
    run("legacy");
}

#[test]
fn the_sample_works_a_laravel_fleet() {
    run("laravel");
}
