//! Durable sends: a send that returns `Ok` only once a replica has
//! it, and a typed error when none confirms in time. The replica replicates through a
//! proxy, so a test can hold replication back while both servers stay up.

mod common;

use std::time::{Duration, Instant, SystemTime};

use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, RedisEvent};
use bus_redis::keys::{self, QueueKeys};
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::{eventually, info_field, Proxy, RedisServer, SyncClient};
use common::Work;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "happened")]
struct Happened {
    n: u64,
}

/// A primary, and a replica that replicates through a proxy.
struct Pair {
    primary: RedisServer,
    proxy: Proxy,
    replica: RedisServer,
}

async fn pair() -> Pair {
    let primary = RedisServer::start().unwrap();
    let proxy = Proxy::start(primary.port()).unwrap();
    let replica = RedisServer::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(proxy.port().to_string())
        .start()
        .unwrap();
    let linked = eventually(Duration::from_secs(10), || {
        let info = replica.client().info("replication").unwrap();
        info_field(&info, "master_link_status") == Some("up")
    })
    .await;
    assert!(linked, "the replica never linked to the primary");
    Pair {
        primary,
        proxy,
        replica,
    }
}

async fn connect(url: &str, prefix: &str) -> RedisTransport {
    let config = RedisConfig::from_url(url).unwrap().prefix(prefix);
    RedisTransport::connect(&config).await.unwrap()
}

fn llen(client: &mut SyncClient, key: &str) -> i64 {
    client.cmd(&["LLEN", key]).unwrap().as_int().unwrap()
}

fn ready(prefix: &str) -> String {
    QueueKeys::ready_of(prefix, &Source::queue("work").unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_send_returns_only_after_the_replica_has_it() {
    let pair = pair().await;
    let prefix = "durable-waits";
    let transport = connect(&pair.primary.url(), prefix).await;
    let durable = transport.durable(1, Duration::from_secs(5)).await.unwrap();
    assert_eq!(durable.durability(), Some((1, Duration::from_secs(5))));
    let plain = Bus::new(transport, BusConfig::default());
    let durable = Bus::new(durable, BusConfig::default());
    let mut replica = pair.replica.client();

    // Healthy replication: Ok means the replica has it, at once.
    durable.send(&Work { n: 1 }).await.unwrap();
    assert_eq!(
        llen(&mut replica, &ready(prefix)),
        1,
        "on the replica at Ok"
    );

    // Replication held back: a plain send is acknowledged with the replica lacking it
    // (the window a failover loses), a durable one is not acknowledged.
    pair.proxy.blackhole();
    plain.send(&Work { n: 2 }).await.unwrap();
    let waiting = tokio::spawn(async move { durable.send(&Work { n: 3 }).await });
    let returned = eventually(Duration::from_millis(500), || waiting.is_finished()).await;
    assert!(!returned, "a durable send returned while no replica had it");
    assert_eq!(llen(&mut replica, &ready(prefix)), 1, "replication is held");

    // The replica reconnects (a new connection through the proxy) and catches up.
    let killed = replica.cmd(&["CLIENT", "KILL", "TYPE", "master"]).unwrap();
    assert_eq!(killed.as_int(), Some(1), "{killed:?}");
    let started = Instant::now();
    waiting.await.unwrap().unwrap();
    assert_eq!(
        llen(&mut replica, &ready(prefix)),
        3,
        "the replica has it when the durable send returns ({:?} after the reconnect)",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_writes_fail_typed_within_their_timeout_when_no_replica_confirms() {
    const TIMEOUT: Duration = Duration::from_millis(500);
    let pair = pair().await;
    let prefix = "durable-fails";
    let transport = connect(&pair.primary.url(), prefix).await;
    let durable = Bus::new(
        transport.durable(1, TIMEOUT).await.unwrap(),
        BusConfig::default(),
    );
    let mut primary = pair.primary.client();
    let subscription = Source::subscription("happened", "audit").unwrap();
    primary
        .cmd(&["SADD", &keys::subscriptions(prefix, "happened"), "audit"])
        .unwrap();
    pair.proxy.blackhole();

    let check = |what: &str, result: bus_core::Result<bus_core::MessageId>, took: Duration| {
        let error = result.expect_err(what);
        assert!(
            matches!(
                error,
                bus_core::Error::NotReplicated {
                    wanted: 1,
                    confirmed: 0,
                    timeout: TIMEOUT
                }
            ),
            "{what}: {error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("stored on the primary but not replicated"),
            "{error}"
        );
        assert!(
            took >= TIMEOUT && took < TIMEOUT + Duration::from_secs(2),
            "{what} took {took:?}"
        );
    };
    let started = Instant::now();
    check(
        "send",
        durable.send(&Work { n: 1 }).await,
        started.elapsed(),
    );
    let started = Instant::now();
    let due = SystemTime::now() + Duration::from_secs(60);
    check(
        "send_at",
        durable.send_at(&Work { n: 2 }, due).await,
        started.elapsed(),
    );
    let started = Instant::now();
    check(
        "publish",
        durable.publish(&Happened { n: 3 }).await,
        started.elapsed(),
    );

    // "Stored, not replicated": each is on the primary.
    let queue = QueueKeys::new(prefix, &Source::queue("work").unwrap());
    assert_eq!(llen(&mut primary, &queue.ready), 1);
    let delayed = primary.cmd(&["ZCARD", &queue.delayed]).unwrap();
    assert_eq!(delayed.as_int(), Some(1));
    let copies = QueueKeys::new(prefix, &subscription).ready;
    assert_eq!(llen(&mut primary, &copies), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_handle_needs_a_replica_count_and_a_timeout() {
    let primary = RedisServer::start().unwrap();
    let transport = connect(&primary.url(), "durable-config").await;
    for (replicas, timeout) in [(0, Duration::from_secs(1)), (1, Duration::ZERO)] {
        let error = transport.durable(replicas, timeout).await.unwrap_err();
        assert!(
            matches!(error, bus_redis::Error::Config(_)),
            "{replicas}, {timeout:?}: {error:?}"
        );
    }
    // With no replica at all the error comes at the first send, not at connect.
    let durable = transport
        .durable(1, Duration::from_millis(100))
        .await
        .unwrap();
    let bus = Bus::new(durable, BusConfig::default());
    let error = bus.send(&Work { n: 1 }).await.unwrap_err();
    assert!(
        matches!(error, bus_core::Error::NotReplicated { confirmed: 0, .. }),
        "{error:?}"
    );
    // The plain handle is untouched.
    let plain = Bus::new(transport, BusConfig::default());
    plain.send(&Work { n: 2 }).await.unwrap();
    assert_eq!(llen(&mut primary.client(), &ready("durable-config")), 2);
}

/// `WAIT` covers the writes of its own connection: re-sent on a new connection after a
/// drop it would answer at once and confirm a write it never covered. So a durable send
/// whose connection drops while it waits says the outcome is unknown, never `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_send_whose_connection_drops_while_waiting_is_never_ok() {
    let pair = pair().await;
    let prefix = "durable-drop";
    let transport = connect(&pair.primary.url(), prefix).await;
    let durable = Bus::new(
        transport.durable(1, Duration::from_secs(5)).await.unwrap(),
        BusConfig::default(),
    );
    let mut primary = pair.primary.client();
    pair.proxy.blackhole();
    let waiting = tokio::spawn(async move { durable.send(&Work { n: 1 }).await });
    let blocked = eventually(Duration::from_secs(5), || {
        let info = primary.info("clients").unwrap();
        info_field(&info, "blocked_clients") == Some("1")
    })
    .await;
    assert!(blocked, "the durable send never waited in WAIT");
    // Every client connection drops (the replica's link is not a normal client).
    let killed = primary.cmd(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
    assert!(killed.as_int().is_some_and(|n| n >= 1), "{killed:?}");
    let error = waiting.await.unwrap().unwrap_err();
    assert!(
        matches!(error, bus_core::Error::OutcomeUnknown(_)),
        "{error:?}"
    );
    let text = bus_core::ErrorChain(&error).to_string();
    assert!(text.contains("no replica confirmed it"), "{text}");
    assert_eq!(
        llen(&mut primary, &ready(prefix)),
        1,
        "stored, not replicated"
    );
}

/// On a cluster the write and its `WAIT` go to the node of the queue's slot. The local
/// cluster has no replicas, so every durable write is stored there and reported as not
/// replicated (not as a routing error), for sends, scheduled sends and publishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_durable_writes_go_to_the_slot_of_their_queue() {
    let cluster = bus_test_redis::RedisCluster::start().unwrap();
    let prefix = "durable-cluster";
    let transport = connect(&cluster.url(), prefix).await;
    let durable = Bus::new(
        transport
            .durable(1, Duration::from_millis(100))
            .await
            .unwrap(),
        BusConfig::default(),
    );
    let due = SystemTime::now() + Duration::from_secs(60);
    let results = [
        durable.send(&Work { n: 1 }).await,
        durable.send_at(&Work { n: 2 }, due).await,
        durable.publish(&Happened { n: 3 }).await,
    ];
    for result in results {
        let error = result.unwrap_err();
        assert!(
            matches!(error, bus_core::Error::NotReplicated { confirmed: 0, .. }),
            "{error:?}"
        );
    }
    // The other nodes answer MOVED.
    let lengths: Vec<i64> = cluster
        .nodes()
        .iter()
        .filter_map(|node| {
            node.client()
                .cmd(&["LLEN", &ready(prefix)])
                .unwrap()
                .as_int()
        })
        .collect();
    assert_eq!(lengths, [1], "the send is stored on its slot's node");
}

/// On a durable handle whose replica does not confirm, a deduplicated send (single,
/// sharing calls, or a batch) fails `NotReplicated` only when it stored something: a
/// duplicate stores nothing, so it is answered as a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_deduplicated_send_is_not_replicated_only_when_it_stored() {
    const TIMEOUT: Duration = Duration::from_millis(300);
    let pair = pair().await;
    let prefix = "durable-dedup";
    let transport = connect(&pair.primary.url(), prefix).await;
    let plain = Bus::new(transport.clone(), BusConfig::default());
    let durable = Bus::new(
        transport.durable(1, TIMEOUT).await.unwrap(),
        BusConfig::default(),
    );
    let once = |key: &str| bus_core::SendOptions::new().dedup_key(key);
    let first = plain.send_with(&Work { n: 1 }, &once("a")).await.unwrap();
    pair.proxy.blackhole();

    let again = durable.send_with(&Work { n: 2 }, &once("a")).await.unwrap();
    assert!(again.duplicate && again.id == first.id, "{again:?}");
    let none = bus_core::SendOptions::new();
    let batch = durable
        .send_batch_deduplicated(&[Work { n: 3 }, Work { n: 4 }], &["a", "a"], &none)
        .await
        .unwrap();
    assert!(
        batch.iter().all(|s| s.duplicate && s.id == first.id),
        "{batch:?}"
    );
    let not_replicated = |result: bus_core::Result<()>| {
        let error = result.expect_err("stored, not replicated");
        assert!(
            matches!(error, bus_core::Error::NotReplicated { confirmed: 0, .. }),
            "{error:?}"
        );
    };
    not_replicated(
        durable
            .send_with(&Work { n: 5 }, &once("b"))
            .await
            .map(drop),
    );
    not_replicated(
        durable
            .send_batch_deduplicated(&[Work { n: 6 }, Work { n: 7 }], &["a", "c"], &none)
            .await
            .map(drop),
    );
    // Stored on the primary: "a" once, "b" and "c".
    let mut primary = pair.primary.client();
    assert_eq!(llen(&mut primary, &ready(prefix)), 3);
}
