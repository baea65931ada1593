//! What an operator reads in the logs, captured from a
//! host on a real redis-server. Current-thread runtimes, so the capture sees every task.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::Source;
use bus_core::{Backoff, CommandProcessor, Context, Host, ProcessError, ProcessingSettings};
use bus_test_redis::{eventually, eventually_async, Logs, RedisServer, TestRedis};
use common::Work;
use fred::prelude::SortedSetsInterface;

struct Fails;

#[async_trait]
impl CommandProcessor<Work> for Arc<Fails> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .dead_letter_delivery_limit(3)
            .retry(Backoff::fixed(Duration::from_millis(10)))
    }
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        Err(ProcessError::retry(std::io::Error::other(
            "the disk is full",
        )))
    }
}

#[tokio::test]
async fn retries_and_the_dead_letter_are_logged_in_the_message_span() {
    let logs = Logs::capture("bus_core=info");
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    let running = Host::builder()
        .transport(transport)
        .command::<Work, _>(Arc::new(Fails))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let id = running.bus().send(&Work { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || !logs
            .matching("dead-lettering")
            .is_empty())
        .await
    );
    running.shutdown().await.unwrap();
    let retries = logs.matching("retrying after the delay");
    assert_eq!(retries.len(), 2, "{:#?}", logs.lines());
    for (line, delivery) in retries.iter().zip(["delivery_count=1", "delivery_count=2"]) {
        for needed in [
            "bus.handle",
            &format!("message_id={id}"),
            "message_type=\"work\"",
            delivery,
            "delay=10ms",
            "the disk is full",
        ] {
            assert!(line.contains(needed), "{needed:?} missing in {line}");
        }
    }
    let dead = logs.matching("dead-lettering");
    assert!(
        dead[0].contains(&format!("message_id={id}")) && dead[0].contains("delivery_limit"),
        "{}",
        dead[0]
    );
}

struct Sleeps(AtomicU32, AtomicU32);

#[async_trait]
impl CommandProcessor<Work> for Arc<Sleeps> {
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default().message_lock_timeout(Duration::from_millis(300))
    }
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        // Ignores its cancellation token, so renewals go on finding the lock lost.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        self.1.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_lost_lock_is_logged_once() {
    let logs = Logs::capture("bus_core=warn");
    let redis = TestRedis::start().unwrap();
    let transport = common::transport(&redis).await;
    let sleeps = Arc::new(Sleeps(AtomicU32::new(0), AtomicU32::new(0)));
    let running = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(&sleeps))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    running.bus().send(&Work { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || sleeps.0.load(Ordering::SeqCst)
            == 1)
        .await
    );
    // The lock vanishes under the running handler (as when another consumer recovered it).
    // (A fresh message is held in a lease: its lock is the lease's entry in `leases`.)
    let keys = transport.keys(&Source::queue("work").unwrap());
    let mut removed = 0;
    for locks in [&keys.inflight, &keys.leases] {
        let n: i64 = transport
            .client()
            .zremrangebyrank(locks, 0, -1)
            .await
            .unwrap();
        removed += n;
    }
    assert_eq!(removed, 1);
    // Renewal runs every 100 ms: several find the lock lost before the handler ends.
    assert!(
        eventually(Duration::from_secs(10), || !logs
            .matching("locks lost")
            .is_empty())
        .await
    );
    // The handler runs on for over a second: a dozen more renewals find the lock lost.
    assert!(
        eventually(Duration::from_secs(10), || sleeps.1.load(Ordering::SeqCst)
            == 1)
        .await
    );
    running.shutdown().await.unwrap();
    assert_eq!(logs.matching("locks lost").len(), 1, "{:#?}", logs.lines());
}

#[tokio::test]
async fn an_outage_is_logged_once_then_its_end() {
    let logs = Logs::capture("bus_core=debug");
    let mut server = RedisServer::start().unwrap();
    let config = bus_redis::RedisConfig::from_url(&server.url())
        .unwrap()
        .prefix("outage-logs")
        .command_timeout(Duration::from_secs(2));
    let transport = bus_redis::RedisTransport::connect(&config).await.unwrap();
    let running = Host::builder()
        .transport(transport)
        .command::<Work, _>(Arc::new(Fails))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    server.kill();
    // Several failed receives, each logged at debug only after the first warning.
    assert!(
        eventually_async(Duration::from_secs(20), || async {
            logs.matching("receiving still fails").len() >= 3
        })
        .await,
        "{:#?}",
        logs.lines()
    );
    server.restart().unwrap();
    assert!(
        eventually(Duration::from_secs(20), || !logs
            .matching("receiving works again")
            .is_empty())
        .await,
        "{:#?}",
        logs.lines()
    );
    running.shutdown().await.unwrap();
    let warnings: Vec<String> = logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("WARN") && l.contains("receiving failed"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
}
