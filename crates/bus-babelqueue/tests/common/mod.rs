//! Shared by the integration tests: the Python SDK runner, a connected adapter, and a
//! small loop that settles deliveries the way the bus host does.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bus_babelqueue::{BabelTransport, Options};
use bus_core::records::ErrorRecord;
use bus_core::transport::{Consumer, ConsumerOptions, DeadLetterReason, Delivery, Source};
use bus_core::Transport;
use bus_redis::RedisConfig;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio_util::sync::CancellationToken;

/// The URN the Python scripts handle.
pub const URN: &str = "urn:babel:orders:created";

/// Longest a Python script may run.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(120);

/// The interpreter of the venv with `babelqueue[redis]==1.24.0`: `BQ_PYTHON`, else the
/// one scripts/test.sh creates at `target/bq-venv`.
pub fn python() -> PathBuf {
    if let Ok(path) = std::env::var("BQ_PYTHON") {
        return PathBuf::from(path);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bq-venv/bin/python");
    assert!(
        venv.exists(),
        "no BabelQueue venv at {}: run scripts/test.sh (it creates it with \
         `pip install \"babelqueue[redis]==1.24.0\"`) or set BQ_PYTHON",
        venv.display()
    );
    venv
}

fn command(args: &[&str]) -> Command {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/bq.py");
    let mut cmd = Command::new(python());
    cmd.arg(script)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONIOENCODING", "utf-8")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs `bq.py` to the end; returns its JSON lines and its stderr.
pub async fn run_py(args: &[&str]) -> (Vec<Value>, String) {
    let child = command(args)
        .spawn()
        .expect("starting the Python SDK script");
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("bq.py {args:?} did not finish in {SCRIPT_TIMEOUT:?}"))
        .expect("waiting for bq.py");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "bq.py {args:?} failed: {}\n{stderr}",
        output.status
    );
    let lines = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (lines, stderr)
}

/// A long-running `bq.py` (a worker): the child, and its stdout lines read as they come
/// (a full pipe would stall the worker).
pub struct Worker {
    pub child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<Value>,
}

impl Worker {
    pub fn spawn(args: &[&str]) -> Worker {
        Self::from_command(command(args))
    }

    /// The Rust worker binary (`src/bin/bq-worker.rs`) with `args`.
    pub fn rust(args: &[&str]) -> Worker {
        Self::binary(env!("CARGO_BIN_EXE_bq-worker"), args)
    }

    /// The bus host binary (`src/bin/bq-host.rs`, default settings) with `args`.
    pub fn host(args: &[&str]) -> Worker {
        Self::binary(env!("CARGO_BIN_EXE_bq-host"), args)
    }

    fn binary(path: &str, args: &[&str]) -> Worker {
        let mut cmd = Command::new(path);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        Self::from_command(cmd)
    }

    fn from_command(mut cmd: Command) -> Worker {
        let mut child = cmd.spawn().expect("starting the worker");
        let stdout: ChildStdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Worker { child, lines }
    }

    /// The next JSON line, waiting at most `limit`.
    pub async fn next(&mut self, limit: Duration) -> Option<Value> {
        tokio::time::timeout(limit, self.lines.recv()).await.ok()?
    }

    /// SIGKILL.
    pub async fn kill(&mut self) {
        self.child.kill().await.expect("killing the worker");
    }

    /// SIGTERM (a graceful stop), then the remaining lines.
    pub async fn stop(mut self) -> Vec<Value> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let mut rest = Vec::new();
        while let Some(v) = self.next(Duration::from_secs(10)).await {
            rest.push(v);
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        rest
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
        .receive(max, &CancellationToken::new())
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

/// A Redis list's elements, for assertions.
pub fn lrange(redis: &bus_test_redis::TestRedis, key: &str) -> Vec<Vec<u8>> {
    let reply = redis
        .client()
        .cmd(&["LRANGE", key, "0", "-1"])
        .expect("LRANGE");
    reply
        .as_array()
        .unwrap_or_default()
        .iter()
        .map(|r| r.as_bytes().unwrap_or_default().to_vec())
        .collect()
}

/// A key's size: LLEN for lists, ZCARD for sorted sets, 0 when missing.
pub fn size(redis: &bus_test_redis::TestRedis, key: &str) -> i64 {
    let mut c = redis.client();
    let kind = c.cmd(&["TYPE", key]).expect("TYPE");
    let cmd = match kind.as_str() {
        Some("list") => "LLEN",
        Some("zset") => "ZCARD",
        _ => return 0,
    };
    c.cmd(&[cmd, key]).expect("size").as_int().unwrap_or(0)
}
