//! What only the BabelQueue tests share: `bq.py` and the worker binaries on the
//! harness's Python and worker fixtures, options by layout name, a connected adapter,
//! and a small loop that settles deliveries the way the bus host does.

#![allow(dead_code)]

use bus_core::transport::ConsumerExt;
use std::path::PathBuf;
use std::time::Duration;

use bus_babelqueue::{BabelTransport, Options};
use bus_core::records::ErrorRecord;
use bus_core::transport::{Consumer, ConsumerOptions, DeadLetterReason, Delivery, Source};
use bus_core::Transport;
use bus_redis::RedisConfig;
use bus_test_redis::python::Python;
pub use bus_test_redis::python::Worker;
use bus_test_redis::TestRedis;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// The URN the Python scripts handle.
pub const URN: &str = "urn:babel:orders:created";

/// `tests/python/bq.py` on the BabelQueue SDK's interpreter (the harness's Python
/// fixture: `BQ_PYTHON`, else `target/bq-venv`).
pub fn bq() -> Python {
    Python::babelqueue(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/bq.py"))
}

/// Runs `bq.py` to the end; returns its JSON lines and its stderr.
pub async fn run_py(args: &[&str]) -> (Vec<Value>, String) {
    bq().run(args).await
}

/// The Rust worker binary (`src/bin/bq-worker.rs`) with `args`.
pub fn rust_worker(args: &[&str]) -> Worker {
    Worker::binary(env!("CARGO_BIN_EXE_bq-worker"), args)
}

/// The bus host binary (`src/bin/bq-host.rs`, default settings) with `args`.
pub fn host_process(args: &[&str]) -> Worker {
    Worker::binary(env!("CARGO_BIN_EXE_bq-host"), args)
}

/// The adapter's options for a layout by its name (`bus_test_redis::LAYOUTS`).
pub fn options(layout: &str) -> Options {
    match layout {
        "legacy" => Options::legacy(),
        "laravel" => Options::laravel(),
        other => panic!("no BabelQueue layout {other:?}"),
    }
}

/// The adapter over `url` with `options`.
pub async fn transport(url: &str, options: Options) -> BabelTransport {
    let config = RedisConfig::from_url(url).expect("Redis URL");
    BabelTransport::connect(&config, options)
        .await
        .expect("connecting")
}

/// A bus consumer of `queue` with a lock timeout and delivery limit.
pub async fn consumer(
    transport: &BabelTransport,
    queue: &str,
    lock: Duration,
    limit: u32,
) -> Box<dyn Consumer> {
    transport
        .consumer(
            &Source::queue(queue).expect("queue name"),
            ConsumerOptions::new(lock, limit),
        )
        .await
        .expect("consumer")
}

/// Receives once (up to `max`), bounded by the transport's own ~1 s wait.
pub async fn receive(consumer: &dyn Consumer, max: usize) -> Vec<Delivery> {
    consumer
        .take(max, &CancellationToken::new())
        .await
        .expect("receive")
}

/// The bus host's settlement policy, for a handler that returns `Err(text)` to fail:
/// an unknown type is dead-lettered, a failure at the limit too, else retried.
pub async fn settle(
    consumer: &dyn Consumer,
    delivery: &Delivery,
    known: &[&str],
    limit: u32,
    outcome: Result<(), String>,
) {
    let native = delivery.decoded.as_deref().expect("read by the adapter");
    if !known.contains(&native.message_type.as_str()) {
        let error = ErrorRecord::now(format!("no processor for {}", native.message_type));
        consumer
            .dead_letter(
                &delivery.receipt,
                DeadLetterReason::UnknownType,
                Some(&error),
            )
            .await
            .expect("dead-letter");
        return;
    }
    match outcome {
        Ok(()) => consumer
            .ack(std::slice::from_ref(&delivery.receipt))
            .await
            .expect("ack"),
        Err(text) => {
            let error = ErrorRecord::now(text);
            if delivery.delivery_count >= limit {
                consumer
                    .dead_letter(
                        &delivery.receipt,
                        DeadLetterReason::DeliveryLimit,
                        Some(&error),
                    )
                    .await
                    .expect("dead-letter");
            } else {
                consumer
                    .retry(&delivery.receipt, Duration::ZERO, &error)
                    .await
                    .expect("retry");
            }
        }
    }
}

// A list's elements and a key's size, by the names these tests call them.

pub fn lrange(redis: &TestRedis, key: &str) -> Vec<Vec<u8>> {
    redis.list(key)
}

pub fn size(redis: &TestRedis, key: &str) -> i64 {
    redis.len(key)
}
