//! Host heartbeats (issue 21 point 1; docs/redis-layout.md, "Host heartbeats"): a running
//! host's record in Redis with default settings, its handlers in flight counted, removed
//! at a graceful stop; a host that stops reporting shown lost, then dropped.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::heartbeat::HostInfo;
use bus_core::{CommandProcessor, Context, Host, ProcessError, Transport};
use bus_redis::admin::Admin;
use bus_redis::keys;
use bus_test_redis::bus::Running;
use bus_test_redis::TestRedis;
use common::{eventually, transport, Work};
use serde_json::json;
use tokio::sync::Semaphore;

const WAIT: Duration = Duration::from_secs(30);

/// Holds each message until the test adds a permit.
struct Held(Arc<Semaphore>);

#[async_trait]
impl CommandProcessor<Work> for Held {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        let permit = self.0.acquire().await.map_err(ProcessError::retry)?;
        permit.forget();
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_host_reports_itself_and_its_handlers_in_flight_then_leaves() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let admin = Admin::new(transport.clone());
    let release = Arc::new(Semaphore::new(0));
    // Default settings: a beat every 5 s, 8 concurrent calls.
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Held(Arc::clone(&release)))
        .build()
        .unwrap();
    let running = Running::start(host);
    for n in 0..2 {
        running.bus.send(&Work { n }).await.unwrap();
    }

    let reported = eventually(WAIT, || {
        let admin = admin.clone();
        async move {
            let seen = admin.hosts().await.unwrap();
            seen.len() == 1 && seen[0].info.in_flight == 2
        }
    })
    .await;
    // The handlers are still held: the figures stay as they were reported.
    let seen = admin.hosts().await.unwrap();
    assert!(reported, "hosts: {seen:#?}");
    let host = &seen[0];
    assert!(!host.lost, "{host:#?}");
    assert_eq!(host.info.pid, std::process::id());
    assert_eq!(host.info.queues, vec!["work".to_owned()]);
    assert_eq!(host.info.concurrency, 8);
    assert_eq!(host.info.interval_ms, 5000);
    assert_eq!(host.info.version, env!("CARGO_PKG_VERSION"));
    assert!(host.info.id.contains(&format!(":{}:", std::process::id())));
    assert!(host.seen_ago_ms < 10_000, "{host:#?}");
    // The record expires on its own: 60 intervals after the last beat.
    let ttl = redis
        .client()
        .int(&["PTTL", &keys::hosts_info(redis.namespace())])
        .unwrap();
    assert!((1..=300_000).contains(&ttl), "PTTL {ttl}");

    release.add_permits(2);
    running.stop().await;
    assert!(
        admin.hosts().await.unwrap().is_empty(),
        "a stopped host leaves"
    );
    let seen_left = redis
        .client()
        .int(&["ZCARD", &keys::hosts_seen(redis.namespace())])
        .unwrap();
    assert_eq!(seen_left, 0);
}

#[tokio::test]
async fn a_host_that_stops_reporting_is_lost_then_dropped() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let admin = Admin::new(transport.clone());
    let reporter = transport
        .host_reporter()
        .expect("the Redis transport reports");
    // A short interval (the knob): lost after 200 ms of silence, dropped after 6 s.
    let info: HostInfo = serde_json::from_value(json!({
        "id": "box:42:1", "hostname": "box", "pid": 42, "version": "9.9.9",
        "queues": ["work"], "concurrency": 3, "in_flight": 1,
        "started_at_ms": 1, "interval_ms": 100,
    }))
    .unwrap();
    reporter.report(&info).await.unwrap();
    // Another writer's record that is no host's JSON is skipped, not an error.
    redis
        .client()
        .int(&["HSET", &keys::hosts_info(redis.namespace()), "junk", "{"])
        .unwrap();

    let lost = eventually(WAIT, || {
        let admin = admin.clone();
        let info = info.clone();
        async move {
            let hosts = admin.hosts().await.unwrap();
            hosts.len() == 1 && hosts[0].lost && hosts[0].info == info
        }
    })
    .await;
    assert!(lost, "{:#?}", admin.hosts().await.unwrap());
    let dropped = eventually(WAIT, || {
        let admin = admin.clone();
        async move { admin.hosts().await.unwrap().is_empty() }
    })
    .await;
    assert!(dropped, "{:#?}", admin.hosts().await.unwrap());
}
