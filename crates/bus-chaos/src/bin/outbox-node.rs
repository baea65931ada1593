//! One process of the outbox and inbox crash tests (`tests/outbox.rs`), by `OUTBOX_MODE`:
//!
//! - `app`: writes orders `OUTBOX_FROM..OUTBOX_FROM+OUTBOX_COUNT`, each in a transaction
//!   with its `Ship` message through the outbox (key `key_of(n)`); every fifth is rolled
//!   back. A failed write (PostgreSQL down) is retried until it commits or the order
//!   turns out to be there. Prints `committed <n>` after each commit. With
//!   `OUTBOX_RELAY=1` a relay runs in the process too. Then runs until killed.
//! - `relay`: a relay; with `OUTBOX_CRASH_AFTER_CYCLES=k` it aborts right after the k-th
//!   cycle's sends, before its rows are deleted. `OUTBOX_BATCH` rows per cycle.
//! - `handler`: a host with the inbox handling `Ship` (records each run in
//!   `deliveries`, writes `effects` in the inbox transaction); with
//!   `OUTBOX_KILL_AFTER_COMMIT=1` it records the message in `kills` and aborts after the
//!   commit of a first delivery, before the ack. Prints `up` once running.
//!
//! Environment: `DATABASE_URL`, `REDIS_URL`, `BUS_PREFIX`.

use bus_chaos::process::{env, init_logging};
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bus_chaos::outbox::{key_of, Ship, ROLLED_BACK_EVERY};
use bus_core::{
    Bus, BusConfig, CommandProcessor, Context, Host, Middleware, Next, ProcessError,
    ProcessingSettings, SendOptions,
};
use bus_outbox::sqlx::PgPool;
use bus_outbox::{InboxExt, InboxLayer, Outbox, Relay, RelayConfig};
use bus_redis::{RedisConfig, RedisTransport};

type Failure = Box<dyn std::error::Error + Send + Sync>;

fn number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Writes order `n` and its message in one transaction, committed unless `n` is one of
/// the rolled-back ones. `Ok(true)` when committed (now or by an earlier try).
async fn write_order(pool: &PgPool, outbox: &Outbox, n: i64) -> Result<bool, Failure> {
    let mut tx = pool.begin().await?;
    let inserted =
        bus_outbox::sqlx::query("INSERT INTO orders (n) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(n)
            .execute(&mut *tx)
            .await?;
    if inserted.rows_affected() == 0 {
        return Ok(true); // an earlier try committed, its answer lost
    }
    let options = SendOptions::new().key(key_of(n));
    outbox.send_with(&mut tx, &Ship { n }, &options).await?;
    if n % ROLLED_BACK_EVERY == ROLLED_BACK_EVERY - 1 {
        tx.rollback().await?;
        return Ok(false);
    }
    tx.commit().await?;
    Ok(true)
}

async fn app(pool: PgPool, transport: RedisTransport) -> Result<(), Failure> {
    let bus = Bus::new(transport, BusConfig::default());
    if number("OUTBOX_RELAY", 0) == 1 {
        let relay = Relay::new(
            pool.clone(),
            bus.transport().clone(),
            RelayConfig::default(),
        );
        tokio::spawn(async move { relay.run(std::future::pending()).await });
    }
    let outbox = Outbox::new(bus);
    let from = number("OUTBOX_FROM", 0) as i64;
    let count = number("OUTBOX_COUNT", 100) as i64;
    for n in from..from + count {
        loop {
            match write_order(&pool, &outbox, n).await {
                Ok(true) => {
                    say(&format!("committed {n}"));
                    break;
                }
                Ok(false) => break,
                Err(error) => {
                    eprintln!("order {n}: {error}; trying again");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    say("done");
    std::future::pending::<()>().await;
    Ok(())
}

async fn relay(pool: PgPool, transport: RedisTransport) -> Result<(), Failure> {
    let crash_after = number("OUTBOX_CRASH_AFTER_CYCLES", 0) as u32;
    let mut config = RelayConfig::default().batch_size(number("OUTBOX_BATCH", 50) as usize);
    if crash_after > 0 {
        // One cycle at a time: the crash then leaves exactly one cycle's rows behind.
        config = config.cycles(1);
        let cycles = AtomicU32::new(0);
        config = config.after_send(move || {
            if cycles.fetch_add(1, Ordering::SeqCst) + 1 >= crash_after {
                // Sent and stored in Redis, not yet deleted from the outbox.
                std::process::abort();
            }
        });
    }
    Relay::new(pool, transport, config)
        .run(bus_core::shutdown_signal())
        .await?;
    Ok(())
}

struct Shipper {
    pool: PgPool,
}

#[async_trait]
impl CommandProcessor<Ship> for Shipper {
    async fn process(&self, ship: Ship, ctx: &Context) -> Result<(), ProcessError> {
        // Every run, outside the inbox's transaction: what the assertions count.
        bus_outbox::sqlx::query(
            "INSERT INTO deliveries (n, message_id, delivery) VALUES ($1, $2, $3)",
        )
        .bind(ship.n)
        .bind(ctx.message_id().as_str())
        .bind(ctx.delivery_count() as i32)
        .execute(&self.pool)
        .await?;
        let mut tx = ctx.transaction().await?;
        bus_outbox::sqlx::query("INSERT INTO effects (n) VALUES ($1)")
            .bind(ship.n)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    fn settings(&self) -> ProcessingSettings {
        // One message at a time: each process commits one first delivery, then dies.
        ProcessingSettings::default()
            .message_lock_timeout(Duration::from_secs(1))
            .max_concurrent_calls(1)
            .prefetch_count(0)
    }
}

/// Outside the inbox: sees the handler's result after the inbox committed it.
struct KillAfterCommit {
    pool: PgPool,
}

#[async_trait]
impl Middleware for KillAfterCommit {
    async fn handle(&self, ctx: &Context, next: Next<'_>) -> Result<(), ProcessError> {
        let result = next.run(ctx).await;
        if result.is_ok() && ctx.delivery_count() == 1 {
            bus_outbox::sqlx::query("INSERT INTO kills (message_id) VALUES ($1)")
                .bind(ctx.message_id().as_str())
                .execute(&self.pool)
                .await?;
            // Committed, never acknowledged.
            std::process::abort();
        }
        result
    }
}

async fn handler(pool: PgPool, transport: RedisTransport) -> Result<(), Failure> {
    let mut builder = Host::builder().transport(transport);
    if number("OUTBOX_KILL_AFTER_COMMIT", 0) == 1 {
        builder = builder.middleware(KillAfterCommit { pool: pool.clone() });
    }
    let running = builder
        .middleware(InboxLayer::new(pool.clone()))
        .command::<Ship, _>(Shipper { pool })
        .recovery_interval(Duration::from_millis(200))
        .build()?
        .start()
        .await?;
    say("up");
    bus_core::shutdown_signal().await;
    running.shutdown().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Failure> {
    init_logging();
    let pool = bus_outbox::sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(&env("DATABASE_URL")?)?;
    let config = RedisConfig::from_url(&env("REDIS_URL")?)?.prefix(env("BUS_PREFIX")?.as_str());
    let transport = RedisTransport::connect(&config).await?;
    match env("OUTBOX_MODE")?.as_str() {
        "app" => app(pool, transport).await,
        "relay" => relay(pool, transport).await,
        "handler" => handler(pool, transport).await,
        other => Err(format!("unknown OUTBOX_MODE {other:?}").into()),
    }
}
