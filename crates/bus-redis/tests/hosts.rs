//! Host heartbeats (docs/redis-layout.md, "Host heartbeats"): a running
//! host's record in Redis with default settings, its handlers in flight counted, removed
//! at a graceful stop; a host that stops reporting shown lost, then dropped.
//!
//! Per-type timing (docs/redis-layout.md, "Per-type timing"): a real
//! host's counts and histograms of two types as stored, with default settings; a report
//! retried counted once; the memory a type costs per minute.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::heartbeat::HostInfo;
use bus_core::timing::{TimingReport, TypeTiming};
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
        .extras()
        .host_reporter
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

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, bus_core::RedisCommand)]
#[bus(queue = "refused")]
struct Refused {
    n: u64,
}

/// Takes 30 ms per message.
struct Slow;

#[async_trait]
impl CommandProcessor<Work> for Slow {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        tokio::time::sleep(Duration::from_millis(30)).await;
        Ok(())
    }
}

/// Refuses every message: dead-lettered at once, a failed run each.
struct Refuse;

#[async_trait]
impl CommandProcessor<Refused> for Refuse {
    async fn process(&self, _: Refused, _: &Context) -> Result<(), ProcessError> {
        Err(ProcessError::dead_letter("refused by the test"))
    }
}

/// Every type's timing of the minutes around now, summed.
async fn timing_now(admin: &Admin) -> std::collections::BTreeMap<String, TypeTiming> {
    let minute = admin.redis_minute().await.unwrap();
    let mut sum = std::collections::BTreeMap::<String, TypeTiming>::new();
    for m in admin.timing(minute - 2, minute + 1).await.unwrap() {
        for (name, timing) in m.types {
            sum.entry(name).or_default().add(&timing);
        }
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_records_each_types_runs_and_durations_per_minute() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let admin = Admin::new(transport.clone());
    // Default settings: flushed every 10 s, kept 72 h.
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Slow)
        .command::<Refused, _>(Refuse)
        .build()
        .unwrap();
    let running = Running::start(host);
    for n in 0..5 {
        running.bus.send(&Work { n }).await.unwrap();
    }
    for n in 0..3 {
        running.bus.send(&Refused { n }).await.unwrap();
    }
    // Within one flush interval (10 s) of the runs, with the host still running.
    let recorded = eventually(WAIT, || {
        let admin = admin.clone();
        async move {
            let sum = timing_now(&admin).await;
            sum.get("work").is_some_and(|t| t.handled == 5)
                && sum.get("refused").is_some_and(|t| t.failed == 3)
        }
    })
    .await;
    let sum = timing_now(&admin).await;
    assert!(recorded, "{sum:#?}");
    let work = &sum["work"];
    let refused = &sum["refused"];
    assert_eq!((work.handled, work.failed), (5, 0), "{work:?}");
    assert_eq!((refused.handled, refused.failed), (0, 3), "{refused:?}");
    assert_eq!(work.buckets.iter().sum::<u64>(), 5);
    assert_eq!(refused.buckets.iter().sum::<u64>(), 3);
    // 30 ms each: nothing in the buckets up to 25 ms, a mean of at least 30 ms.
    let at_30_ms = TypeTiming::bucket_of(30_000);
    assert_eq!(work.buckets[..at_30_ms].iter().sum::<u64>(), 0, "{work:?}");
    assert!(work.mean_us() >= 30_000, "{work:?}");
    assert!(work.quantile_us(0.5) >= 50_000, "{work:?}");
    assert!(refused.mean_us() < work.mean_us(), "{refused:?}");
    // Each minute's hash expires 72 h after its minute.
    let minute = admin
        .timing(0, admin.redis_minute().await.unwrap())
        .await
        .unwrap();
    let key = keys::timing_minute(redis.namespace(), minute[0].minute);
    let ttl = redis.client().int(&["TTL", &key]).unwrap();
    assert!(
        (72 * 3600 - 180..=72 * 3600 + 60).contains(&ttl),
        "TTL {ttl}"
    );
    running.stop().await;
}

#[tokio::test]
async fn a_report_sent_twice_counts_once_and_a_type_costs_bounded_memory() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let admin = Admin::new(transport.clone());
    let reporter = transport
        .extras()
        .timing_reporter
        .expect("the Redis transport keeps timing");
    let minute = admin.redis_minute().await.unwrap();
    let mut one = TypeTiming::default();
    one.handled = 2;
    one.total_us = 3_000;
    one.buckets[TypeTiming::bucket_of(1_500)] = 2;
    let report = TimingReport::new("box:1:1:0", 1, minute, vec![("orders".into(), one.clone())]);
    reporter.record(&report).await.unwrap();
    // The same report again (a command retried after a reconnect): counted once.
    reporter.record(&report).await.unwrap();
    let next = TimingReport::new("box:1:1:0", 2, minute, vec![("orders".into(), one.clone())]);
    reporter.record(&next).await.unwrap();
    // Another host's first report adds to the same minute.
    let other = TimingReport::new("box:2:1:0", 1, minute, vec![("orders".into(), one)]);
    reporter.record(&other).await.unwrap();
    let read = admin.timing(minute, minute).await.unwrap();
    assert_eq!(read.len(), 1);
    let orders = &read[0].types["orders"];
    assert_eq!((orders.handled, orders.total_us), (6, 9_000), "{orders:?}");
    assert_eq!(orders.buckets[TypeTiming::bucket_of(1_500)], 6);

    // The bound docs/redis-layout.md states: at most 200 bytes per type and minute, for
    // type names of up to 40 bytes, every bucket used.
    let types = 100;
    let mut full = TypeTiming::default();
    full.handled = 3_000_000_000;
    full.failed = 1;
    full.total_us = u64::MAX / 4;
    full.buckets = [u64::from(u32::MAX); bus_core::timing::BUCKETS];
    let named: Vec<(String, TypeTiming)> = (0..types)
        .map(|i| {
            (
                format!("a-rather-long-message-type-name-{i:08}"),
                full.clone(),
            )
        })
        .collect();
    assert!(named.iter().all(|(n, _)| n.len() == 40));
    let busy = minute - 10;
    // Twice, so the counts pass the u32 maximum.
    for seq in 1..=2 {
        reporter
            .record(&TimingReport::new("box:3:1:0", seq, busy, named.clone()))
            .await
            .unwrap();
    }
    let key = keys::timing_minute(redis.namespace(), busy);
    let bytes = redis
        .client()
        .int(&["MEMORY", "USAGE", &key, "SAMPLES", "0"])
        .unwrap();
    assert!(bytes / types <= 200, "{bytes} bytes for {types} types");
    // Saturated, not wrapped.
    let read = admin.timing(busy, busy).await.unwrap();
    assert_eq!(read[0].types.len(), types as usize);
    let first = read[0].types.values().next().unwrap();
    assert_eq!(first.handled, u64::from(u32::MAX));
    assert_eq!(first.failed, 2);
    assert_eq!(first.buckets[0], u64::from(u32::MAX));

    // A malformed record is refused before anything is written.
    redis
        .client()
        .int(&[
            "HSET",
            &keys::timing_minute(redis.namespace(), minute),
            "junk",
            "x",
        ])
        .unwrap();
    let mut junk = TypeTiming::default();
    junk.handled = 1;
    let refused = reporter
        .record(&TimingReport::new(
            "box:1:1:0",
            3,
            minute,
            vec![("junk".into(), junk)],
        ))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    let read = admin.timing(minute, minute).await.unwrap();
    assert_eq!(read[0].types["orders"].handled, 6);
    assert!(!read[0].types.contains_key("junk"));
}
