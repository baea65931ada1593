//! What workflows cost (docs/performance.md, "Workflows"). A plain `main` that
//! prints a table:
//!
//! `cargo bench -p benches --bench workflows` (`MESSAGES=n`: messages per throughput
//! phase, 100,000 by default; `MEMBERS=n`: the big batch, 1,000,000; `CHILDREN=n`: the
//! fan-in, 10,000; `ROUNDS=n` repeats the throughput phases).
//!
//! - **Per member**, in one run: the same ~100-byte messages sent one by one (256 in
//!   flight) then processed by one host (default settings but 1,000 handlers and 1,000
//!   prefetched, a no-op handler), as plain messages on a plain host, as plain messages on
//!   a host with the workflow layer (its cost when unused), and as members of one batch.
//!   Reported per phase: msg/s, the CPU the redis-server and this process spent per
//!   message (`/proc/<pid>/stat`) and Redis's own account of its command time (`INFO
//!   commandstats`), sending and processing apart.
//! - **A big batch**: `MEMBERS` members, then Redis's memory per member for the batch's own
//!   keys (`MEMORY USAGE`) and for the members' envelopes against plain ones, and the time
//!   from the close to the callback's handler.
//! - **Fan-in**: one parent fans out `CHILDREN` children, each returning a number; the
//!   time from the parent's send to its continuation having read every result.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use benches::cpu::Figure;
use benches::env::{env_number, BenchEnv as Env, RunSettings};
use benches::layout::unsettled;
use benches::messages::{order, Noop, Order};
use bus_core::transport::Source;
use bus_core::{Bus, BusConfig, CommandProcessor, Context, Host, ProcessError, RedisCommand};
use bus_redis::RedisTransport;
use bus_workflows::{
    ChildPolicy, ChildResult, RedisWorkflowStore, WorkflowContext, Workflows, WorkflowsExt,
};
use fred::prelude::{Client, ClientLike, KeysInterface};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

/// What the bus and the workflow store send to Redis themselves (scripts count the
/// commands they call again under those commands' names, so only these are summed).
const CLIENT_COMMANDS: &[&str] = &["evalsha", "rpush", "blmove"];

/// A batch's callback: when its handler ran.
#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "bench-done")]
struct Done {
    id: u64,
}

#[derive(Clone, Default)]
struct Stamp(Arc<Mutex<Option<Instant>>>);

impl Stamp {
    fn at(&self) -> Option<Instant> {
        *self.0.lock().unwrap()
    }
}

#[async_trait]
impl CommandProcessor<Done> for Stamp {
    async fn process(&self, _: Done, _: &Context) -> Result<(), ProcessError> {
        self.0.lock().unwrap().get_or_insert_with(Instant::now);
        Ok(())
    }
}

/// How a phase sends and processes its messages.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    PlainWithLayer,
    Members,
}

/// Sends `count` orders one by one, 256 in flight (as members are sent).
async fn send_plain(bus: &Bus, count: u64) {
    let sends = (0..count).map(|n| {
        let bus = bus.clone();
        async move { bus.send(&order(n)).await }
    });
    let mut sends = futures::stream::iter(sends).buffer_unordered(256);
    while let Some(sent) = sends.next().await {
        sent.unwrap();
    }
}

/// One phase: (sending, processing) figures.
async fn phase(env: &Env, mode: Mode, count: u64) -> (Figure, Figure) {
    let transport = env.transport('w').await;
    let keys = transport.keys(&Source::queue("bench").unwrap());
    let workflows = Workflows::new(RedisWorkflowStore::for_transport(&transport));
    let bus = Bus::new(transport.clone(), BusConfig::default());
    env.reset_stats().await;
    let started = env.meter.start();
    let batch = if mode == Mode::Members {
        let done = Done { id: 0 };
        let batch = workflows
            .batch(&bus)
            .on_success(&done)
            .unwrap()
            .open()
            .await
            .unwrap();
        let orders: Vec<Order> = (0..count).map(order).collect();
        batch.send_all(&orders).await.unwrap();
        batch.close().await.unwrap();
        Some(batch)
    } else {
        send_plain(&bus, count).await;
        None
    };
    let mut sending = env.meter.stop(started, count);
    sending.command_us = env.command_us("sending", count, CLIENT_COMMANDS).await;
    let noop = Noop::default();
    let stamp = Stamp::default();
    let builder = match mode {
        Mode::Plain => Host::builder().transport(transport.clone()),
        _ => Host::builder().workflows(&workflows, transport.clone()),
    };
    let host = builder
        .command::<Order, _>(noop.clone())
        .command::<Done, _>(stamp.clone())
        .build()
        .unwrap();
    env.reset_stats().await;
    let started = env.meter.start();
    let running = host.start().await.unwrap();
    let deadline = deadline(count);
    loop {
        let callback = batch.is_none() || stamp.at().is_some();
        if callback && noop.handled() >= count && unsettled(transport.client(), &keys).await == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "phase not done in time");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut processing = env.meter.stop(started, count);
    processing.command_us = env.command_us("processing", count, CLIENT_COMMANDS).await;
    running.shutdown().await.unwrap();
    (sending, processing)
}

/// `MEMORY USAGE` of `keys`, summed (bytes).
async fn memory(client: &Client, keys: &[String]) -> u64 {
    let mut total = 0;
    for key in keys {
        let command = fred::types::CustomCommand::new_static("MEMORY", None, false);
        let used: Option<u64> = client
            .custom(
                command,
                vec![
                    "USAGE".to_owned(),
                    key.clone(),
                    "SAMPLES".into(),
                    "0".into(),
                ],
            )
            .await
            .unwrap();
        total += used.unwrap_or(0);
    }
    total
}

/// The batch's own keys under `prefix`.
fn batch_keys(prefix: &str, batch: &str) -> Vec<String> {
    [
        "batch",
        "done",
        "settling",
        "dead",
        "results",
        "adds",
        "defer",
        "callbacks",
    ]
    .iter()
    .map(|k| format!("{prefix}:{{wf:{batch}}}:{k}"))
    .collect()
}

async fn big_batch(env: &Env, members: u64) {
    let (transport, prefix) = env.transport_and_prefix('b').await;
    let client = transport.client().clone();
    let ready = transport.keys(&Source::queue("bench").unwrap()).ready;
    let workflows = Workflows::new(RedisWorkflowStore::for_transport(&transport));
    let bus = Bus::new(transport.clone(), BusConfig::default());
    // The plain envelopes' memory, for the members' to compare with.
    send_plain(&bus, 1_000).await;
    let plain = memory(&client, std::slice::from_ref(&ready)).await as f64 / 1_000.0;
    let _: i64 = client.del(&ready).await.unwrap();
    let started = Instant::now();
    let batch = workflows
        .batch(&bus)
        .on_success(&Done { id: 1 })
        .unwrap()
        .open()
        .await
        .unwrap();
    let orders: Vec<Order> = (0..members).map(order).collect();
    for chunk in orders.chunks(10_000) {
        batch.send_all(chunk).await.unwrap();
    }
    let added = started.elapsed();
    let queued = memory(&client, &[ready]).await as f64 / members as f64;
    let keys = batch_keys(&prefix, batch.id().as_str());
    let state_added = memory(&client, &keys).await as f64 / members as f64;
    let stamp = Stamp::default();
    let host = Host::builder()
        .workflows(&workflows, transport.clone())
        .command::<Order, _>(Noop::default())
        .command::<Done, _>(stamp.clone())
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let closed = Instant::now();
    batch.close().await.unwrap();
    let deadline = deadline(members);
    while stamp.at().is_none() {
        assert!(Instant::now() < deadline, "no callback in time");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let to_callback = stamp.at().unwrap() - closed;
    let state_done = memory(&client, &keys).await as f64 / members as f64;
    running.shutdown().await.unwrap();
    println!(
        "{members} members: added in {:.1} s ({:.0}/s); callback {:.1} s after the close ({:.0} members/s)",
        added.as_secs_f64(),
        members as f64 / added.as_secs_f64(),
        to_callback.as_secs_f64(),
        members as f64 / to_callback.as_secs_f64()
    );
    println!(
        "   Redis memory per member: envelope queued {queued:.0} B (a plain one {plain:.0} B, +{:.0} B for its header); \
         the batch's own keys {state_added:.2} B while open, {state_done:.2} B once done",
        queued - plain
    );
}

/// A parent fanning out its children, each returning a number.
#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "bench-parent")]
struct Parent {
    children: u64,
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "bench-child")]
struct Child {
    n: u64,
}

#[derive(Clone, Default)]
struct Parents(Arc<Mutex<Option<(Instant, usize, u64)>>>);

#[async_trait]
impl CommandProcessor<Parent> for Parents {
    async fn process(&self, parent: Parent, ctx: &Context) -> Result<(), ProcessError> {
        let children: Vec<Child> = (0..parent.children).map(|n| Child { n }).collect();
        let results = ctx
            .fan_out::<u64, _, _>(ChildPolicy::Continue, |batch| async move {
                batch.send_all(&children).await?;
                Ok(())
            })
            .await?;
        let sum = results.iter().filter_map(ChildResult::value).sum();
        *self.0.lock().unwrap() = Some((Instant::now(), results.len(), sum));
        Ok(())
    }
    fn settings(&self) -> bus_core::ProcessingSettings {
        settings()
    }
}

#[async_trait]
impl CommandProcessor<Child> for Parents {
    async fn process(&self, child: Child, ctx: &Context) -> Result<(), ProcessError> {
        ctx.set_result(&child.n)?;
        Ok(())
    }
    fn settings(&self) -> bus_core::ProcessingSettings {
        settings()
    }
}

/// The throughput phases' settings: 1,000 handlers, 1,000 prefetched.
fn settings() -> bus_core::ProcessingSettings {
    bus_core::ProcessingSettings::default()
        .max_concurrent_calls(1_000)
        .prefetch_count(1_000)
}

async fn fan_in(env: &Env, children: u64) {
    let transport: RedisTransport = env.transport('c').await;
    let workflows = Workflows::new(RedisWorkflowStore::for_transport(&transport));
    let parents = Parents::default();
    let host = Host::builder()
        .workflows(&workflows, transport.clone())
        .command::<Parent, _>(parents.clone())
        .command::<Child, _>(parents.clone())
        .build()
        .unwrap();
    let running = host.start().await.unwrap();
    let started = Instant::now();
    running.bus().send(&Parent { children }).await.unwrap();
    let deadline = deadline(children);
    let (at, read, sum) = loop {
        if let Some(done) = *parents.0.lock().unwrap() {
            break done;
        }
        assert!(Instant::now() < deadline, "no continuation in time");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(
        (read as u64, sum),
        (children, children * (children - 1) / 2)
    );
    println!(
        "fan-in of {children} children: the continuation read every result {:.2} s after the parent was sent ({:.0} children/s)",
        (at - started).as_secs_f64(),
        children as f64 / (at - started).as_secs_f64()
    );
    running.shutdown().await.unwrap();
}

fn main() {
    let run = RunSettings::from_env(2_000, 100_000);
    let members = env_number("MEMBERS").unwrap_or(if run.smoke { 5_000 } else { 1_000_000 });
    let children = env_number("CHILDREN").unwrap_or(if run.smoke { 500 } else { 10_000 });
    let rt = run.runtime();
    rt.block_on(async {
        let env = Env::start().await;
        for round in 1..=run.rounds {
            println!(
                "\n== round {round}/{}: {} messages sent one by one (256 in flight), then one host (1,000 handlers, no-op) ==",
                run.rounds, run.messages
            );
            // Alternated, so that neither host always runs on a warmer (or busier) machine.
            let ((plain_send, plain), (_, layer)) = if round % 2 == 1 {
                let plain = phase(&env, Mode::Plain, run.messages).await;
                (plain, phase(&env, Mode::PlainWithLayer, run.messages).await)
            } else {
                let layer = phase(&env, Mode::PlainWithLayer, run.messages).await;
                (phase(&env, Mode::Plain, run.messages).await, layer)
            };
            let (member_send, members_fig) = phase(&env, Mode::Members, run.messages).await;
            plain_send.print("send: plain messages");
            member_send.print("send: batch members");
            plain.print("process: plain messages, plain host");
            layer.print("process: plain messages, host with the layer");
            members_fig.print("process: batch members (to the callback)");
            println!("-- ratios of this round:");
            println!(
                "   members / plain: sending {:.1}%, processing {:.1}%, end to end {:.1}%; per message, \
                 Redis CPU {:.2}x, Redis command time {:.2}x, client CPU {:.2}x",
                member_send.rate / plain_send.rate * 100.0,
                members_fig.rate / plain.rate * 100.0,
                end_to_end(member_send, members_fig) / end_to_end(plain_send, plain) * 100.0,
                (member_send.redis_us + members_fig.redis_us) / (plain_send.redis_us + plain.redis_us),
                (member_send.command_us + members_fig.command_us)
                    / (plain_send.command_us + plain.command_us),
                (member_send.client_us + members_fig.client_us) / (plain_send.client_us + plain.client_us),
            );
            println!(
                "   the layer unused (plain messages): processing {:.1}% of a plain host's rate; \
                 Redis CPU {:.2}x, Redis command time {:.2}x, client CPU {:.2}x",
                layer.rate / plain.rate * 100.0,
                layer.redis_us / plain.redis_us,
                layer.command_us / plain.command_us,
                layer.client_us / plain.client_us
            );
        }
        println!();
        big_batch(&env, members).await;
        fan_in(&env, children).await;
        env.close().await;
    });
}

/// When a wait for `count` messages fails the run: slower than 1,000 a second after a
/// minute's start, something is stuck (CI runs this as a test).
fn deadline(count: u64) -> Instant {
    Instant::now() + Duration::from_secs(60) + Duration::from_millis(count)
}

/// Messages per second from the first send to the last settle.
fn end_to_end(send: Figure, process: Figure) -> f64 {
    1.0 / (1.0 / send.rate + 1.0 / process.rate)
}
