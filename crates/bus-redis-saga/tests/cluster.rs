//! The store on a real three-master Redis Cluster: every script touches one key, so the
//! sagas spread over the shards and everything works unchanged (SPEC §5.2).

use std::sync::Arc;
use std::time::Duration;

use bus_conformance::saga_store as conformance;
use bus_core::SagaStore;
use bus_redis_saga::RedisSagaStore;
use bus_test_redis::RedisCluster;
use bytes::Bytes;
use fred::prelude::{Builder, ClientLike, Config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conformance_suite_and_scan_work_on_a_cluster() {
    let cluster = RedisCluster::start().expect("a local Redis Cluster");
    let config = Config::from_url(&cluster.url()).unwrap();
    let client = Builder::from_config(config).build().unwrap();
    client.init().await.unwrap();
    let store = RedisSagaStore::new(client).prefix("clustered");
    conformance::run_all(Arc::new(store.clone())).await.unwrap();

    // Sagas land on every master, and scan finds them all.
    for i in 0..60 {
        let id = format!("spread-{i}");
        store
            .create(
                "spread",
                &id,
                Bytes::from_static(b"{}"),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
    }
    for node in cluster.nodes() {
        let count = node.client().cmd(&["DBSIZE"]).unwrap().as_int().unwrap();
        assert!(count > 0, "a master holds no saga: the keys do not spread");
    }
    assert_eq!(store.scan(Some("spread")).await.unwrap().len(), 60);
}
