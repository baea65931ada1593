//! The producer of the end-to-end phases, in a process of its own, as a user's producer
//! and consumer services are: the bench binary runs itself again with `--produce`
//! (`producer::main_if_asked`), the child connects, says `ready`, waits for `go` on its
//! stdin, sends, and prints the CPU seconds it spent. So the consumer's figures are not
//! shared with the producer's runtime, and each side's CPU is counted once.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use bus_core::{Bus, BusConfig};
use bus_redis::fred::prelude::{ClientLike, ListInterface};
use bus_redis::{RedisConfig, RedisTransport};
use futures::StreamExt;

use crate::cpu::{clock_tick, cpu_seconds};
use crate::messages::{envelopes, order, Order};

/// Sends in flight at once, as in the in-process phases.
const IN_FLIGHT: usize = 1_000;

/// What the child sends.
#[derive(Debug, Clone, Copy)]
pub enum Produce {
    /// One `RPUSH` per envelope onto a list (the circular-list baseline's producer).
    Rpush,
    /// One `Bus::send` per message.
    BusSend,
}

/// A producer process, connected and waiting for [`Producer::go`].
#[derive(Debug)]
pub struct Producer {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Producer {
    /// Starts `count` sends of `kind` to `target` (a list key for `Rpush`, the bus's key
    /// prefix for `BusSend`) on the Redis at `url`; returns when the child is connected.
    pub fn spawn(kind: Produce, url: &str, target: &str, count: u64) -> Producer {
        let exe = std::env::current_exe().expect("the bench's own path");
        let kind = match kind {
            Produce::Rpush => "rpush",
            Produce::BusSend => "bus",
        };
        let mut child = Command::new(exe)
            .args(["--produce", kind, url, target, &count.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the producer process");
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .expect("the producer says ready");
        assert_eq!(line.trim(), "ready", "the producer could not start");
        Producer {
            child,
            stdin,
            stdout,
        }
    }

    /// Lets it send.
    pub fn go(&mut self) {
        writeln!(self.stdin, "go").expect("tell the producer to go");
        self.stdin.flush().expect("tell the producer to go");
    }

    /// Waits until every send returned; the CPU seconds the producer spent sending.
    pub fn finish(mut self) -> f64 {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("the producer reports");
        let status = self.child.wait().expect("the producer exits");
        assert!(status.success(), "the producer failed: {status}");
        line.trim().parse().expect("the producer's CPU seconds")
    }
}

/// Runs as a producer and exits if the process was started with `--produce`.
pub fn main_if_asked() {
    let args: Vec<String> = std::env::args().collect();
    let Some(at) = args.iter().position(|a| a == "--produce") else {
        return;
    };
    let [kind, url, target, count] = &args[at + 1..at + 5] else {
        panic!("--produce KIND URL TARGET COUNT");
    };
    let count: u64 = count.parse().expect("a message count");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(produce(kind, url, target, count));
    std::process::exit(0);
}

async fn produce(kind: &str, url: &str, target: &str, count: u64) {
    let tick = clock_tick();
    let go = || {
        println!("ready");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("wait for go");
        cpu_seconds(std::process::id(), tick)
    };
    let (started, ended) = match kind {
        "rpush" => {
            let config = bus_redis::fred::prelude::Config::from_url(url).expect("a Redis URL");
            let client = bus_redis::fred::prelude::Client::new(config, None, None, None);
            client.init().await.expect("connect");
            let payloads = envelopes(count);
            let started = go();
            futures::stream::iter(payloads)
                .map(|p| client.rpush::<i64, _, _>(target, p))
                .buffer_unordered(IN_FLIGHT)
                .for_each(|r| {
                    r.expect("RPUSH");
                    async {}
                })
                .await;
            (started, cpu_seconds(std::process::id(), tick))
        }
        "bus" => {
            let config = RedisConfig::from_url(url)
                .expect("a Redis URL")
                .prefix(target);
            let transport = RedisTransport::connect(&config).await.expect("connect");
            let bus = Bus::new(transport, BusConfig::default());
            let orders: Vec<Order> = (0..count).map(order).collect();
            let started = go();
            futures::stream::iter(&orders)
                .map(|o| bus.send(o))
                .buffer_unordered(IN_FLIGHT)
                .for_each(|r| {
                    r.expect("send");
                    async {}
                })
                .await;
            (started, cpu_seconds(std::process::id(), tick))
        }
        other => panic!("unknown producer {other}"),
    };
    println!("{}", ended - started);
}
