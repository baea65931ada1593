//! Shared by the integration tests: a private redis-server and a store on it.

use bus_redis_saga::RedisSagaStore;
use bus_test_redis::TestRedis;
use fred::prelude::{Builder, ClientLike, Config};

/// A private redis-server (or `BUS_TEST_REDIS_URL`) and a store in the test's namespace.
pub async fn store() -> (TestRedis, RedisSagaStore) {
    let redis = TestRedis::start().expect("a redis-server for the test");
    let store = store_on(&redis).await;
    (redis, store)
}

/// A new client and store on `redis`, in its namespace.
pub async fn store_on(redis: &TestRedis) -> RedisSagaStore {
    let config = Config::from_url(&redis.url()).expect("a valid URL");
    let client = Builder::from_config(config).build().expect("a client");
    client.init().await.expect("connected");
    RedisSagaStore::new(client).prefix(redis.namespace())
}
