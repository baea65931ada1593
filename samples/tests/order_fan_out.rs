//! The fan-out sample runs end to end on a private redis-server: every order continues once
//! its lines settled, with their prices (a line of an unknown product dead, the order
//! priced without it), and the batch of orders says when all are priced.

use std::process::Command;

use bus_test_redis::RedisServer;

#[test]
fn every_order_fans_out_to_its_lines_and_back_in() {
    let server = RedisServer::start().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_order-fan-out"))
        .env("REDIS_URL", server.url())
        .output()
        .expect("the sample runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for line in [
        "order 1: 2 lines priced, total 42.00",
        "order 2: 3 lines priced, total 52.50",
        "order 3: 1 lines priced, total 12.00 (not priced: teapot)",
        "all 3 orders priced",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
    let last = stdout.lines().last().unwrap_or_default();
    assert_eq!(
        last, "all 3 orders priced",
        "the batch's callback comes last: {stdout}"
    );
}
