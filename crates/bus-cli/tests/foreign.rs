//! What foreign writers leave in Redis must not break management: dead letters whose error
//! text or reason is not UTF-8 are listed (lossily), by the API and by the `bus` tool.

// The management tests' plumbing, shared rather than copied.
#[path = "../../bus-management/tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};

use bus_core::transport::DeadLetterReason;
use bus_core::{Envelope, Format};
use common::{setup, work};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_with_invalid_utf8_are_listed_lossily() {
    let s = setup().await;
    for n in 1..=2 {
        s.bus.send(&common::Work { n }).await.unwrap();
    }
    let ids = s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    let keys = s.keys(&work());
    let mut redis = s.redis.client();
    // A foreign consumer wrote bytes that are not UTF-8 into the first one's reason and
    // the second one's error history...
    redis
        .cmd(&[
            &b"HSET"[..],
            keys.dead_info.as_bytes(),
            ids[0].as_bytes(),
            b"{\"reason\":\"rejected \xff\xfe\",\"at_ms\":1712345679901}",
        ])
        .unwrap();
    redis
        .cmd(&[
            &b"HSET"[..],
            keys.errors.as_bytes(),
            ids[1].as_bytes(),
            b"[{\"message\":\"caf\xe9 failed\",\"at_ms\":5}]",
        ])
        .unwrap();
    // ...and dead-lettered one of its own with a non-UTF-8 storage id, a plain-text
    // reason and an error history that is not JSON.
    let envelope = Envelope::new("work", Format::Json, &br#"{"n":3}"#[..])
        .encode()
        .unwrap();
    let foreign_id: &[u8] = b"x\xff";
    for command in [
        [&b"HSET"[..], keys.msgs.as_bytes(), foreign_id, &envelope],
        [
            b"HSET",
            keys.dead_info.as_bytes(),
            foreign_id,
            b"gave up \x80",
        ],
        [
            b"HSET",
            keys.errors.as_bytes(),
            foreign_id,
            b"\xc3( not json",
        ],
    ] {
        redis.cmd(&command).unwrap();
    }
    redis
        .cmd(&[&b"RPUSH"[..], keys.dead.as_bytes(), foreign_id])
        .unwrap();

    let letters = s.management.dead_letters(&work(), 10).await.unwrap();
    assert_eq!(letters.len(), 3, "{letters:#?}");
    assert_eq!(
        letters[0].reason.as_deref(),
        Some("rejected \u{fffd}\u{fffd}")
    );
    assert_eq!(letters[0].dead_lettered_at_ms, Some(1712345679901));
    assert_eq!(letters[1].reason.as_deref(), Some("rejected"));
    assert_eq!(letters[1].errors[0].message, "caf\u{fffd} failed");
    assert_eq!(letters[2].storage_id, "x\u{fffd}");
    assert_eq!(letters[2].reason.as_deref(), Some("gave up \u{fffd}"));
    assert_eq!(letters[2].errors[0].message, "\u{fffd}( not json");
    assert!(letters[2].message.is_some(), "{:?}", letters[2]);

    // The tool lists all three, as JSON and as a table.
    let bus = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_bus"))
            .env_remove("REDIS_URL")
            .args(["--url", &s.redis.url(), "--prefix", s.redis.namespace()])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = bus(&["--json", "dead", "work"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 3, "{json}");
    assert_eq!(json[1]["errors"][0]["message"], "caf\u{fffd} failed");
    let out = bus(&["dead", "work"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    for expected in [ids[0].as_str(), ids[1].as_str(), "x\u{fffd}", "caf\u{fffd}"] {
        assert!(table.contains(expected), "{expected} missing from\n{table}");
    }
}
