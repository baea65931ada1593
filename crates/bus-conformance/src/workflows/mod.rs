//! The scenarios every pair of a transport and a workflow store must pass (feature
//! `workflows`): batches, nesting, children and their policies, sleeps and waits, each
//! through a real host. The in-memory pair, Redis and a partitioned Redis queue run them
//! (bus-workflows' tests/memory.rs and tests/redis.rs).
//!
//! Each scenario takes the pair and panics (with what went wrong) when it fails. Waits
//! are bounded; nothing sleeps for a fixed time.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_core::{
    CommandProcessor, Context, Host, ProcessError, ProcessingSettings, RedisCommand, RunningHost,
    Transport,
};
use serde::{Deserialize, Serialize};

mod batches;
mod durable;

pub use batches::*;
pub use durable::*;

use bus_workflows::{
    BatchState, ChildPolicy, ChildResult, WorkflowContext, WorkflowStore, Workflows, WorkflowsExt,
};

/// The longest a scenario waits for what it expects.
pub const WAIT: Duration = Duration::from_secs(20);

/// A member: `n`; `die` rejects it (a dead letter), `fail` fails its first delivery.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-items")]
pub struct Item {
    /// Its number.
    pub n: u64,
    /// Reject it.
    pub die: bool,
    /// Fail its first delivery (retried).
    pub fail: bool,
}

/// A member on a second queue.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-other")]
pub struct Other {
    /// Its number.
    pub n: u64,
}

/// A callback: which one.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-done")]
pub struct Done {
    /// `success`, `complete` or `death`, and the batch's name.
    pub what: String,
}

/// A member that opens a child batch of `children` items.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-nest")]
pub struct Nest {
    /// How many children.
    pub children: u64,
    /// Whether one child dies.
    pub child_dies: bool,
}

/// A parent that fans out `children` children and records their results.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-parent")]
pub struct Parent {
    /// Its name.
    pub name: String,
    /// How many children.
    pub children: u64,
    /// Which children die.
    pub dying: Vec<u64>,
    /// What a dead child does.
    pub policy: ChildPolicy,
    /// Continue with a [`Summary`] instead of resuming itself.
    pub other: bool,
}

/// A child: returns `n * 10`, or dies.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-child")]
pub struct Child {
    /// Its number.
    pub n: u64,
    /// Reject it.
    pub die: bool,
}

/// A parent's continuation of another type.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-summary")]
pub struct Summary {
    /// The parent's name.
    pub name: String,
}

/// A member that adds `more` siblings to its own batch, one after another.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-grow")]
pub struct Grow {
    /// Its number.
    pub n: u64,
    /// How many more to add after it.
    pub more: u64,
}

/// A durable handler: a marked step, a sleep or a wait, another marked step.
#[derive(Debug, Clone, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "wf-durable")]
pub struct Durable {
    /// Its name.
    pub name: String,
    /// Sleep this long (ms), or wait for `signal` this long.
    pub ms: u64,
    /// Wait for this signal instead of sleeping.
    pub signal: Option<String>,
}

/// What the handlers saw, in order, with when.
#[derive(Debug, Clone, Default)]
pub struct Log {
    entries: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl Log {
    /// Records `what`.
    pub fn push(&self, what: impl Into<String>) {
        self.lock().push((what.into(), Instant::now()));
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Instant)>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
    /// How many entries are `what`.
    pub fn count(&self, what: &str) -> usize {
        self.lock().iter().filter(|(w, _)| w == what).count()
    }
    /// How many entries start with `prefix`.
    pub fn count_prefix(&self, prefix: &str) -> usize {
        self.lock()
            .iter()
            .filter(|(w, _)| w.starts_with(prefix))
            .count()
    }
    /// When `what` was first recorded.
    pub fn first(&self, what: &str) -> Option<Instant> {
        self.lock()
            .iter()
            .find(|(w, _)| w == what)
            .map(|(_, at)| *at)
    }
    /// When the last entry starting with `prefix` was recorded.
    pub fn last_prefix(&self, prefix: &str) -> Option<Instant> {
        self.lock()
            .iter()
            .filter(|(w, _)| w.starts_with(prefix))
            .map(|(_, at)| *at)
            .max()
    }
    /// Every entry.
    pub fn all(&self) -> Vec<String> {
        self.lock().iter().map(|(w, _)| w.clone()).collect()
    }
}

fn settings() -> ProcessingSettings {
    ProcessingSettings::default()
        .max_concurrent_calls(16)
        .retry(bus_core::Backoff::fixed(Duration::from_millis(20)))
}

struct Items(Log);
#[async_trait]
impl CommandProcessor<Item> for Items {
    async fn process(&self, item: Item, ctx: &Context) -> Result<(), ProcessError> {
        if item.fail && ctx.delivery_count() == 1 {
            return Err("first delivery fails".into());
        }
        if item.die {
            self.0.push(format!("died {}", item.n));
            return Err(ProcessError::dead_letter(format!(
                "item {} rejected",
                item.n
            )));
        }
        self.0.push(format!("item {}", item.n));
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

struct Others(Log);
#[async_trait]
impl CommandProcessor<Other> for Others {
    async fn process(&self, other: Other, _: &Context) -> Result<(), ProcessError> {
        self.0.push(format!("item o{}", other.n));
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

struct Callbacks(Log);
#[async_trait]
impl CommandProcessor<Done> for Callbacks {
    async fn process(&self, done: Done, _: &Context) -> Result<(), ProcessError> {
        self.0.push(done.what);
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

struct Nests(Log);
#[async_trait]
impl CommandProcessor<Nest> for Nests {
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
        let items: Vec<Item> = (0..nest.children)
            .map(|n| Item {
                n: 1000 + n,
                die: nest.child_dies && n == 0,
                fail: false,
            })
            .collect();
        child.send_all(&items).await?;
        self.0.push("nest ran");
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

struct Parents(Log);
#[async_trait]
impl CommandProcessor<Parent> for Parents {
    async fn process(&self, parent: Parent, ctx: &Context) -> Result<(), ProcessError> {
        let children: Vec<Child> = (0..parent.children)
            .map(|n| Child {
                n,
                die: parent.dying.contains(&n),
            })
            .collect();
        if parent.other {
            let batch = ctx
                .children(
                    &Summary {
                        name: parent.name.clone(),
                    },
                    parent.policy,
                )
                .await?;
            batch.send_all(&children).await?;
            return Ok(());
        }
        self.0.push(format!("parent {} start", parent.name));
        let results = ctx
            .fan_out::<u64, _, _>(parent.policy, |batch| async move {
                batch.send_all(&children).await?;
                Ok(())
            })
            .await;
        record(&self.0, &parent.name, results)
    }
    fn settings(&self) -> ProcessingSettings {
        settings().dead_letter_delivery_limit(1)
    }
}

/// Records a continuation's results: `<name> results: 0=0,1=10,...,3=dead`, or its error.
fn record(
    log: &Log,
    name: &str,
    results: Result<Vec<ChildResult<u64>>, ProcessError>,
) -> Result<(), ProcessError> {
    match results {
        Ok(results) => {
            let shown: Vec<String> = results
                .iter()
                .map(|r| match r.dead() {
                    Some(_) => format!("{}=dead", r.index()),
                    None => format!("{}={}", r.index(), r.value().copied().unwrap_or(0)),
                })
                .collect();
            log.push(format!("{name} results: {}", shown.join(",")));
            Ok(())
        }
        Err(e)
            if e.source()
                .downcast_ref::<bus_workflows::Suspended>()
                .is_some() =>
        {
            Err(e)
        }
        Err(e) => {
            log.push(format!("{name} failed"));
            Err(e)
        }
    }
}

struct Children(Log);
#[async_trait]
impl CommandProcessor<Child> for Children {
    async fn process(&self, child: Child, ctx: &Context) -> Result<(), ProcessError> {
        if child.die {
            return Err(ProcessError::dead_letter(format!("child {} dies", child.n)));
        }
        ctx.set_result(&(child.n * 10))?;
        self.0.push(format!("child {}", child.n));
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

struct Summaries(Log);
#[async_trait]
impl CommandProcessor<Summary> for Summaries {
    async fn process(&self, summary: Summary, ctx: &Context) -> Result<(), ProcessError> {
        let results = ctx.child_results::<u64>().await;
        record(&self.0, &summary.name, results)
    }
    fn settings(&self) -> ProcessingSettings {
        settings().dead_letter_delivery_limit(1)
    }
}

struct Grows(Log);
#[async_trait]
impl CommandProcessor<Grow> for Grows {
    async fn process(&self, grow: Grow, ctx: &Context) -> Result<(), ProcessError> {
        if grow.more > 0 {
            let next = Grow {
                n: grow.n + 1,
                more: grow.more - 1,
            };
            ctx.siblings()?.send(&next).await?;
        }
        self.0.push(format!("grow {}", grow.n));
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

struct Durables(Log);
#[async_trait]
impl CommandProcessor<Durable> for Durables {
    async fn process(&self, job: Durable, ctx: &Context) -> Result<(), ProcessError> {
        let name = job.name.clone();
        self.0.push(format!("{name} run"));
        ctx.once("before", || async {
            self.0.push(format!("{name} before"));
            Ok::<_, ProcessError>(())
        })
        .await?;
        let got = match &job.signal {
            None => {
                ctx.sleep(Duration::from_millis(job.ms)).await?;
                "slept".to_owned()
            }
            Some(signal) => {
                let got: Option<String> =
                    ctx.wait_for(signal, Duration::from_millis(job.ms)).await?;
                got.unwrap_or_else(|| "timed out".into())
            }
        };
        ctx.once("after", || async {
            self.0.push(format!("{name} after: {got}"));
            Ok::<_, ProcessError>(())
        })
        .await?;
        Ok(())
    }
    fn settings(&self) -> ProcessingSettings {
        settings()
    }
}

/// A host with every processor of these scenarios, started.
pub async fn start(transport: Arc<dyn Transport>, workflows: &Workflows, log: &Log) -> RunningHost {
    Host::builder()
        .workflows(workflows, transport)
        .command::<Item, _>(Items(log.clone()))
        .command::<Other, _>(Others(log.clone()))
        .command::<Done, _>(Callbacks(log.clone()))
        .command::<Nest, _>(Nests(log.clone()))
        .command::<Parent, _>(Parents(log.clone()))
        .command::<Child, _>(Children(log.clone()))
        .command::<Summary, _>(Summaries(log.clone()))
        .command::<Durable, _>(Durables(log.clone()))
        .command::<Grow, _>(Grows(log.clone()))
        .build()
        .expect("the scenarios' host builds")
        .start()
        .await
        .expect("the scenarios' host starts")
}

/// Waits until `condition` holds (at most [`WAIT`]).
pub async fn until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every scenario but the host restart, in turn, on one host.
pub async fn all(transport: Arc<dyn Transport>, store: Arc<dyn WorkflowStore>) {
    a_late_settle_leaves_a_newer_deliverys_mark(&*store).await;
    let workflows = Workflows::shared(store);
    let log = Log::default();
    let host = start(Arc::clone(&transport), &workflows, &log).await;
    batch_success(&host, &workflows, &log).await;
    batch_with_deaths(&host, &workflows, &log).await;
    closed_batches_refuse_members(&host, &workflows).await;
    members_add_siblings_after_close(&host, &workflows, &log).await;
    nested_batches(&host, &workflows, &log).await;
    fan_out(&host, &log).await;
    sleep_resumes_once(&host, &log).await;
    signal_before_the_wait(&host, &workflows, &log).await;
    signal_after_the_wait(&host, &workflows, &log).await;
    wait_times_out(&host, &workflows, &log).await;
    host.shutdown().await.expect("the host shuts down");
}

pub(crate) async fn wait_done(
    workflows: &Workflows,
    batch: &bus_workflows::BatchId,
) -> bus_workflows::BatchStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        let status = workflows
            .status(batch)
            .await
            .expect("status")
            .expect("the batch");
        if status.state == BatchState::Done {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the batch never got done: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
