//! The samples' message contracts.
//!
//! A contract crate depends on `bus-core` (with its derives) and `serde` (and here
//! `async-trait`, for the self-registering processor of [`audit`]) only, never on
//! a transport, so services can share it without pulling in a Redis client — as
//! KnightBus keeps message contracts apart from transports.

pub mod audit;

use bus_core::{EventSubscription, RedisCommand, RedisEvent};
use serde::{Deserialize, Serialize};

/// A small command for the throughput sample.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "sample-throughput")]
pub struct Ping {
    /// Sequence number.
    pub n: u64,
}

/// Ask for a thumbnail of an image.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "thumbnail-requested")]
pub struct ThumbnailRequested {
    /// The image.
    pub image_id: String,
}

/// A cached value changed: every subscription gets a copy.
#[derive(Debug, Clone, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "cache-invalidated", format = "msgpack")]
pub struct CacheInvalidated {
    /// The cache key.
    pub key: String,
}

/// The web tier's copy of `CacheInvalidated`.
#[derive(Debug, EventSubscription)]
#[bus(event = CacheInvalidated, name = "web")]
pub struct WebCache;

/// The API tier's copy.
#[derive(Debug, EventSubscription)]
#[bus(event = CacheInvalidated, name = "api")]
pub struct ApiCache;

/// The search index's copy.
#[derive(Debug, EventSubscription)]
#[bus(event = CacheInvalidated, name = "search")]
pub struct SearchIndex;

/// Starts an order saga.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "order-placed")]
pub struct OrderPlaced {
    /// The order (the saga's id).
    pub order_id: String,
    /// How many lines to expect.
    pub lines: u32,
}

/// One line of an order saga.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "order-line-packed")]
pub struct OrderLinePacked {
    /// The order (the saga's id).
    pub order_id: String,
}
