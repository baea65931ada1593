//! The conformance scenarios on Redis: one queue per name, and with the members' and
//! children's queues partitioned over three shards.

use std::sync::Arc;

use bus_conformance::workflows;
use bus_redis::RedisTransport;
use bus_test_redis::TestRedis;
use bus_workflows::RedisWorkflowStore;

async fn transport(redis: &TestRedis, partitioned: bool) -> RedisTransport {
    let mut config = bus_test_redis::bus::config(redis);
    if partitioned {
        for queue in ["wf-items", "wf-child", "wf-done"] {
            config = config.partitions(queue, 3);
        }
    }
    RedisTransport::connect(&config).await.expect("connects")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_children_and_nesting() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis, false).await;
    let store = RedisWorkflowStore::for_transport(&transport);
    workflows::all(Arc::new(transport), Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_children_and_nesting_on_partitioned_queues() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis, true).await;
    let store = RedisWorkflowStore::for_transport(&transport);
    workflows::all(Arc::new(transport), Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_across_a_host_restart() {
    let redis = TestRedis::start().unwrap();
    let transport = transport(&redis, false).await;
    let store = RedisWorkflowStore::for_transport(&transport);
    workflows::sleep_across_a_restart(Arc::new(transport), Arc::new(store)).await;
}
