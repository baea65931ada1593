//! Where flow control's promises are felt: at handler start, across consumer processes,
//! with prefetch on (its default) and handlers slow enough that prefetched messages wait.
//! Measured from the handlers' own start records (`CHAOS_TIMELINE=1`).
//!
//! - A per-key rate holds at handler start (a message counted when it was reserved into
//!   a prefetch buffer and started later escaped it).
//! - A pause stops prefetched messages within a second (they used to start when a
//!   handler slot freed, seconds later).
//! - A fleet breaker's probe taken by a host that has no breaker is judged (it used to
//!   stay unjudged, and the queue ran one message per lock timeout).

use std::collections::BTreeMap;
use std::process::Child;
use std::time::Duration;

mod common;

use bus_chaos::Job;
use bus_core::flow::{PerKey, RateLimit};
use bus_core::transport::{ConsumerOptions, Source};
use bus_core::{Message, ProcessingSettings, Transport};
use bus_redis::admin::Admin;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::{eventually, SyncClient, TestRedis};
use common::{backlog, bus, consumer_command, kill, now_ms, processed, timeline_fields};

/// Each handler run's job and start (ms since the epoch, the handler's clock).
fn starts(client: &mut SyncClient, prefix: &str) -> Vec<(u64, u64)> {
    timeline_fields(client, prefix)
        .into_iter()
        .map(|fields| (fields[0], fields[1]))
        .collect()
}

fn jobs() -> Source {
    Source::queue(<Job as Message>::NAME).unwrap()
}

async fn transport(redis: &TestRedis) -> RedisTransport {
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    RedisTransport::connect(&config).await.unwrap()
}

/// A consumer process with the default processing settings (8 handlers, 8 prefetched,
/// the 60 s lock), each handler awaiting `work_ms`, recording its start.
fn default_consumer(redis: &TestRedis, work_ms: u64) -> Child {
    let defaults = ProcessingSettings::default();
    consumer_command(
        &redis.url(),
        redis.namespace(),
        "record",
        defaults.message_lock_timeout.as_millis() as u64,
        defaults.dead_letter_delivery_limit,
    )
    .env("CHAOS_TIMELINE", "1")
    .env(
        "CHAOS_CONCURRENCY",
        defaults.max_concurrent_calls.to_string(),
    )
    .env("CHAOS_PREFETCH", defaults.prefetch_count.to_string())
    .env("CHAOS_WORK_MS", work_ms.to_string())
    .env("CHAOS_RECOVERY_MS", "default")
    .spawn()
    .expect("start chaos-consumer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_rate_holds_at_handler_start_with_prefetch_on() {
    const KEYS: u64 = 4;
    const PER_KEY: u64 = 25;
    const STARTS: usize = 5;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = Admin::new(transport(&redis).await);
    // Any number of a key may run at once (50), but five may start per second.
    let rate = RateLimit::new(STARTS as u32, Duration::from_secs(1)).unwrap();
    let order = PerKey::new(50).unwrap().rate(Some(rate));
    admin.order_per_key(&jobs(), Some(order)).await.unwrap();
    let bus = bus(&redis.url(), &prefix).await;
    // Job n is of key n % KEYS.
    for n in 0..KEYS * PER_KEY {
        bus.send_keyed(&Job { n }, &format!("k{}", n % KEYS))
            .await
            .unwrap();
    }
    // Three processes; handlers of a second keep every slot busy, so reserved messages
    // wait in the prefetch buffers for about as long as a window.
    let mut consumers: Vec<Child> = (0..3).map(|_| default_consumer(&redis, 1_000)).collect();
    let all = eventually(Duration::from_secs(90), || {
        processed(&mut client, &prefix) == (KEYS * PER_KEY) as i64
    })
    .await;
    for child in &mut consumers {
        kill(child);
    }
    assert!(all, "processed {}", processed(&mut client, &prefix));
    let mut per_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for (n, start) in starts(&mut client, &prefix) {
        per_key.entry(n % KEYS).or_default().push(start);
    }
    let mut closest = u64::MAX;
    for (key, mut starts) in per_key {
        starts.sort_unstable();
        for window in starts.windows(STARTS + 1) {
            let span = window[STARTS] - window[0];
            closest = closest.min(span);
            assert!(
                span >= 1_000,
                "k{key}: {} handler starts within {span} ms, against {STARTS} per second: {starts:?}",
                STARTS + 1
            );
        }
    }
    println!("per-key rate 5/s: the closest 6 starts of a key spanned {closest} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_stops_prefetched_messages_within_a_second() {
    const JOBS: u64 = 200;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = Admin::new(transport(&redis).await);
    let bus = bus(&redis.url(), &prefix).await;
    common::send_jobs(&bus, JOBS).await;
    // Handlers of 3 s: each process runs 8 and holds 8 more prefetched.
    let mut consumers: Vec<Child> = (0..2).map(|_| default_consumer(&redis, 3_000)).collect();
    assert!(
        eventually(Duration::from_secs(30), || backlog(&mut client, &prefix)[1]
            == 32)
        .await,
        "the consumers never held their handlers and prefetch full"
    );
    let paused_at = now_ms();
    admin.pause(&jobs()).await.unwrap();
    // Everything running finishes (3 s) and nothing starts: in flight drains to 0.
    let drained = eventually(Duration::from_secs(15), || {
        backlog(&mut client, &prefix)[1] == 0
    })
    .await;
    // And stays paused a little longer: what was prefetched never starts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for child in &mut consumers {
        kill(child);
    }
    assert!(drained, "messages stayed in flight on a paused queue");
    let late: Vec<(u64, u64)> = starts(&mut client, &prefix)
        .into_iter()
        .filter(|&(_, start)| start > paused_at + 1_000)
        .collect();
    assert!(
        late.is_empty(),
        "{} handlers started more than 1 s after the pause: {late:?}",
        late.len()
    );
    let waiting = backlog(&mut client, &prefix)[0];
    assert!(
        waiting as u64 + processed(&mut client, &prefix) as u64 >= JOBS - 16,
        "prefetched messages were neither run nor returned: {waiting} ready"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_breaker_probe_taken_by_a_host_without_a_breaker_is_judged() {
    const JOBS: u64 = 50;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let transport = transport(&redis).await;
    let admin = Admin::new(transport.clone());
    common::send_jobs(&bus(&redis.url(), &prefix).await, JOBS).await;
    // Another client (a foreign consumer, or a host whose processor has a fleet breaker)
    // trips the queue's fleet breaker for a second.
    let tripper = transport
        .consumer(&jobs(), ConsumerOptions::new(Duration::from_secs(60), 5))
        .await
        .unwrap();
    tripper
        .extras()
        .fleet_breaker
        .expect("a fleet breaker")
        .trip(Duration::from_secs(1))
        .await
        .unwrap();
    tripper.close().await.unwrap();
    let tripped_at = now_ms();
    // A host whose processor has no breaker, on the defaults (its lock: 60 s): it takes
    // the probe when the cool-down ends, and its ack closes the breaker for everyone.
    let mut consumer = default_consumer(&redis, 10);
    let all = eventually(Duration::from_secs(20), || {
        processed(&mut client, &prefix) == JOBS as i64
    })
    .await;
    kill(&mut consumer);
    assert!(
        all,
        "{} of {JOBS} processed 20 s after a 1 s trip: the probe was never judged",
        processed(&mut client, &prefix)
    );
    let first = starts(&mut client, &prefix)
        .into_iter()
        .map(|(_, start)| start)
        .min()
        .unwrap();
    assert!(
        first + 50 >= tripped_at + 1_000,
        "a handler started {} ms after the trip, before the cool-down ended",
        first.saturating_sub(tripped_at)
    );
    assert_eq!(admin.flow(&jobs()).await.unwrap().breaker_until_ms, None);
}
