//! A sample told to use a Redis (`REDIS_URL`) uses that Redis or stops with the reason
//! and a non-zero exit: it never falls back to another Redis or to the in-memory
//! transport, where a run would look as if it had worked on the Redis named.

use std::net::TcpListener;
use std::process::{Command, Output};

fn run(binary: &str, url: &str) -> Output {
    Command::new(binary)
        .env("REDIS_URL", url)
        .output()
        .expect("the sample runs")
}

/// A loopback port that nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn assert_refused(output: &Output, reason: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "exit 0:\n{stdout}\n{stderr}");
    assert!(
        !stdout.contains("running on"),
        "it ran somewhere else:\n{stdout}"
    );
    assert!(
        stderr.contains("REDIS_URL is set but the Redis it names cannot be used: ")
            && stderr.contains(reason),
        "no reason given:\n{stderr}"
    );
}

#[test]
fn an_unreachable_redis_url_stops_the_sample_with_the_reason() {
    let port = closed_port();
    let url = format!("redis://127.0.0.1:{port}/0");
    // Refused, as a rule; a server of a test running beside this one may take the port
    // meanwhile (then: reset). Either way the sample names what it could not reach.
    let reason = format!("cannot connect to Redis at 127.0.0.1:{port}");
    let output = run(env!("CARGO_BIN_EXE_high-throughput"), &url);
    assert_refused(&output, &reason);
    let output = run(env!("CARGO_BIN_EXE_tour"), &url);
    assert_refused(&output, &reason);
}

#[test]
fn a_malformed_redis_url_stops_the_sample_with_the_reason() {
    let output = run(env!("CARGO_BIN_EXE_tour"), "http://127.0.0.1:6379");
    assert_refused(&output, "redis://");
}

#[test]
fn rates_are_whole_messages_with_thousands_separators() {
    assert_eq!(samples::per_second(23_082.208_3), "23,082/s");
    assert_eq!(samples::per_second(999.5), "1,000/s");
    assert_eq!(samples::per_second(0.0), "0/s");
    assert_eq!(samples::per_second(f64::NAN), "0/s");
}
