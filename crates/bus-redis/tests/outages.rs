//! Outages and a full Redis, done for real.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_core::{Bus, BusConfig, CommandProcessor, Context, Host, ProcessError, ProcessingSettings};
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::{eventually, RedisServer};
use common::Work;

async fn connect(url: &str, prefix: &str) -> RedisTransport {
    let config = RedisConfig::from_url(url)
        .unwrap()
        .prefix(prefix)
        .command_timeout(Duration::from_secs(2));
    RedisTransport::connect(&config).await.unwrap()
}

fn ready(server: &RedisServer, prefix: &str) -> i64 {
    let key = bus_redis::keys::QueueKeys::ready_of(
        prefix,
        &bus_core::transport::Source::queue("work").unwrap(),
    );
    server
        .client()
        .cmd(&["LLEN", &key])
        .unwrap()
        .as_int()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_while_redis_is_down_fails_in_time_saying_the_outcome_is_unknown() {
    // SIGKILL below: with the default `everysec`, the first (acknowledged) send may still be
    // in Redis's AOF buffer, which is not what this test is about.
    let mut server = RedisServer::builder()
        .appendonly(true)
        .arg("--appendfsync")
        .arg("always")
        .start()
        .unwrap();
    let transport = connect(&server.url(), "outage").await;
    let bus = Bus::new(transport, BusConfig::default());
    bus.send(&Work { n: 1 }).await.unwrap();
    server.kill();
    let started = Instant::now();
    let error = bus.send(&Work { n: 2 }).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(error, bus_core::Error::OutcomeUnknown(_)),
        "{error:?}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // What the docs promise: the timed-out send is not withdrawn. fred keeps it queued
    // and writes it when the connection comes back, so it may still be stored.
    server.restart().unwrap();
    bus.send(&Work { n: 3 }).await.unwrap();
    let stored = ready(&server, "outage");
    assert!((2..=3).contains(&stored), "{stored} stored");
    println!(
        "after the restart: {stored} of 3 sends stored (the timed-out one {})",
        if stored == 3 { "too" } else { "not" }
    );
}

struct Slow {
    lock: Duration,
    runs: AtomicU32,
    slow_runs: AtomicU32,
}

#[async_trait]
impl CommandProcessor<Work> for Arc<Slow> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .message_lock_timeout(self.lock)
            .max_concurrent_calls(16)
    }
    async fn process(&self, work: Work, _: &Context) -> Result<(), ProcessError> {
        if work.n == 0 {
            self.slow_runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.lock * 3).await;
        }
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_start_renew_and_drain_a_full_redis() {
    let server = RedisServer::builder()
        .arg("--maxmemory")
        .arg("8mb")
        .arg("--maxmemory-policy")
        .arg("noeviction")
        .start()
        .unwrap();
    let transport = connect(&server.url(), "full").await;
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let batch: Vec<Work> = (0..300).map(|n| Work { n }).collect();
    bus.send_batch(&batch).await.unwrap();
    // Fill Redis to its limit with other data, until a send is refused.
    let mut client = server.client();
    let (mut refused, mut accepted) = (None, 0u32);
    for i in 0..100_000 {
        let size = if i < 200 { 64 * 1024 } else { 256 };
        if let Ok(reply) = client.cmd(&["SET", &format!("filler:{i}"), &"x".repeat(size)]) {
            if reply.is_ok() {
                continue;
            }
        }
        match bus.send(&Work { n: 999 }).await {
            Ok(_) => accepted += 1,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.expect("Redis filled up");
    let text = bus_core::ErrorChain(&refused).to_string();
    assert!(text.contains("OOM"), "a clear error: {text}");

    let slow = Arc::new(Slow {
        lock: Duration::from_millis(600),
        runs: AtomicU32::new(0),
        slow_runs: AtomicU32::new(0),
    });
    let host = Host::builder()
        .transport(transport)
        .command::<Work, _>(Arc::clone(&slow))
        .build()
        .unwrap();
    let running = host
        .start()
        .await
        .expect("a consumer starts on a full Redis");
    let drained = eventually(Duration::from_secs(30), || {
        slow.runs.load(Ordering::SeqCst) >= 300 + accepted
    })
    .await;
    running.shutdown().await.unwrap();
    assert!(
        drained,
        "{} of 300 handled",
        slow.runs.load(Ordering::SeqCst)
    );
    assert_eq!(
        slow.runs.load(Ordering::SeqCst),
        300 + accepted,
        "none ran twice"
    );
    assert_eq!(
        slow.slow_runs.load(Ordering::SeqCst),
        1,
        "the 3-lock-timeout handler kept its lock by renewal"
    );
    assert_eq!(ready(&server, "full"), 0);
}
