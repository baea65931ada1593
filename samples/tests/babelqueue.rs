//! The BabelQueue sample: a Rust worker routes a BabelQueue queue by URN and publishes
//! BabelQueue envelopes, on both layouts, against a real redis-server.

use std::process::Command;

use bus_test_redis::RedisServer;

fn run(layout: &str) {
    run_on(layout, None);
}

/// Runs the sample, on the queues named on its command line when given.
fn run_on(layout: &str, queues: Option<(&str, &str)>) {
    let (orders, invoices) = queues.unwrap_or(("orders", "invoices"));
    let server = RedisServer::start().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_babelqueue"));
    if queues.is_some() {
        command.args([orders, invoices]);
    }
    let output = command
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
    let prefix = if layout == "laravel" { "queues:" } else { "" };
    let key = format!("{prefix}{invoices}");
    let mut client = server.client();
    // The declared queues stay empty when others are named.
    if queues.is_some() {
        for declared in ["orders", "invoices"] {
            let declared = format!("{prefix}{declared}");
            assert_eq!(
                client.cmd(&["EXISTS", &declared]).unwrap().as_int(),
                Some(0),
                "{declared}"
            );
        }
    }
    let invoices_queue = invoices;
    let invoices = client.cmd(&["LRANGE", &key, "0", "-1"]).unwrap();
    let invoices = invoices.as_array().unwrap();
    assert_eq!(invoices.len(), 3);
    for raw in invoices {
        let envelope: serde_json::Value = serde_json::from_slice(raw.as_bytes().unwrap()).unwrap();
        assert_eq!(envelope["job"], "urn:babel:invoices:issue");
        assert_eq!(envelope["meta"]["lang"], "rust");
        assert_eq!(envelope["meta"]["queue"], invoices_queue);
        assert_eq!(envelope["attempts"], 0);
        assert!(envelope["data"]["total_cents"].as_u64().unwrap() % 1250 == 0);
    }
    // Nothing left on the orders queue, nothing dead-lettered.
    let orders = format!("{prefix}{orders}");
    for key in [orders.clone(), format!("{orders}.dlq")] {
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

#[test]
fn the_sample_takes_its_queues_from_its_command_line() {
    run_on("legacy", Some(("eu-orders", "eu-invoices")));
    run_on("laravel", Some(("eu-orders", "eu-invoices")));
}
