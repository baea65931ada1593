//! Operations for the bus on Redis (SPEC §11): a web dashboard and a Prometheus
//! endpoint of per-queue counts, both reading Redis directly, no host needed.
//!
//! The dashboard of a Redis transport's queues, on a local port:
//!
//! ```no_run
//! use bus_dashboard::{Dashboard, DashboardOptions};
//! use bus_redis::{RedisConfig, RedisTransport};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let transport = RedisTransport::connect(&RedisConfig::from_url("redis://127.0.0.1:6379")?).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! Dashboard::new(transport, DashboardOptions::default()).serve(listener).await?;
//! # Ok(())
//! # }
//! ```
//!
//! | Item | What it is | Module |
//! |---|---|---|
//! | [`Dashboard`], [`DashboardOptions`] | the web dashboard (`bus dashboard`): live counts and plots, messages, dead letters grouped by error with requeue and delete, sagas, Redis's health, the audit log, per-type timing, scheduled messages cancelled, a read-only mode | `server`, `options` |
//! | [`QueueMetrics`] | `GET /metrics` of every queue's counts (`bus metrics`) | `metrics` |
//! | [`QueueSnapshot`] | one queue's counts at one moment, read at bounded cost | `snapshot` |
//! | [`Error`], [`Result`] | what can go wrong | `error` |
//!
//! The metrics, the dashboard's pages and its safety rules are described in
//! `docs/operations.md` ("Metrics and dashboard"). Every change the dashboard makes is a
//! [`bus_management::Action`] applied by [`bus_management::Fleet::apply`], as the `bus`
//! tool's are (audited there, once); what it reads beyond management (expired locks,
//! messages in flight, a saga's state) it reads with single read-only commands.

#![warn(missing_docs)]
mod error;
mod history;
mod metrics;
mod options;
mod server;
mod snapshot;
mod timing;

pub use error::{Error, Result};
pub use metrics::QueueMetrics;
pub use options::DashboardOptions;
pub use server::Dashboard;
pub use snapshot::QueueSnapshot;
