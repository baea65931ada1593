//! A host process for the workflow chaos test (tests/workflows.rs), every setting at its
//! default: batch members (`Item`, failing at random), callbacks (`Done`), members that
//! open a child batch (`Nest`), parents that fan out children and resume with their
//! results (`Parent`, `Child`).
//!
//! Environment: `REDIS_URL`, `BUS_PREFIX`. Every handler run appends one line to the list
//! `<prefix>:test:wf` (its own record, read by the test):
//!
//! - `item <member> <n> <delivery> <pid> <start µs> <end µs> <ok|fail|die>`
//! - `cb <batch:kind> <message id> <delivery> <pid> <start µs>`, first thing in the run
//! - `resume <parent> <message id> <delivery> <pid> <start µs> <results>`
//! - `child <member> <n> <delivery> <pid> <start µs> <end µs>`
//!
//! Sets `<prefix>:test:wf-up:<pid>` once running; runs until killed, SIGINT or SIGTERM.

use bus_chaos::process::{connect, init_logging};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bus_conformance::workflows::{Child, Done, Item, Nest, Parent};
use bus_core::{CommandProcessor, Context, Host, ProcessError};
use bus_workflows::{
    ChildResult, RedisWorkflowStore, WorkflowContext, Workflows, WorkflowsExt, CALLBACK_HEADER,
};
use fred::prelude::{Client, KeysInterface, ListInterface};

#[derive(Clone)]
struct Handler {
    client: Client,
    records: String,
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

impl Handler {
    async fn record(&self, line: String) -> Result<(), ProcessError> {
        let _: i64 = self.client.rpush(&self.records, line).await?;
        Ok(())
    }
}

/// One failure in ten deliveries, the same for a given member and delivery in every run.
fn unlucky(n: u64, delivery: u32) -> bool {
    let mut x =
        n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(delivery).wrapping_mul(0xC2B2_AE3D);
    x ^= x >> 29;
    x % 10 == 0
}

fn member(ctx: &Context) -> String {
    ctx.member()
        .map_or_else(|| "-".to_owned(), |m| m.to_string())
}

#[async_trait]
impl CommandProcessor<Item> for Handler {
    async fn process(&self, item: Item, ctx: &Context) -> Result<(), ProcessError> {
        let start = now_us();
        let delivery = ctx.delivery_count();
        let (outcome, result) = if item.die {
            (
                "die",
                Err(ProcessError::dead_letter(format!(
                    "item {} rejected",
                    item.n
                ))),
            )
        } else if unlucky(item.n, delivery) {
            (
                "fail",
                Err(ProcessError::retry(format!("item {} unlucky", item.n))),
            )
        } else {
            ("ok", Ok(()))
        };
        let line = format!(
            "item {} {} {delivery} {} {start} {} {outcome}",
            member(ctx),
            item.n,
            std::process::id(),
            now_us()
        );
        self.record(line).await?;
        result
    }
}

#[async_trait]
impl CommandProcessor<Done> for Handler {
    async fn process(&self, _: Done, ctx: &Context) -> Result<(), ProcessError> {
        let start = now_us();
        let header = ctx
            .headers()
            .get(CALLBACK_HEADER)
            .cloned()
            .unwrap_or_default();
        let line = format!(
            "cb {header} {} {} {} {start}",
            ctx.message_id(),
            ctx.delivery_count(),
            std::process::id()
        );
        self.record(line).await
    }
}

#[async_trait]
impl CommandProcessor<Nest> for Handler {
    async fn process(&self, nest: Nest, ctx: &Context) -> Result<(), ProcessError> {
        let child = ctx
            .batch()?
            .on_success(&Done {
                what: "child success".into(),
            })?
            .on_complete(&Done {
                what: "child complete".into(),
            })?
            .open()
            .await?;
        let base = ctx.member().map_or(0, |m| m.index) * 1000 + 1_000_000;
        let items: Vec<Item> = (0..nest.children)
            .map(|n| Item {
                n: base + n,
                die: nest.child_dies && n == 0,
                fail: false,
            })
            .collect();
        child.send_all(&items).await?;
        Ok(())
    }
}

#[async_trait]
impl CommandProcessor<Parent> for Handler {
    async fn process(&self, parent: Parent, ctx: &Context) -> Result<(), ProcessError> {
        // Children numbered after their parent (`p<i>`: i * 1000 + k), so that the test
        // knows whose they are.
        let base = parent
            .name
            .trim_start_matches('p')
            .parse::<u64>()
            .unwrap_or(0)
            * 1000;
        let children: Vec<Child> = (0..parent.children)
            .map(|k| Child {
                n: base + k,
                die: parent.dying.contains(&k),
            })
            .collect();
        let results = ctx
            .fan_out::<u64, _, _>(parent.policy, |batch| async move {
                batch.send_all(&children).await?;
                Ok(())
            })
            .await?;
        let start = now_us();
        let sum: u64 = results
            .iter()
            .map(|r| match r {
                ChildResult::Done { value, .. } => value.unwrap_or(0),
                _ => 0,
            })
            .sum();
        let line = format!(
            "resume {} {} {} {} {start} {}:{sum}",
            parent.name,
            ctx.message_id(),
            ctx.delivery_count(),
            std::process::id(),
            results.len()
        );
        self.record(line).await
    }
}

#[async_trait]
impl CommandProcessor<Child> for Handler {
    async fn process(&self, child: Child, ctx: &Context) -> Result<(), ProcessError> {
        let start = now_us();
        if child.die {
            return Err(ProcessError::dead_letter(format!("child {} dies", child.n)));
        }
        ctx.set_result(&(child.n * 10))?;
        let line = format!(
            "child {} {} {} {} {start} {}",
            member(ctx),
            child.n,
            ctx.delivery_count(),
            std::process::id(),
            now_us()
        );
        self.record(line).await
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    init_logging();
    let (transport, prefix) = connect().await?;
    let client = transport.client().clone();
    let workflows = Workflows::new(RedisWorkflowStore::for_transport(&transport));
    let handler = Handler {
        client: client.clone(),
        records: format!("{prefix}:test:wf"),
    };
    let running = Host::builder()
        .workflows(&workflows, transport)
        .command::<Item, _>(handler.clone())
        .command::<Done, _>(handler.clone())
        .command::<Nest, _>(handler.clone())
        .command::<Parent, _>(handler.clone())
        .command::<Child, _>(handler)
        .build()?
        .start()
        .await?;
    let pid = std::process::id();
    let up = format!("{prefix}:test:wf-up:{pid}");
    let _: () = client.set(up, pid, None, None, false).await?;
    bus_core::shutdown_signal().await;
    running.shutdown().await?;
    Ok(())
}
