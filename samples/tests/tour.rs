//! The tour runs end to end on a private redis-server: every step, the command with an
//! attachment included, is handled, and the attachment is gone once its message was
//! acknowledged.

use std::process::Command;

use bus_test_redis::RedisServer;

#[test]
fn the_tour_runs_every_step_and_leaves_no_attachment() {
    let server = RedisServer::start().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_tour"))
        .env("REDIS_URL", server.url())
        .output()
        .expect("the tour runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("running on Redis at REDIS_URL"), "{stdout}");
    assert!(
        stdout.contains("invoice 42: read invoice-42.pdf (48 bytes) from its attachment"),
        "{stdout}"
    );
    assert!(
        stdout.contains("tour finished: 9 of 9 steps done"),
        "{stdout}"
    );
    // Deleted after the ack, which the tour's shutdown waited for.
    let keys = server.client().cmd(&["KEYS", "*:att:*"]).unwrap();
    assert_eq!(keys.as_array().map(<[_]>::len), Some(0), "{keys:?}");
}
