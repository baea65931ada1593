//! Partitioned queues on a real redis-server: sends spread round robin or by key, one
//! consumer drains every shard without starving any, and acks, renewals, recovery and
//! isolation work per shard.

mod common;

use bus_core::transport::ConsumerExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{ConsumerOptions, Hold, Source, Want};
use bus_core::{
    Bus, BusConfig, CommandProcessor, Context, Host, ProcessError, ProcessingSettings, Transport,
};
use bus_redis::keys::{self, QueueKeys};
use bus_redis::{shard_of_key, RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;
use common::{eventually, Running, Work};
use fred::prelude::{HashesInterface, ListInterface};
use tokio_util::sync::CancellationToken;

async fn partitioned(redis: &TestRedis, shards: u16) -> RedisTransport {
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace())
        .partitions("work", shards);
    RedisTransport::connect(&config).await.unwrap()
}

fn bus(transport: &RedisTransport) -> Bus {
    Bus::new(transport.clone(), BusConfig::default())
}

/// The `n` of every envelope on a ready list, head first.
async fn ready_ns(transport: &RedisTransport, ready: &str) -> Vec<u64> {
    let envelopes: Vec<String> = transport.client().lrange(ready, 0, -1).await.unwrap();
    envelopes
        .iter()
        .map(|e| {
            let envelope: serde_json::Value = serde_json::from_str(e).unwrap();
            envelope["body"]["n"].as_u64().unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_spread_round_robin_over_the_shards_and_a_batch_stays_whole() {
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, 3).await;
    let bus = bus(&transport);
    for n in 0..30 {
        bus.send(&Work { n }).await.unwrap();
    }
    let shards = transport.shard_keys(&Source::queue("work").unwrap());
    assert_eq!(shards.len(), 3);
    // The producer recorded the shard count, for management, before any consumer ran.
    let recorded: Option<i64> = transport
        .client()
        .hget(keys::partition_registry(redis.namespace()), "work")
        .await
        .unwrap();
    assert_eq!(recorded, Some(3));
    let mut seen = Vec::new();
    for (shard, keys) in shards.iter().enumerate() {
        assert_eq!(
            keys.ready,
            format!("{}:{{work:{shard}}}:ready", redis.namespace())
        );
        let ns = ready_ns(&transport, &keys.ready).await;
        assert_eq!(ns.len(), 10, "shard {shard}: {ns:?}");
        // Turn by turn: shard i got every third send, in order.
        assert!(
            ns.windows(2).all(|w| w[1] == w[0] + 3),
            "shard {shard}: {ns:?}"
        );
        seen.extend(ns);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..30).collect::<Vec<_>>());
    // The unpartitioned key names are not used.
    let plain = QueueKeys::ready_of(redis.namespace(), &Source::queue("work").unwrap());
    assert_eq!(transport.client().llen::<i64, _>(&plain).await.unwrap(), 0);

    let batch: Vec<Work> = (100..107).map(|n| Work { n }).collect();
    bus.send_batch(&batch).await.unwrap();
    let mut whole = 0;
    for keys in &shards {
        let ns = ready_ns(&transport, &keys.ready).await;
        let of_batch: Vec<u64> = ns.into_iter().filter(|&n| n >= 100).collect();
        if !of_batch.is_empty() {
            assert_eq!(of_batch, (100..107).collect::<Vec<_>>());
            whole += 1;
        }
    }
    assert_eq!(whole, 1, "the batch went whole to one shard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_sends_go_to_the_fnv1a_shard_of_their_key_every_time() {
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, 3).await;
    let bus = bus(&transport);
    let key_of = |n: u64| format!("customer-{}", n % 20);
    for n in 0..200 {
        bus.send_keyed(&Work { n }, &key_of(n)).await.unwrap();
    }
    let shards = transport.shard_keys(&Source::queue("work").unwrap());
    let mut used = [false; 3];
    for (shard, keys) in shards.iter().enumerate() {
        for n in ready_ns(&transport, &keys.ready).await {
            // The documented hash, computed here independently of the transport.
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for byte in key_of(n).bytes() {
                hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
            assert_eq!(hash % 3, shard as u64, "message {n} with key {}", key_of(n));
            assert_eq!(shard_of_key(key_of(n).as_bytes(), 3), shard as u16);
            used[shard] = true;
        }
    }
    assert_eq!(used, [true; 3], "20 keys use every shard");
}

/// Records the `n` of each message in the order handled.
#[derive(Default)]
struct Order(Mutex<Vec<u64>>);

#[async_trait]
impl CommandProcessor<Work> for Arc<Order> {
    async fn process(&self, work: Work, _: &Context) -> Result<(), ProcessError> {
        self.0.lock().unwrap().push(work.n);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(8)
            .prefetch_count(8)
    }
}

/// A partition key that lands on `shard` of 3.
fn key_on(shard: u16) -> String {
    (0..)
        .map(|k| format!("key-{k}"))
        .find(|key| shard_of_key(key.as_bytes(), 3) == shard)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooded_shard_does_not_starve_the_others() {
    const FLOOD: u64 = 5_000;
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, 3).await;
    let bus = bus(&transport);
    let flood: Vec<Work> = (0..FLOOD).map(|n| Work { n }).collect();
    for chunk in flood.chunks(1_000) {
        bus.send_batch_keyed(chunk, &key_on(0)).await.unwrap();
    }
    let few: Vec<Work> = (0..5).map(|n| Work { n: FLOOD + n }).collect();
    bus.send_batch_keyed(&few, &key_on(2)).await.unwrap();

    let order = Arc::new(Order::default());
    let host = Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(&order))
        .build()
        .unwrap();
    let running = Running::start(host);
    let all = (FLOOD + 5) as usize;
    assert!(
        eventually(Duration::from_secs(60), || async {
            order.0.lock().unwrap().len() == all
        })
        .await,
        "{} of {all} handled",
        order.0.lock().unwrap().len()
    );
    running.stop().await;
    let order = order.0.lock().unwrap();
    let positions: Vec<usize> = (FLOOD..FLOOD + 5)
        .map(|n| order.iter().position(|&m| m == n).unwrap())
        .collect();
    // Fair shares: the few come within the first receives, not after the flood.
    eprintln!("the few were handled at positions {positions:?}");
    assert!(
        positions.iter().all(|&p| p < 100),
        "the few were handled at positions {positions:?} of {all}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_name_their_shard_and_recovery_works_per_shard() {
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, 3).await;
    let bus = bus(&transport);
    for n in 0..6 {
        bus.send(&Work { n }).await.unwrap();
    }
    let source = Source::queue("work").unwrap();
    // Recovered every 100 ms: a consumer silent for 1.3 s is gone.
    let options = ConsumerOptions::new(Duration::from_millis(300), 5)
        .recovery_interval(Duration::from_millis(100));
    let holder = transport.consumer(&source, options.clone()).await.unwrap();
    // The consumer recorded the queue's partitions for management and other producers.
    let recorded: Option<i64> = transport
        .client()
        .hget(keys::partition_registry(redis.namespace()), "work")
        .await
        .unwrap();
    assert_eq!(recorded, Some(3));

    let stop = CancellationToken::new();
    let held = Mutex::new(Vec::new());
    assert!(
        eventually(Duration::from_secs(5), || async {
            let got = holder.take(6, &stop).await.unwrap();
            let mut held = held.lock().unwrap();
            held.extend(got);
            held.len() == 6
        })
        .await
    );
    let held = held.into_inner().unwrap();
    let mut per_shard = [0; 3];
    for delivery in &held {
        let receipt = &delivery.receipt;
        assert!(receipt.key().starts_with(b"~"), "{receipt:?}");
        per_shard[usize::from(receipt.shard)] += 1;
    }
    assert_eq!(per_shard, [2, 2, 2]);
    let receipts: Vec<_> = held.iter().map(|d| d.receipt.clone()).collect();
    assert_eq!(holder.renew(&receipts).await.unwrap(), vec![true; 6]);
    // Ack three (one per shard); the other three are abandoned: their holder is gone, as
    // after a crash, and another consumer recovers them.
    let mut acked = Vec::new();
    let mut abandoned = Vec::new();
    for receipt in receipts {
        let shard = receipt.shard;
        if acked
            .iter()
            .any(|r: &bus_core::transport::Receipt| r.shard == shard)
        {
            abandoned.push(receipt);
        } else {
            acked.push(receipt);
        }
    }
    holder.ack(&acked).await.unwrap();
    holder.close().await.unwrap();
    let consumer = transport.consumer(&source, options).await.unwrap();
    let recovered = std::sync::atomic::AtomicUsize::new(0);
    let total = || recovered.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        eventually(Duration::from_secs(5), || async {
            let n = consumer.recover().await.unwrap();
            recovered.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
            total() == 3
        })
        .await,
        "{} recovered",
        total()
    );
    // They were held with others: each comes back alone, counted as a second delivery.
    let mut again = Vec::new();
    let held = consumer.receive(Want::new(10), &stop).await.unwrap();
    assert!(held.deliveries.is_empty());
    assert_eq!(held.hold, Hold::Isolation);
    // Bounded: a transport that never delivered them would fail, not hang.
    for _ in 0..20 {
        if let Some(delivery) = consumer.take_alone().await.unwrap() {
            assert_eq!(delivery.delivery_count, 2);
            consumer
                .ack(std::slice::from_ref(&delivery.receipt))
                .await
                .unwrap();
            again.push(delivery);
        }
        let regrouped = consumer.take(10, &stop).await.unwrap();
        assert!(
            regrouped.is_empty(),
            "a recovered message regrouped with others"
        );
    }
    assert_eq!(again.len(), 3);
    // Renewing a lost lock says so, per receipt.
    assert_eq!(holder.renew(&abandoned).await.unwrap(), vec![false; 3]);
    for keys in transport.shard_keys(&source) {
        let stored: i64 = transport.client().hlen(&keys.msgs).await.unwrap();
        assert_eq!(stored, 0, "{} still holds messages", keys.msgs);
    }
    // A receipt of a shard this queue does not have is refused with a clear error, not a
    // panic.
    let foreign = bus_core::transport::Receipt {
        shard: 7,
        ..bus_core::transport::Receipt::stored(bytes::Bytes::from_static(b"~1"), 1)
    };
    let error = consumer.ack(&[foreign]).await.unwrap_err();
    let error = bus_core::ErrorChain(&error).to_string();
    assert!(error.contains("receipt"), "{error}");
    consumer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_partitioned_consumer_wakes_for_any_shard() {
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, 3).await;
    let source = Source::queue("work").unwrap();
    let consumer = transport
        .consumer(&source, ConsumerOptions::new(Duration::from_secs(5), 5))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let bus = bus(&transport);
    for shard in [2, 0, 1, 2] {
        let sender = bus.clone();
        let key = key_on(shard);
        let send = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            sender.send_keyed(&Work { n: 1 }, &key).await.unwrap();
        });
        let started = tokio::time::Instant::now();
        let got = consumer.take(5, &stop).await.unwrap();
        send.await.unwrap();
        assert_eq!(got.len(), 1, "shard {shard}");
        assert_eq!(got[0].receipt.shard, shard);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        consumer.ack(&[got[0].receipt.clone()]).await.unwrap();
    }
    // Shutdown ends a wait at once.
    stop.cancel();
    let started = tokio::time::Instant::now();
    assert!(consumer.take(5, &stop).await.unwrap().is_empty());
    assert!(started.elapsed() < Duration::from_millis(500));
    consumer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_partitions_are_refused_at_connect() {
    let redis = TestRedis::start().unwrap();
    for (queue, shards) in [("work", 0), ("work", 257), ("bad name", 2)] {
        let config = RedisConfig::from_url(&redis.url())
            .unwrap()
            .partitions(queue, shards);
        let error = RedisTransport::connect(&config)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("partitions"), "{error}");
    }
}

/// A producer in Python that knows only the documented layout and hash puts each keyed
/// message on the shard the Rust transport computes, and a partitioned host consumes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_producer_computes_the_same_shards() {
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, 3).await;
    let mut keys: Vec<String> = (0..30).map(|k| format!("customer-{k}")).collect();
    keys.push("clé-✓".to_owned());
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/keyed_producer.py");
    let interpreter = std::env::var("BUS_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let run = tokio::process::Command::new(&interpreter)
        .arg(&script)
        .args([&redis.url(), redis.namespace(), "work", "3"])
        .args(&keys)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONIOENCODING", "utf-8")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the Python producer finishes")
        .unwrap_or_else(|e| panic!("cannot run `{interpreter}` (Python 3 is needed): {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), keys.len());
    let mut used = [false; 3];
    for line in &lines {
        let key = line["key"].as_str().unwrap();
        let shard = line["shard"].as_u64().unwrap();
        assert_eq!(
            u64::from(shard_of_key(key.as_bytes(), 3)),
            shard,
            "key {key}"
        );
        used[shard as usize] = true;
    }
    assert_eq!(used, [true; 3]);

    let order = Arc::new(Order::default());
    let host = Host::builder()
        .transport(transport)
        .command::<Work, _>(Arc::clone(&order))
        .build()
        .unwrap();
    let running = Running::start(host);
    assert!(
        eventually(Duration::from_secs(20), || async {
            order.0.lock().unwrap().len() == keys.len()
        })
        .await
    );
    running.stop().await;
    let mut handled = order.0.lock().unwrap().clone();
    handled.sort_unstable();
    assert_eq!(handled, (0..keys.len() as u64).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_busy_shard_still_fills_a_receive() {
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, 3).await;
    let few: Vec<Work> = (0..20).map(|n| Work { n }).collect();
    bus(&transport)
        .send_batch_keyed(&few, &key_on(1))
        .await
        .unwrap();
    let consumer = transport
        .consumer(
            &Source::queue("work").unwrap(),
            ConsumerOptions::new(Duration::from_secs(5), 5),
        )
        .await
        .unwrap();
    let stop = CancellationToken::new();
    for max in [9, 2, 1] {
        let got = consumer.take(max, &stop).await.unwrap();
        assert_eq!(got.len(), max, "asked for {max}");
        assert!(got.iter().all(|d| d.receipt.shard == 1));
    }
    consumer.close().await.unwrap();
}

/// Median and p99 (ms) of send-to-receive on an idle consumer of `work` with `shards`.
async fn wake_ups(shards: u16) -> (f64, f64) {
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, shards).await;
    let consumer = transport
        .consumer(
            &Source::queue("work").unwrap(),
            ConsumerOptions::new(Duration::from_secs(5), 5),
        )
        .await
        .unwrap();
    let (bus, stop) = (bus(&transport), CancellationToken::new());
    let mut waits = Vec::new();
    for n in 0..200 {
        let sender = bus.clone();
        let send = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let at = tokio::time::Instant::now();
            sender.send(&Work { n }).await.unwrap();
            at
        });
        let mut got = Vec::new();
        for _ in 0..5 {
            got = consumer.take(10, &stop).await.unwrap();
            if !got.is_empty() {
                break;
            }
        }
        let received = tokio::time::Instant::now();
        waits.push((received - send.await.unwrap()).as_secs_f64() * 1e3);
        assert_eq!(got.len(), 1);
        consumer.ack(&[got[0].receipt.clone()]).await.unwrap();
    }
    consumer.close().await.unwrap();
    waits.sort_by(f64::total_cmp);
    (waits[100], waits[197])
}

/// The idle wake-up of a 3-shard queue against a plain one in the same run (printed with
/// `--nocapture`; the bound only catches a wait for the idle poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queue_wakes_up_about_as_fast_as_a_plain_one() {
    let (plain, plain_p99) = wake_ups(1).await;
    let (sharded, sharded_p99) = wake_ups(3).await;
    eprintln!(
        "idle wake-up, send to receive: 1 shard median {plain:.2} ms p99 {plain_p99:.2} ms; \
         3 shards median {sharded:.2} ms p99 {sharded_p99:.2} ms"
    );
    assert!(sharded < 50.0, "median {sharded:.2} ms");
}

/// A fleet circuit breaker on a partitioned queue: a trip is stored on every shard, so
/// every shard holds back; after the cool-down each shard lets one probe through (the
/// consumer reports the probe); holding a probe's slot touches only its shard; a close
/// clears every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_breaker_holds_every_shard_and_each_lets_one_probe_through() {
    const SHARDS: u16 = 3;
    let redis = TestRedis::start().unwrap();
    let transport = partitioned(&redis, SHARDS).await;
    for shard in 0..SHARDS {
        let batch: Vec<Work> = (0..5).map(|n| Work { n }).collect();
        bus(&transport)
            .send_batch_keyed(&batch, &key_on(shard))
            .await
            .unwrap();
    }
    let source = Source::queue("work").unwrap();
    let consumer = transport
        .consumer(&source, ConsumerOptions::new(Duration::from_secs(30), 5))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let admin = bus_redis::admin::Admin::new(transport.clone());
    let flows: Vec<String> = (0..SHARDS)
        .map(|i| QueueKeys::shard(redis.namespace(), "work", i).flow)
        .collect();

    consumer
        .extras()
        .fleet_breaker
        .expect("a fleet breaker")
        .trip(Duration::from_secs(60))
        .await
        .unwrap();
    for flow in &flows {
        let until: Option<String> = transport
            .client()
            .hget(flow, "breaker_until")
            .await
            .unwrap();
        assert!(until.is_some(), "{flow} not tripped");
    }
    assert!(admin
        .flow(&source)
        .await
        .unwrap()
        .breaker_until_ms
        .is_some());
    let held = consumer.receive(Want::new(10), &stop).await.unwrap();
    assert!(held.deliveries.is_empty());
    assert!(
        matches!(held.hold, Hold::BreakerOpen { .. }),
        "{:?}",
        held.hold
    );

    // The cool-down over on every shard (moved back by hand): one probe per shard.
    for flow in &flows {
        let _: i64 = transport
            .client()
            .hset(flow, ("breaker_until", 1))
            .await
            .unwrap();
    }
    let received = consumer.receive(Want::new(10), &stop).await.unwrap();
    let probes = received.deliveries;
    assert_eq!(probes.len(), SHARDS as usize, "{probes:?}");
    let mut shards: Vec<u16> = probes.iter().map(|d| d.receipt.shard).collect();
    shards.sort_unstable();
    assert_eq!(shards, [0, 1, 2]);
    assert_eq!(received.hold, Hold::Probe);
    assert!(
        consumer.take(10, &stop).await.unwrap().is_empty(),
        "a second probe"
    );

    // Renewing shard 1's probe holds only shard 1's slot (each slot set to 1 ms first).
    for flow in &flows {
        let _: i64 = transport
            .client()
            .hset(flow, ("breaker_probe", 1))
            .await
            .unwrap();
    }
    let one = probes.iter().find(|d| d.receipt.shard == 1).unwrap();
    consumer
        .renew(std::slice::from_ref(&one.receipt))
        .await
        .unwrap();
    let now = bus_core::transport::now_ms();
    for (i, flow) in flows.iter().enumerate() {
        let slot: u64 = transport
            .client()
            .hget(flow, "breaker_probe")
            .await
            .unwrap();
        let extended = slot + 1_000 >= now + 30_000;
        assert_eq!(extended, i == 1, "shard {i}: slot {slot}, now {now}");
    }

    // Each probe's ack closes its shard's breaker: every shard flows again.
    let receipts: Vec<_> = probes.iter().map(|d| d.receipt.clone()).collect();
    consumer.ack(&receipts).await.unwrap();
    assert_eq!(admin.flow(&source).await.unwrap().breaker_until_ms, None);
    let rest = consumer.receive(Want::new(20), &stop).await.unwrap();
    assert_eq!(rest.deliveries.len(), 3 * 5 - 3);
    assert_eq!(rest.hold, Hold::None);

    // An operator's close (`bus close-breaker`) clears every shard as well.
    consumer
        .extras()
        .fleet_breaker
        .expect("a fleet breaker")
        .trip(Duration::from_secs(60))
        .await
        .unwrap();
    admin.close_breaker(&source).await.unwrap();
    for flow in &flows {
        let fields: Vec<Option<String>> = transport
            .client()
            .hmget(flow, vec!["breaker_until", "breaker_probe"])
            .await
            .unwrap();
        assert_eq!(fields, [None, None], "{flow} still holds its trip");
    }
    consumer.close().await.unwrap();
}
