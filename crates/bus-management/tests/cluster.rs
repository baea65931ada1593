//! Management on a real three-master Redis Cluster: queues spread over the masters are
//! all found (SCAN on every master), and each queue's scripts touch one slot.

use bus_core::transport::Source;
use bus_management::{Error, Management};
use bus_redis::RedisConfig;
use bus_test_redis::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_on_every_master_are_listed_and_counted() {
    let cluster = RedisCluster::start().expect("a local Redis Cluster");
    let config = RedisConfig::from_url(&cluster.url())
        .unwrap()
        .prefix("clustered");
    let management = Management::connect(&config).await.unwrap();
    // Twenty queues, sent to without any consumer: their hash tags spread them.
    let names: Vec<String> = (0..20).map(|i| format!("q{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        let source = Source::queue(name.as_str()).unwrap();
        for n in 0..=i as u64 {
            management
                .send(
                    &source,
                    Some("any"),
                    &format!(r#"{{"n":{n}}}"#),
                    Default::default(),
                )
                .await
                .unwrap();
        }
    }
    for node in cluster.nodes() {
        let count = node.client().cmd(&["DBSIZE"]).unwrap().as_int().unwrap();
        assert!(count > 0, "a master holds no queue: the keys do not spread");
    }
    assert_eq!(management.queues().await.unwrap(), names);
    let all = management.stats_all().await.unwrap();
    let ready: Vec<u64> = all.iter().map(|s| s.ready).collect();
    assert_eq!(ready, (1..=20).collect::<Vec<u64>>());
    assert!(all.iter().all(|s| s.oldest_sent_at_ms.is_some()));
    management
        .ensure_exists(&Source::queue("q07").unwrap())
        .await
        .unwrap();
    let err = management
        .ensure_exists(&Source::queue("q99").unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownSource { known, .. } if known.len() == 20),
        "{err:?}"
    );
}
