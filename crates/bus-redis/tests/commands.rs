//! Commands on Redis, where the layout matters: what is stored and left behind, locks,
//! recovery, garbage and stray references, and what an idle consumer costs. The semantics
//! every transport shares are checked by the conformance suite (`tests/conformance.rs`).

mod common;

use bus_core::transport::ConsumerExt;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::{ConsumerOptions, Hold, Source, Want};
use bus_core::{Backoff, CommandProcessor, Context, ProcessError, ProcessingSettings, Transport};
use bus_test_redis::TestRedis;
use common::{eventually, transport, Counts, Running, Work};
use fred::prelude::{HashesInterface, ListInterface};

#[derive(Default)]
struct Collect {
    seen: Mutex<Vec<u64>>,
}

#[async_trait]
impl CommandProcessor<Work> for Arc<Collect> {
    async fn process(&self, work: Work, _: &Context) -> Result<(), ProcessError> {
        self.seen.lock().unwrap().push(work.n);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(16)
            .prefetch_count(32)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_process_ack_leaves_nothing_behind() {
    let redis = TestRedis::start().unwrap();
    let collect = Arc::new(Collect::default());
    let host = bus_core::Host::builder()
        .transport(transport(&redis).await)
        .command::<Work, _>(Arc::clone(&collect))
        .build()
        .unwrap();
    let running = Running::start(host);
    let one = running.bus.send(&Work { n: 0 }).await.unwrap();
    let batch: Vec<Work> = (1..1000).map(|n| Work { n }).collect();
    let ids = running.bus.send_batch(&batch).await.unwrap();
    assert_eq!(ids.len(), 999);
    assert!(!ids.contains(&one));
    assert!(
        eventually(Duration::from_secs(30), || async {
            collect.seen.lock().unwrap().len() >= 1000
        })
        .await
    );
    // Acks are batched: wait for them to land.
    assert!(
        eventually(Duration::from_secs(10), || async {
            redis.counts("work") == Counts::default()
        })
        .await,
        "left behind: {:?}",
        redis.counts("work")
    );
    running.stop().await;
    let seen: HashSet<u64> = collect.seen.lock().unwrap().iter().copied().collect();
    assert_eq!(seen.len(), 1000);
    let deliveries: i64 = redis
        .client()
        .cmd(&[
            "HLEN",
            &bus_redis::keys::QueueKeys::new(redis.namespace(), &Source::queue("work").unwrap())
                .deliveries,
        ])
        .unwrap()
        .as_int()
        .unwrap();
    assert_eq!(deliveries, 0);
}

struct AlwaysFails(AtomicUsize);

#[async_trait]
impl CommandProcessor<Work> for Arc<AlwaysFails> {
    async fn process(&self, _: Work, ctx: &Context) -> Result<(), ProcessError> {
        let run = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Err(format!("failure {run} (delivery {})", ctx.delivery_count()).into())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .dead_letter_delivery_limit(4)
            .retry(Backoff::fixed(Duration::from_millis(20)))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_failing_handler_runs_the_limit_then_one_dead_letter() {
    let redis = TestRedis::start().unwrap();
    let failing = Arc::new(AlwaysFails(AtomicUsize::new(0)));
    let transport = transport(&redis).await;
    let host = bus_core::Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(&failing))
        .build()
        .unwrap();
    let running = Running::start(host);
    let id = running.bus.send(&Work { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            redis.counts("work").dead == 1
        })
        .await
    );
    running.stop().await;
    assert_eq!(failing.0.load(Ordering::SeqCst), 4);
    let c = redis.counts("work");
    assert_eq!(
        (c.ready, c.inflight, c.delayed, c.dead, c.msgs),
        (0, 0, 0, 1, 1)
    );

    let keys = transport.keys(&Source::queue("work").unwrap());
    let client = transport.client();
    let dead: Vec<String> = client.lrange(&keys.dead, 0, -1).await.unwrap();
    assert_eq!(dead.len(), 1);
    let key = dead[0].as_str();
    let info: String = client.hget(&keys.dead_info, key).await.unwrap();
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["reason"], "delivery_limit");
    let count: u32 = client.hget(&keys.deliveries, key).await.unwrap();
    assert_eq!(count, 4);
    let errors: String = client.hget(&keys.errors, key).await.unwrap();
    let errors: Vec<serde_json::Value> = serde_json::from_str(&errors).unwrap();
    let texts: Vec<&str> = errors
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "failure 1 (delivery 1)",
            "failure 2 (delivery 2)",
            "failure 3 (delivery 3)",
            "failure 4 (delivery 4)"
        ]
    );
    // The original envelope is kept, unchanged.
    let envelope: Vec<u8> = client
        .hget::<bytes::Bytes, _, _>(&keys.msgs, key)
        .await
        .unwrap()
        .to_vec();
    let envelope = bus_core::Envelope::decode(&envelope).unwrap();
    assert_eq!((envelope.id, envelope.message_type.as_str()), (id, "work"));
}

struct Slow {
    runs: AtomicUsize,
    lock: Duration,
}

#[async_trait]
impl CommandProcessor<Work> for Arc<Slow> {
    async fn process(&self, _: Work, ctx: &Context) -> Result<(), ProcessError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        tokio::select! {
            () = tokio::time::sleep(self.lock * 3) => Ok(()),
            () = ctx.cancellation().cancelled() => Err("lock lost".into()),
        }
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default().message_lock_timeout(self.lock)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_running_three_lock_timeouts_runs_once() {
    let redis = TestRedis::start().unwrap();
    let slow = Arc::new(Slow {
        runs: AtomicUsize::new(0),
        lock: Duration::from_millis(600),
    });
    // Two hosts on the same queue: a lost lock would hand the message to the other.
    let hosts: Vec<Running> = futures::future::join_all((0..2).map(|_| async {
        let host = bus_core::Host::builder()
            .transport(transport(&redis).await)
            .command::<Work, _>(Arc::clone(&slow))
            .recovery_interval(Duration::from_millis(100))
            .build()
            .unwrap();
        Running::start(host)
    }))
    .await;
    hosts[0].bus.send(&Work { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            redis.counts("work") == Counts::default()
        })
        .await
    );
    // Wait past another lock timeout and sweep: a redelivery would show up now.
    tokio::time::sleep(Duration::from_millis(800)).await;
    for host in hosts {
        host.stop().await;
    }
    assert_eq!(slow.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_consumers_recovering_the_same_expired_locks_requeue_each_once() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let bus = bus_core::Bus::new(transport.clone(), Default::default());
    let batch: Vec<Work> = (0..1000).map(|n| Work { n }).collect();
    bus.send_batch(&batch).await.unwrap();
    let source = Source::queue("work").unwrap();
    let options = ConsumerOptions::new(Duration::from_millis(200), 10);
    let first = transport.consumer(&source, options.clone()).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let taken = first.take(1000, &stop).await.unwrap();
    assert_eq!(taken.len(), 1000);
    assert_eq!(redis.counts("work").inflight, 1000);

    let mut sweepers = Vec::new();
    for _ in 0..4 {
        sweepers.push(transport.consumer(&source, options.clone()).await.unwrap());
    }
    // Each sweep handles at most 100; keep all four sweeping at once until none is left
    // (the locks expire 200 ms after the reserve).
    assert!(
        eventually(Duration::from_secs(20), || async {
            futures::future::try_join_all(sweepers.iter().map(|s| s.recover()))
                .await
                .unwrap();
            redis.counts("work").inflight == 0
        })
        .await
    );
    // Held together when their consumer died, they now wait to be delivered alone.
    let keys = transport.keys(&source);
    let suspects: Vec<String> = transport
        .client()
        .lrange(&keys.suspects, 0, -1)
        .await
        .unwrap();
    let unique: HashSet<&String> = suspects.iter().collect();
    assert_eq!((suspects.len(), unique.len()), (1000, 1000));
    let held = first.receive(Want::new(1000), &stop).await.unwrap();
    assert!(held.deliveries.is_empty());
    assert_eq!(held.hold, Hold::Isolation);
    // The lost delivery is counted: the next delivery of each is its second.
    for _ in 0..1000 {
        let alone = first.take_alone().await.unwrap().expect("a suspect");
        assert_eq!(alone.delivery_count, 2);
        first.ack(&[alone.receipt]).await.unwrap();
    }
    assert!(first.take_alone().await.unwrap().is_none());
    let after = first.receive(Want::peek(), &stop).await.unwrap();
    assert_eq!(after.hold, Hold::None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_queue_is_dead_lettered_while_good_messages_flow() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let collect = Arc::new(Collect::default());
    let host = bus_core::Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(&collect))
        .build()
        .unwrap();
    let running = Running::start(host);
    let keys = transport.keys(&Source::queue("work").unwrap());
    let client = transport.client();
    running.bus.send(&Work { n: 1 }).await.unwrap();
    let garbage: [&[u8]; 4] = [
        b"garbage",
        b"{\"v\":1,\"id\":",
        b"\xff\x00\xc1binary",
        b"{\"v\":1,\"id\":\"x\",\"type\":\"work\",\"sent\":0,\"body\":{\"n\":\"NaN\"}}",
    ];
    for g in garbage {
        let _: i64 = client.rpush(&keys.ready, g).await.unwrap();
    }
    // A foreign producer may push a plain envelope: it is processed.
    let foreign = br#"{"v":1,"id":"py-1","type":"work","sent":0,"headers":{},"body":{"n":2}}"#;
    let _: i64 = client.rpush(&keys.ready, &foreign[..]).await.unwrap();
    running.bus.send(&Work { n: 3 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            let c = redis.counts("work");
            c.dead == 4 && c.ready == 0 && c.inflight == 0
        })
        .await,
        "{:?}",
        redis.counts("work")
    );
    running.stop().await;
    let mut seen = collect.seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, [1, 2, 3]);
    let dead: Vec<String> = client.lrange(&keys.dead, 0, -1).await.unwrap();
    for id in &dead {
        let info: String = client.hget(&keys.dead_info, id).await.unwrap();
        assert!(info.contains("\"undecodable\""), "{info}");
        let kept: bytes::Bytes = client.hget(&keys.msgs, id).await.unwrap();
        assert!(
            garbage.contains(&&kept[..]),
            "dead letter {id} does not keep the element unchanged: {kept:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_host_stops_promptly() {
    let redis = TestRedis::start().unwrap();
    let host = bus_core::Host::builder()
        .transport(transport(&redis).await)
        .command::<Work, _>(Arc::new(Collect::default()))
        .build()
        .unwrap();
    let running = Running::start(host);
    assert!(
        eventually(Duration::from_secs(10), || async {
            blocked_clients(&redis) >= 1
        })
        .await
    );
    let asked = std::time::Instant::now();
    running.stop().await;
    let took = asked.elapsed();
    assert!(
        took < Duration::from_millis(300),
        "an idle Redis host took {took:?} to stop"
    );
}

struct Rejects(AtomicUsize);

#[async_trait]
impl CommandProcessor<Work> for Arc<Rejects> {
    async fn process(&self, _: Work, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(ProcessError::dead_letter("never valid"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_reference_to_a_dead_letter_is_not_delivered_again() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let rejects = Arc::new(Rejects(AtomicUsize::new(0)));
    let host = bus_core::Host::builder()
        .transport(transport.clone())
        .command::<Work, _>(Arc::clone(&rejects))
        .build()
        .unwrap();
    let running = Running::start(host);
    running.bus.send(&Work { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            redis.counts("work").dead == 1
        })
        .await
    );
    let keys = transport.keys(&Source::queue("work").unwrap());
    let client = transport.client();
    let dead: Vec<String> = client.lrange(&keys.dead, 0, -1).await.unwrap();
    // Someone pushes the dead letter's storage id back by hand, next to a good message.
    let _: i64 = client.rpush(&keys.ready, dead[0].as_str()).await.unwrap();
    running.bus.send(&Work { n: 2 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            redis.counts("work").dead == 2
        })
        .await
    );
    running.stop().await;
    assert_eq!(
        rejects.0.load(Ordering::SeqCst),
        2,
        "the dead letter ran again"
    );
    let c = redis.counts("work");
    assert_eq!((c.ready, c.inflight, c.dead), (0, 0, 2));
}

/// Connections blocked in a command (an idle consumer's wait).
fn blocked_clients(redis: &TestRedis) -> i64 {
    let info = redis.client().info("clients").unwrap();
    bus_test_redis::info_field(&info, "blocked_clients")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Calls Redis counted per command (commands run inside scripts included).
fn command_calls(redis: &TestRedis) -> std::collections::HashMap<String, i64> {
    let info = redis.client().cmd(&["INFO", "commandstats"]).unwrap();
    let info = String::from_utf8(info.as_bytes().unwrap().to_vec()).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_consumer_costs_redis_a_few_commands_a_second() {
    let redis = TestRedis::start().unwrap();
    let host = bus_core::Host::builder()
        .transport(transport(&redis).await)
        .command::<Work, _>(Arc::new(Collect::default()))
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            blocked_clients(&redis) >= 1
        })
        .await
    );
    let (before, started) = (command_calls(&redis), std::time::Instant::now());
    // Observing a cost over time needs time to pass; this measures a count, not a speed.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = command_calls(&redis);
    let seconds = started.elapsed().as_secs_f64();
    running.shutdown().await.unwrap();
    let delta =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    // What the consumer sends: scripts and the blocking wait (the INFO calls are ours).
    let sent = (delta("evalsha") + delta("blmove")) as f64 / seconds;
    let inside: i64 = after.keys().map(|name| delta(name)).sum::<i64>() - delta("info");
    println!(
        "idle consumer: {sent:.1} commands/s sent, {:.1} commands/s run inside Redis",
        inside as f64 / seconds
    );
    assert!(sent <= 4.0, "an idle consumer sent {sent:.1} commands/s");
}

/// A consumer whose only key is over its per-key rate waits for the window without
/// polling: reserve's wait hint says when the key's turn comes back, so the next message
/// starts on time after a handful of calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_over_its_rate_is_waited_for_not_polled() {
    const PER: Duration = Duration::from_millis(1500);
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let source = Source::queue("work").unwrap();
    let rate = bus_core::flow::RateLimit::new(1, PER).unwrap();
    let order = bus_core::flow::PerKey::fifo().rate(Some(rate));
    bus_redis::admin::Admin::new(transport.clone())
        .order_per_key(&source, Some(order))
        .await
        .unwrap();
    let bus = bus_core::Bus::new(transport.clone(), Default::default());
    bus.send_batch_keyed(&[Work { n: 1 }, Work { n: 2 }], "k")
        .await
        .unwrap();
    let consumer = transport
        .consumer(&source, ConsumerOptions::new(Duration::from_secs(30), 5))
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let started = std::time::Instant::now();
    let first = consumer.take(5, &stop).await.unwrap();
    assert_eq!(first.len(), 1);
    consumer.ack(&[first[0].receipt.clone()]).await.unwrap();
    let before = command_calls(&redis);
    let mut second = Vec::new();
    while second.is_empty() && started.elapsed() < 3 * PER {
        second = consumer.take(5, &stop).await.unwrap();
    }
    let waited = started.elapsed();
    let after = command_calls(&redis);
    consumer.close().await.unwrap();
    assert_eq!(second.len(), 1, "the key's second message never started");
    // (Redis keeps times in whole ms; the handler's clock started a little before.)
    assert!(
        waited + Duration::from_millis(5) >= PER,
        "started after {waited:?}"
    );
    assert!(
        waited <= PER + Duration::from_millis(300),
        "started {waited:?} after the first: late"
    );
    let calls = after["evalsha"] - before.get("evalsha").copied().unwrap_or(0);
    assert!(calls <= 6, "{calls} script calls while the key waited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_id_twice_in_one_reserve_is_delivered_once() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let bus = bus_core::Bus::new(transport.clone(), Default::default());
    bus.send(&Work { n: 1 }).await.unwrap();
    let source = Source::queue("work").unwrap();
    let consumer = transport
        .consumer(&source, ConsumerOptions::new(Duration::from_secs(30), 5))
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let first = consumer.take(10, &stop).await.unwrap();
    let receipt = first[0].receipt.clone();
    let error = bus_core::records::ErrorRecord::now("again");
    consumer
        .retry(&receipt, Duration::ZERO, &error)
        .await
        .unwrap();
    // The retried message's storage id is on `ready`; someone pushes it a second time.
    let keys = transport.keys(&source);
    let id: String = transport.client().lindex(&keys.ready, 0).await.unwrap();
    let _: i64 = transport
        .client()
        .rpush(&keys.ready, id.as_str())
        .await
        .unwrap();
    let again = consumer.take(10, &stop).await.unwrap();
    assert_eq!(again.len(), 1, "delivered {} times", again.len());
    assert_eq!(again[0].delivery_count, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_subscription_name_from_redis_receives_nothing() {
    use fred::prelude::SetsInterface;
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let good = Source::subscription("thing", "audit").unwrap();
    let _consumer = transport
        .consumer(&good, ConsumerOptions::new(Duration::from_secs(30), 5))
        .await
        .unwrap();
    // A foreign client registers a name that would break the key layout.
    let subs = bus_redis::keys::subscriptions(redis.namespace(), "thing");
    let _: i64 = transport.client().sadd(&subs, "bad name}x").await.unwrap();
    let outgoing = bus_core::transport::Outgoing {
        id: "m-1".to_owned().into(),
        payload: r#"{"v":1,"id":"m-1","type":"thing","sent":1,"body":{}}"#.into(),
    };
    let reached = transport
        .publish("thing", None, vec![outgoing])
        .await
        .unwrap();
    assert_eq!(reached, 1, "only the valid subscription");
    let mut client = redis.client();
    let ready = client
        .cmd(&["LLEN", &transport.keys(&good).ready])
        .unwrap()
        .as_int();
    assert_eq!(ready, Some(1));
    let strays: Vec<String> = client
        .scan_match(&bus_redis::keys::discovery_pattern(Some(redis.namespace())))
        .unwrap()
        .into_iter()
        .filter(|key| key.contains("bad name"))
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}

/// One reserve takes three messages of a key allowed three at once (stored in bulk), one
/// ack gives all three slots back (freed per key, not per message): they pass to the key's
/// next three, which run, and after the last ack the key's slot count is gone from `kbusy`
/// and nothing keyed is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_s_messages_reserved_and_acked_together_free_every_slot() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let source = Source::queue("work").unwrap();
    let order = bus_core::flow::PerKey::new(3).unwrap();
    bus_redis::admin::Admin::new(transport.clone())
        .order_per_key(&source, Some(order))
        .await
        .unwrap();
    let bus = bus_core::Bus::new(transport.clone(), Default::default());
    let work: Vec<Work> = (0..6).map(|n| Work { n }).collect();
    bus.send_batch_keyed(&work, "k").await.unwrap();
    let keys = transport.keys(&source);
    let consumer = transport
        .consumer(&source, ConsumerOptions::new(Duration::from_secs(30), 10))
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    for round in 0..2 {
        let mut held = Vec::new();
        while held.len() < 3 {
            held.extend(consumer.take(10, &stop).await.unwrap());
        }
        assert_eq!(held.len(), 3, "round {round}: the limit is 3");
        let ids: HashSet<_> = held.iter().map(|d| d.receipt.clone()).collect();
        assert_eq!(ids.len(), 3, "round {round}: three distinct messages");
        let busy: Option<i64> = transport.client().hget(&keys.kbusy, "k").await.unwrap();
        assert_eq!(busy, Some(3), "round {round}");
        let receipts: Vec<_> = held.iter().map(|d| d.receipt.clone()).collect();
        consumer.ack(&receipts).await.unwrap();
        let busy: Option<i64> = transport.client().hget(&keys.kbusy, "k").await.unwrap();
        // Each freed slot passes to a waiting message (a head) while there is one.
        let passed = if round == 0 { Some(3) } else { None };
        assert_eq!(busy, passed, "round {round}: every slot given back");
    }
    consumer.close().await.unwrap();
    let waiting = format!("{}:k", keys.kq);
    assert_eq!(
        [
            ("HLEN", &keys.kof),
            ("HLEN", &keys.msgs),
            ("LLEN", &waiting)
        ]
        .map(|(cmd, key)| redis_int(&redis, cmd, key)),
        [0, 0, 0]
    );
}

/// Garbage in an ordered queue's layout (a key's rate window that is not a sorted set,
/// written by hand) fails the reserve that reaches it, and the keyed message that call took
/// before it is leased and locked, not lost: it is delivered once recovered. The heads not
/// yet looked at go back onto `kheads`, so the next reserve works once the garbage is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_key_window_fails_its_reserve_without_losing_what_the_call_took() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis).await;
    let source = Source::queue("work").unwrap();
    let per_minute = bus_core::flow::RateLimit::new(1, Duration::from_secs(60)).unwrap();
    bus_redis::admin::Admin::new(transport.clone())
        .order_per_key(
            &source,
            Some(bus_core::flow::PerKey::fifo().rate(Some(per_minute))),
        )
        .await
        .unwrap();
    let bus = bus_core::Bus::new(transport.clone(), Default::default());
    bus.send_keyed(&Work { n: 1 }, "a").await.unwrap();
    bus.send_keyed(&Work { n: 3 }, "c").await.unwrap();
    let keys = transport.keys(&source);
    let mut raw = redis.client();
    let garbage = format!("{}:c", keys.kstarts);
    raw.cmd(&["SET", &garbage, "not a sorted set"]).unwrap();

    let consumer = transport
        .consumer(&source, ConsumerOptions::new(Duration::from_secs(1), 10))
        .await
        .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let failed = consumer.take(10, &stop).await;
    assert!(failed.is_err(), "{failed:?}");
    // a's message is in the call's lease, under its lock.
    let leased = raw.cmd(&["GET", &keys.leased]).unwrap();
    assert_eq!(leased.as_str(), Some("1"), "a's message was lost");
    assert_eq!(redis_int(&redis, "ZCARD", &keys.leases), 1);
    // c's head is back on `kheads`, first; the garbage goes.
    assert_eq!(redis_int(&redis, "LLEN", &keys.kheads), 2);
    let c = raw.cmd(&["LINDEX", &keys.kheads, "0"]).unwrap();
    assert_eq!(c.as_str(), Some("c"), "c is not a head: {c:?}");
    raw.cmd(&["DEL", &garbage]).unwrap();

    // c's message is served as usual; a's lock (1 s) expires and, recovered (as a host's
    // recovery loop would), it is delivered alone, as a crash suspect.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut delivered = 0;
    while delivered < 2 && tokio::time::Instant::now() < deadline {
        consumer.recover().await.unwrap();
        let received = consumer.receive(Want::new(10), &stop).await.unwrap();
        let mut batch = received.deliveries;
        if received.hold == Hold::Isolation {
            batch.extend(consumer.take_alone().await.unwrap());
        }
        let receipts: Vec<_> = batch.iter().map(|d| d.receipt.clone()).collect();
        consumer.ack(&receipts).await.unwrap();
        delivered += batch.len();
    }
    assert_eq!(delivered, 2, "a's and c's messages, once each");
    assert_eq!(redis_int(&redis, "HLEN", &keys.msgs), 0);
    consumer.close().await.unwrap();
}

fn redis_int(redis: &TestRedis, cmd: &str, key: &str) -> i64 {
    redis.client().cmd(&[cmd, key]).unwrap().as_int().unwrap()
}
