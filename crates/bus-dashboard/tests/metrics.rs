//! `bus metrics` against a real Redis: a scrape of `/metrics` shows what the test did
//! (K ready, M dead, delayed, in flight with expired locks, a subscription's copies).

mod common;

use bus_core::transport::ConsumerExt;
use bus_core::transport::{ConsumerOptions, Source};
use bus_core::{RedisCommand, RedisEvent, Transport};
use bus_dashboard::QueueMetrics;
use common::{eventually, http, setup, Payment, WAIT};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "slow")]
struct Slow {
    n: u64,
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "refunds")]
struct Refund {
    n: u64,
}

/// `name{labels} value` lines of a scrape, keyed by `name{labels}`.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(series, value)| (series.to_owned(), value.parse().unwrap()))
        .collect()
}

fn queue(metric: &str, queue: &str) -> String {
    format!("{metric}{{messaging_system=\"bus\",messaging_destination_name=\"{queue}\"}}")
}

fn subscription(metric: &str, topic: &str, name: &str) -> String {
    format!(
        "{metric}{{messaging_system=\"bus\",messaging_destination_name=\"{topic}\",\
         messaging_destination_subscription_name=\"{name}\"}}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_shows_ready_dead_delayed_in_flight_and_expired_locks() {
    let s = setup().await;
    let payments = Source::queue("payments").unwrap();
    let keys = s.transport.keys(&payments);

    // M = 3 dead letters, through a host whose handler refuses every payment.
    let host = s.failing_host().await;
    s.bus
        .send_batch(&[Payment { n: 1 }, Payment { n: 2 }, Payment { n: 3 }])
        .await
        .unwrap();
    let dead = eventually(WAIT, || async { s.int("LLEN", &keys.dead) == 3 }).await;
    host.shutdown().await.unwrap();
    assert!(dead, "dead letters: {}", s.int("LLEN", &keys.dead));

    // K = 5 ready (no host runs now), one delayed by an hour.
    for n in 10..15 {
        s.bus.send(&Payment { n }).await.unwrap();
    }
    s.bus
        .send_delayed(&Payment { n: 99 }, Duration::from_secs(3600))
        .await
        .unwrap();

    // A consumer that takes 2 messages with a 100 ms lock and goes away without
    // settling them: 2 in flight, and once 100 ms pass, 2 expired locks.
    let slow = Source::queue("slow").unwrap();
    let consumer = s
        .transport
        .consumer(&slow, ConsumerOptions::new(Duration::from_millis(100), 5))
        .await
        .unwrap();
    s.bus
        .send_batch(&[Slow { n: 1 }, Slow { n: 2 }])
        .await
        .unwrap();
    let taken = consumer.take(2, &CancellationToken::new()).await.unwrap();
    assert_eq!(taken.len(), 2);
    consumer.close().await.unwrap();

    // A subscription's queue: two copies of two events.
    let mail = Source::subscription("refunds", "mail").unwrap();
    let sub = s
        .transport
        .consumer(&mail, ConsumerOptions::new(Duration::from_secs(60), 5))
        .await
        .unwrap();
    sub.close().await.unwrap();
    s.bus
        .publish_batch(&[Refund { n: 1 }, Refund { n: 2 }])
        .await
        .unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(QueueMetrics::new(s.transport.clone()).serve(listener));

    let scraped = std::sync::Mutex::new(String::new());
    let expired = eventually(WAIT, || async {
        let response = http(addr, "GET", "/metrics", &[], "").await;
        assert_eq!(response.status, 200, "{}", response.body);
        assert!(response
            .header("content-type")
            .unwrap()
            .starts_with("application/openmetrics-text"));
        let done = samples(&response.body).get(&queue("bus_queue_expired_lock_messages", "slow"))
            == Some(&2.0);
        *scraped.lock().unwrap() = response.body;
        done
    })
    .await;
    let last = scraped.into_inner().unwrap();
    assert!(expired, "no expired locks in:\n{last}");
    let m = samples(&last);
    let value = |series: String| {
        *m.get(&series)
            .unwrap_or_else(|| panic!("{series} missing from:\n{last}"))
    };
    // What the test did, and what Redis holds (read by the harness's own client).
    assert_eq!(value(queue("bus_queue_ready_messages", "payments")), 5.0);
    assert_eq!(s.int("LLEN", &keys.ready), 5);
    assert_eq!(
        value(queue("bus_queue_dead_letter_messages", "payments")),
        3.0
    );
    assert_eq!(value(queue("bus_queue_delayed_messages", "payments")), 1.0);
    assert_eq!(
        value(queue("bus_queue_in_flight_messages", "payments")),
        0.0
    );
    assert_eq!(
        value(queue("bus_queue_expired_lock_messages", "payments")),
        0.0
    );
    assert_eq!(value(queue("bus_queue_in_flight_messages", "slow")), 2.0);
    assert_eq!(value(queue("bus_queue_ready_messages", "slow")), 0.0);
    let age = value(queue("bus_queue_oldest_ready_age_seconds", "payments"));
    assert!((0.0..WAIT.as_secs_f64() * 2.0).contains(&age), "age {age}");
    assert_eq!(
        value(queue("bus_queue_oldest_ready_age_seconds", "slow")),
        0.0
    );
    assert_eq!(
        value(subscription("bus_queue_ready_messages", "refunds", "mail")),
        2.0
    );
    assert!(value("bus_queue_metrics_scrape_duration_seconds".to_owned()) > 0.0);
    assert!(last.contains("# TYPE bus_queue_dead_letter_messages gauge"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_fails_with_503_when_redis_is_gone() {
    // A server of its own (never a shared one): this test kills it.
    let mut server = bus_test_redis::RedisServer::start().unwrap();
    let config = bus_redis::RedisConfig::from_url(&server.url()).unwrap();
    let transport = bus_redis::RedisTransport::connect(&config).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = QueueMetrics::new(transport).timeout(Duration::from_secs(1));
    tokio::spawn(metrics.serve(listener));
    assert_eq!(http(addr, "GET", "/metrics", &[], "").await.status, 200);
    server.kill();
    let failed = eventually(WAIT, || async {
        let response = http(addr, "GET", "/metrics", &[], "").await;
        response.status == 503 && response.body.contains("did not answer within 1s")
    })
    .await;
    assert!(failed, "a scrape without Redis did not fail");
}

/// `bus metrics` exports each type's last complete minute (all hosts
/// added) from the hosts' per-type timing; the current minute is not exported yet.
#[tokio::test]
async fn a_scrape_shows_each_types_last_complete_minute() {
    use bus_core::timing::{TimingReport, TypeTiming};
    let s = setup().await;
    let admin = bus_redis::admin::Admin::new(s.transport.clone());
    let reporter = s.transport.extras().timing_reporter.unwrap();
    let mut timing = TypeTiming::default();
    timing.handled = 12;
    timing.failed = 3;
    timing.total_us = 15 * 20_000;
    timing.buckets[TypeTiming::bucket_of(20_000)] = 15;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(QueueMetrics::new(s.transport.clone()).serve(listener));
    let series = |metric: &str, extra: &str| {
        format!("{metric}{{messaging_system=\"bus\",bus_message_type=\"refund-issued\"{extra}}}")
    };
    // Two hosts' reports of the minute before the scrape's, and one of the current
    // minute; each round has reports of its own (sequence numbers), and it is tried
    // again should the clock turn a minute between writing and scraping.
    let mut seq = 0;
    let exported = eventually(WAIT, || {
        seq += 1;
        let (admin, reporter, timing) = (&admin, &reporter, &timing);
        let seq = seq;
        async move {
            let minute = admin.redis_minute().await.unwrap() - 1;
            let report = |host: &str, minute: u64, name: &str| {
                TimingReport::new(host, seq, minute, vec![(name.to_owned(), timing.clone())])
            };
            for host in ["a:1:1:0", "b:2:1:0"] {
                reporter
                    .record(&report(host, minute, "refund-issued"))
                    .await
                    .unwrap();
            }
            reporter
                .record(&report("c:3:1:0", minute + 1, "current-only"))
                .await
                .unwrap();
            let text = http(addr, "GET", "/metrics", &[], "").await.body;
            let values = samples(&text);
            // Every round adds 2 × 12 handled to its minute.
            values
                .get(&series("bus_message_type_handled_messages", ""))
                .is_some_and(|v| *v > 0.0 && v % 24.0 == 0.0)
                && values
                    .get(&series("bus_message_type_failed_messages", ""))
                    .is_some_and(|v| v % 6.0 == 0.0)
                && values.get(&series("bus_message_type_duration_mean_seconds", "")) == Some(&0.02)
                && values.get(&series(
                    "bus_message_type_duration_quantile_seconds",
                    ",quantile=\"0.99\"",
                )) == Some(&0.025)
                && !text.contains("current-only")
                && text.ends_with("# EOF\n")
        }
    })
    .await;
    let text = http(addr, "GET", "/metrics", &[], "").await.body;
    assert!(exported, "{text}");
}
