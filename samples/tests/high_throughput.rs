//! The README's first command: the high-throughput sample against a fresh Redis.

use std::process::Command;

use bus_test_redis::RedisServer;

#[test]
fn processes_ten_thousand_and_leaves_only_bookkeeping() {
    let server = RedisServer::start().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_high-throughput"))
        .env("REDIS_URL", server.url())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("running on Redis at REDIS_URL"), "{stdout}");
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("processed 10000 messages in"))
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    // The rate in whole messages: `... in 0.433 s: 23,082/s`.
    let rate = summary.rsplit(": ").next().unwrap();
    let digits = rate
        .strip_suffix("/s")
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit() || c == ','),
        "{summary}"
    );
    assert!(
        !stderr.contains("WARN") && !stderr.contains("ERROR"),
        "noisy run:\n{stderr}"
    );
    let mut keys = server.client().scan_match("*").unwrap();
    // The hosts' per-type timing (operator keys that expire on their own: 72 h) is there,
    // since the sample's host ran; the rest is bookkeeping only: the protocol record, the
    // registry of queues, and the queue's id counter.
    let timing = keys.len();
    keys.retain(|k| !k.starts_with("sample:{:timing}:"));
    assert!(keys.len() < timing, "no per-type timing recorded: {keys:?}");
    assert_eq!(
        keys,
        [
            "sample:protocol",
            "sample:registry:queues",
            "sample:{sample-throughput}:seq"
        ],
        "keys left behind"
    );
}
