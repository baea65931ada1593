//! A saga store on Redis (SPEC §5.2, §5.3), for bus-core's sagas.
//!
//! A host whose sagas keep their state in the transport's Redis, under its prefix:
//!
//! ```no_run
//! use bus_core::Host;
//! use bus_redis::{RedisConfig, RedisTransport};
//! use bus_redis_saga::RedisSagaStore;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let transport = RedisTransport::connect(&RedisConfig::from_url("redis://127.0.0.1:6379")?).await?;
//! let host = Host::builder()
//!     .saga_store(RedisSagaStore::for_transport(&transport))
//!     .transport(transport)
//!     // .saga::<OrderSaga, _>(...) for each saga
//!     .build()?;
//! # Ok(())
//! # }
//! ```
//!
//! Each saga is one hash at `[<prefix>:]sagas:<partition>:<id>` with the fields `data`
//! (the JSON state) and `stamp` (a ULID that changes on every write). Create, update,
//! complete and delete are each one single-key Lua script (`lua/*.lua`) that checks the
//! stamp and writes in one step; create sets the saga's time to live as the key's
//! expiry and updates keep it. A key at a saga's name that is not such a hash fails with
//! `bus_core::Error::NotASaga` naming the key, and is never overwritten or deleted.
//!
//! | Item | What it is | Module |
//! |---|---|---|
//! | [`RedisSagaStore`], [`SagaKey`] | the store, and the keys its `scan` lists | `store` |
//! | (key names) | every key built in one place | `keys` |
//! | (scripts) | `lua/*.lua`, run by SHA with a `NOSCRIPT` fallback | `scripts` |
//!
//! Errors are bus-core's: [`bus_core::Error::SagaNotFound`], `SagaExists`,
//! `SagaConflict`, `NotASaga`, and `Transport` for Redis failures. The guide is
//! `docs/sagas.md`.

#![warn(missing_docs)]
mod keys;
mod scripts;
mod store;

pub use store::{RedisSagaStore, SagaKey};

/// Every script of this crate, checked by its tests (`tests/scripts.rs`). Not an API.
#[doc(hidden)]
pub mod raw {
    pub use crate::scripts::{catalog, PRELUDES};
}
