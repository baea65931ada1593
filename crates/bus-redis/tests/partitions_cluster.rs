//! A partitioned queue on a real three-master Redis Cluster: with three shards, every
//! master serves a third of the queue's commands (SPEC §8, from `INFO commandstats`).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{CommandProcessor, Context, Host, ProcessError, ProcessingSettings, RedisCommand};
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::{info_field, RedisCluster, SyncClient};
use common::{eventually, Running};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders")]
struct Order {
    n: u64,
}

struct Count(AtomicUsize);

#[async_trait]
impl CommandProcessor<Order> for Arc<Count> {
    async fn process(&self, _: Order, _: &Context) -> Result<(), ProcessError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default()
            .max_concurrent_calls(64)
            .prefetch_count(64)
    }
}

/// The slot ranges a node serves, from its own line of `CLUSTER NODES`.
fn slots_of(port: u16) -> Vec<(i64, i64)> {
    let nodes = SyncClient::connect(port)
        .unwrap()
        .cmd(&["CLUSTER", "NODES"])
        .unwrap();
    let nodes = String::from_utf8(nodes.as_bytes().unwrap().to_vec()).unwrap();
    let own = nodes.lines().find(|l| l.contains("myself")).unwrap();
    own.split_whitespace()
        .skip(8)
        .filter_map(|range| {
            let (low, high) = range.split_once('-').unwrap_or((range, range));
            Some((low.parse().ok()?, high.parse().ok()?))
        })
        .collect()
}

/// The calls of `commands` a node served (`INFO commandstats`).
fn calls(port: u16, commands: &[&str]) -> u64 {
    let stats = SyncClient::connect(port)
        .unwrap()
        .info("commandstats")
        .unwrap();
    commands
        .iter()
        .filter_map(|command| {
            let line = info_field(&stats, &format!("cmdstat_{command}"))?;
            line.split(',')
                .find_map(|f| f.strip_prefix("calls=")?.parse::<u64>().ok())
        })
        .sum()
}

/// Each node's share of `counts`, checked to be a third ± 10% (of a third).
fn assert_thirds(what: &str, ports: [u16; 3], counts: &[u64]) {
    let total: u64 = counts.iter().sum();
    let shares: Vec<f64> = counts.iter().map(|&c| c as f64 / total as f64).collect();
    eprintln!("{what} per master: {counts:?} of {total}; shares {shares:.3?}");
    for (port, share) in ports.iter().zip(&shares) {
        assert!(
            (share - 1.0 / 3.0).abs() <= 0.1 / 3.0,
            "master {port} served {:.1}% of the {what} ({counts:?})",
            share * 100.0
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_spread_a_queue_over_three_masters() {
    const MESSAGES: u64 = 6_000;
    let cluster = RedisCluster::start().unwrap();
    let ports = cluster.ports();
    // The three shards' tags must land on three different masters; which master holds a
    // slot is the cluster's choice, so check it rather than assume it.
    let owner = |tag: &str| {
        let slot = SyncClient::connect(ports[0])
            .unwrap()
            .cmd(&["CLUSTER", "KEYSLOT", tag])
            .unwrap()
            .as_int()
            .unwrap();
        ports
            .iter()
            .position(|&p| slots_of(p).iter().any(|&(l, h)| (l..=h).contains(&slot)))
            .unwrap()
    };
    let mut owners: Vec<usize> = (0..3).map(|i| owner(&format!("orders:{i}"))).collect();
    owners.sort_unstable();
    assert_eq!(
        owners,
        [0, 1, 2],
        "the shards of `orders` share a master: pick another name"
    );

    let config = RedisConfig::from_url(&cluster.url())
        .unwrap()
        .partitions("orders", 3);
    let count = Arc::new(Count(AtomicUsize::new(0)));
    let host = Host::builder()
        .transport(RedisTransport::connect(&config).await.unwrap())
        .command::<Order, _>(Arc::clone(&count))
        .build()
        .unwrap();
    let running = Running::start(host);
    // Start counting once the consumers run (they record the partitions when they start).
    let recorded = RedisTransport::connect(&config).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            let n: Option<i64> = fred::prelude::HashesInterface::hget(
                recorded.client(),
                bus_redis::keys::partition_registry("bus"),
                "orders",
            )
            .await
            .unwrap();
            n == Some(3)
        })
        .await
    );
    for port in ports {
        assert!(SyncClient::connect(port)
            .unwrap()
            .cmd(&["CONFIG", "RESETSTAT"])
            .unwrap()
            .is_ok());
    }
    let orders: Vec<Order> = (0..MESSAGES).map(|n| Order { n }).collect();
    for chunk in orders.chunks(100) {
        let sends = chunk.iter().map(|order| running.bus.send(order));
        for sent in futures::future::join_all(sends).await {
            sent.unwrap();
        }
    }
    assert!(
        eventually(Duration::from_secs(60), || async {
            count.0.load(Ordering::SeqCst) as u64 >= MESSAGES
        })
        .await,
        "{} of {MESSAGES} handled",
        count.0.load(Ordering::SeqCst)
    );
    running.stop().await;
    // All the queue's commands (sends, scripts, waits), then the scripts alone: the
    // consumer's reserves and acks spread too, not only the producer's RPUSHes.
    let queue = ["rpush", "evalsha", "eval", "blmove"];
    let all: Vec<u64> = ports.iter().map(|&p| calls(p, &queue)).collect();
    assert_thirds("queue commands", ports, &all);
    let scripts: Vec<u64> = ports
        .iter()
        .map(|&p| calls(p, &["evalsha", "eval"]))
        .collect();
    assert_thirds("scripts (reserve, ack)", ports, &scripts);
}

/// Per-key ordering on the cluster, on a partitioned queue (the key picks the shard): the
/// conformance check, its keys spread over three shards on three masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_order_holds_on_a_partitioned_queue_of_a_cluster() {
    let cluster = RedisCluster::start().unwrap();
    let config = RedisConfig::from_url(&cluster.url())
        .unwrap()
        .partitions("conformance-ordered", 3);
    let transport = RedisTransport::connect(&config).await.unwrap();
    bus_conformance::keyed_messages_run_in_order_per_key(
        Arc::new(transport.clone()),
        &bus_redis::admin::Admin::new(transport),
    )
    .await;
}
