//! What the outbox and inbox crash tests (`tests/outbox.rs`) and their process
//! (`outbox-node`) share: the message, the tables, and the environment.

use bus_core::RedisCommand;
use serde::{Deserialize, Serialize};

/// The message the application writes through the outbox: one per order.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "shipments")]
pub struct Ship {
    /// The order's number.
    pub n: i64,
}

/// The application's and the handlers' tables: `orders` (the business rows, written
/// with their messages), `deliveries` (one row per handler run: n, message id,
/// delivery count), `effects` (the inbox handler's writes), `kills` (messages whose
/// handler's process was killed after its commit).
pub const TABLES: &str = "CREATE TABLE IF NOT EXISTS orders (n bigint PRIMARY KEY); \
    CREATE TABLE IF NOT EXISTS deliveries (n bigint, message_id text, delivery int); \
    CREATE TABLE IF NOT EXISTS effects (n bigint); \
    CREATE TABLE IF NOT EXISTS kills (message_id text)";

/// Orders with `n % ROLLED_BACK_EVERY == ROLLED_BACK_EVERY - 1` are written with their
/// message and rolled back: none of them may ever be delivered.
pub const ROLLED_BACK_EVERY: i64 = 5;

/// The partition key of order `n`: eight keys, so that order per key is exercised.
pub fn key_of(n: i64) -> String {
    format!("k{}", n % 8)
}
