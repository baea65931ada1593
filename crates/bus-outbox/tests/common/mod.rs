//! What the outbox and inbox tests share: a real PostgreSQL and a real Redis, the
//! messages, and readings of what Redis holds.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, Envelope, RedisCommand, RedisEvent, Transport};
use bus_outbox::sqlx::postgres::PgPoolOptions;
use bus_outbox::sqlx::PgPool;
use bus_outbox::Outbox;
use bus_redis::keys::QueueKeys;
use bus_test_redis::{PostgresServer, TestRedis};
use serde::{Deserialize, Serialize};

/// A command with a partition key and a sequence number per key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "orders")]
pub struct Order {
    pub key: String,
    pub seq: u64,
}

/// An event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "order-placed")]
pub struct Placed {
    pub n: u64,
}

/// A bounded wait for the tests' conditions.
pub const WAIT: Duration = Duration::from_secs(30);

/// PostgreSQL with a fresh, migrated database, and Redis with a namespace of its own.
pub struct Env {
    pub pg: PostgresServer,
    pub url: String,
    pub pool: PgPool,
    pub redis: TestRedis,
    pub transport: Arc<dyn Transport>,
    pub bus: Bus,
    pub outbox: Outbox,
}

pub async fn pool(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(10)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        .expect("connect to the test database")
}

impl Env {
    pub async fn start() -> Env {
        let pg = PostgresServer::start().expect("postgres");
        let url = pg.create_database().expect("a test database");
        let pool = pool(&url).await;
        Outbox::migrate(&pool).await.expect("migrate");
        let redis = TestRedis::start().expect("redis");
        let transport: Arc<dyn Transport> = Arc::new(bus_test_redis::bus::transport(&redis).await);
        let bus = Bus::new(Arc::clone(&transport), BusConfig::default());
        let outbox = Outbox::new(bus.clone());
        Env {
            pg,
            url,
            pool,
            redis,
            transport,
            bus,
            outbox,
        }
    }

    /// The database's name.
    pub fn database(&self) -> &str {
        self.url.rsplit('/').next().unwrap_or_default()
    }

    /// One SQL statement's output through psql (the test's own view of the database).
    pub fn sql(&self, sql: &str) -> String {
        self.pg.psql(self.database(), sql).expect(sql)
    }

    /// The envelopes ready in `queue`, oldest first.
    pub fn ready(&self, queue: &str) -> Vec<Envelope> {
        let keys = QueueKeys::new(self.redis.namespace(), &Source::queue(queue).unwrap());
        self.redis
            .client()
            .list(&keys.ready)
            .unwrap()
            .iter()
            .map(|element| Envelope::decode(element).expect("an envelope"))
            .collect()
    }

    /// The orders ready in the `orders` queue, oldest first, with their message ids.
    pub fn orders(&self) -> Vec<(String, Order)> {
        self.ready("orders")
            .into_iter()
            .map(|e| {
                let order = e.format.decode("orders", &e.body).unwrap();
                (e.id.to_string(), order)
            })
            .collect()
    }
}
