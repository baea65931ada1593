//! The scenarios every pair of a transport and a workflow store must pass (feature
//! `conformance`): batches, nesting, children and their policies, sleeps and waits, each
//! through a real host. The in-memory pair, Redis and a partitioned Redis queue run them
//! (tests/memory.rs, tests/redis.rs).
//!
//! Each scenario takes the pair and panics (with what went wrong) when it fails. Waits
//! are bounded; nothing sleeps for a fixed time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_core::{
    CommandProcessor, Context, Host, ProcessError, ProcessingSettings, RedisCommand, RunningHost,
    Transport,
};
use serde::{Deserialize, Serialize};

use crate::{
    BatchState, ChildPolicy, ChildResult, Error, WorkflowContext, WorkflowStore, Workflows,
    WorkflowsExt,
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
                .map(|r| match r {
                    ChildResult::Done { index, value } => format!("{index}={}", value.unwrap_or(0)),
                    ChildResult::Dead(dead) => format!("{}=dead", dead.index),
                })
                .collect();
            log.push(format!("{name} results: {}", shown.join(",")));
            Ok(())
        }
        Err(e) if e.source().downcast_ref::<crate::Suspended>().is_some() => Err(e),
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

/// Every scenario, in turn.
pub async fn all(transport: Arc<dyn Transport>, store: Arc<dyn WorkflowStore>) {
    let workflows = Workflows::shared(store);
    let log = Log::default();
    let host = start(Arc::clone(&transport), &workflows, &log).await;
    batch_success(&host, &workflows, &log).await;
    batch_with_deaths(&host, &workflows, &log).await;
    closed_batches_refuse_members(&host, &workflows).await;
    nested_batches(&host, &workflows, &log).await;
    fan_out(&host, &log).await;
    host.shutdown().await.expect("the host shuts down");
}

/// A batch over two queues whose members all succeed (some after a retry): the success
/// callback once, after every member ran; no other callback.
pub async fn batch_success(host: &RunningHost, workflows: &Workflows, log: &Log) {
    let bus = host.bus();
    let batch = workflows
        .batch(&bus)
        .on_success(&Done {
            what: "a success".into(),
        })
        .unwrap()
        .on_complete(&Done {
            what: "a complete".into(),
        })
        .unwrap()
        .on_death(&Done {
            what: "a death".into(),
        })
        .unwrap()
        .open()
        .await
        .expect("opens");
    let items: Vec<Item> = (0..40)
        .map(|n| Item {
            n,
            die: false,
            fail: n % 7 == 0,
        })
        .collect();
    batch.send_all(&items).await.expect("adds items");
    let others: Vec<Other> = (0..10).map(|n| Other { n }).collect();
    batch.send_all(&others).await.expect("adds others");
    batch.close().await.expect("closes");
    until("the success callback", || log.count("a success") == 1).await;
    let status = wait_done(workflows, batch.id()).await;
    assert_eq!((status.total, status.succeeded, status.dead), (50, 50, 0));
    let last_member = log.last_prefix("item ").expect("members ran");
    assert!(
        log.first("a success").unwrap() > last_member,
        "callback after the last member"
    );
    assert_eq!(log.count_prefix("item "), 50);
    assert_eq!(
        log.count("a complete") + log.count("a death"),
        0,
        "{:?}",
        log.all()
    );
}

async fn wait_done(workflows: &Workflows, batch: &crate::BatchId) -> crate::BatchStatus {
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

/// Members that are dead-lettered: the death callback once (at the first), the complete
/// callback once at the end, the dead members with their errors in the status.
pub async fn batch_with_deaths(host: &RunningHost, workflows: &Workflows, log: &Log) {
    let bus = host.bus();
    let batch = workflows
        .batch(&bus)
        .on_success(&Done {
            what: "b success".into(),
        })
        .unwrap()
        .on_complete(&Done {
            what: "b complete".into(),
        })
        .unwrap()
        .on_death(&Done {
            what: "b death".into(),
        })
        .unwrap()
        .open()
        .await
        .expect("opens");
    let items: Vec<Item> = (100..130)
        .map(|n| Item {
            n,
            die: n % 10 == 3,
            fail: false,
        })
        .collect();
    batch.send_all(&items).await.expect("adds");
    batch.close().await.expect("closes");
    until("the complete callback", || log.count("b complete") == 1).await;
    let status = wait_done(workflows, batch.id()).await;
    assert_eq!((status.total, status.succeeded, status.dead), (30, 27, 3));
    let dead: Vec<u64> = status.dead_members.iter().map(|d| d.index).collect();
    assert_eq!(dead, vec![3, 13, 23]);
    assert!(
        status.dead_members[0].error.contains("rejected"),
        "{:?}",
        status.dead_members
    );
    assert_eq!(status.dead_members[0].reason, "rejected");
    until("the death callback", || log.count("b death") == 1).await;
    assert_eq!(log.count("b success"), 0);
    assert!(log.first("b complete").unwrap() > log.last_prefix("item 1").unwrap());
}

/// Adding to a closed batch is refused; an empty batch succeeds when closed.
pub async fn closed_batches_refuse_members(host: &RunningHost, workflows: &Workflows) {
    let bus = host.bus();
    let batch = workflows.batch(&bus).open().await.expect("opens");
    batch.close().await.expect("closes");
    match batch
        .send(&Item {
            n: 1,
            die: false,
            fail: false,
        })
        .await
    {
        Err(Error::Closed { .. }) | Err(Error::Finished { .. }) => {}
        other => panic!("an add after close must be refused, got {other:?}"),
    }
    let status = wait_done(workflows, batch.id()).await;
    assert_eq!(status.outcome, Some(crate::BatchOutcome::Success));
}

/// A member that opens a child batch counts as one member of its batch until the child's
/// callbacks ran.
pub async fn nested_batches(host: &RunningHost, workflows: &Workflows, log: &Log) {
    let bus = host.bus();
    let batch = workflows
        .batch(&bus)
        .on_success(&Done {
            what: "n success".into(),
        })
        .unwrap()
        .on_complete(&Done {
            what: "n complete".into(),
        })
        .unwrap()
        .open()
        .await
        .expect("opens");
    batch
        .send(&Nest {
            children: 5,
            child_dies: false,
        })
        .await
        .expect("adds");
    batch
        .send(&Nest {
            children: 3,
            child_dies: true,
        })
        .await
        .expect("adds");
    batch.close().await.expect("closes");
    until("the parent's complete callback", || {
        log.count("n complete") == 1
    })
    .await;
    assert_eq!(log.count("child success"), 1);
    assert_eq!(log.count("child complete"), 1);
    assert_eq!(log.count("n success"), 0, "a child batch had a dead member");
    let parent = log.first("n complete").unwrap();
    assert!(parent > log.first("child success").unwrap());
    assert!(parent > log.first("child complete").unwrap());
    let status = wait_done(workflows, batch.id()).await;
    assert_eq!((status.total, status.succeeded, status.dead), (2, 1, 1));
    assert_eq!(status.dead_members[0].reason, "child_batch");
}

/// Children with results and each policy, continuing the parent itself or another type.
pub async fn fan_out(host: &RunningHost, log: &Log) {
    let bus = host.bus();
    let parent = |name: &str, dying: Vec<u64>, policy, other| Parent {
        name: name.into(),
        children: 6,
        dying,
        policy,
        other,
    };
    for p in [
        parent("all", vec![], ChildPolicy::Continue, false),
        parent("cont", vec![2], ChildPolicy::Continue, false),
        parent("ign", vec![2], ChildPolicy::Ignore, false),
        parent("fail", vec![2], ChildPolicy::FailParent, false),
        parent("other", vec![4], ChildPolicy::Continue, true),
    ] {
        bus.send(&p).await.expect("sends the parent");
    }
    let expected = BTreeMap::from([
        ("all results: 0=0,1=10,2=20,3=30,4=40,5=50", 1),
        ("cont results: 0=0,1=10,2=dead,3=30,4=40,5=50", 1),
        ("ign results: 0=0,1=10,3=30,4=40,5=50", 1),
        ("fail failed", 1),
        ("other results: 0=0,1=10,2=20,3=30,4=dead,5=50", 1),
    ]);
    until("every continuation", || {
        expected.keys().all(|e| log.count(e) == 1)
    })
    .await;
    for (what, n) in expected {
        assert_eq!(log.count(what), n, "{what}: {:?}", log.all());
    }
    for name in ["all", "cont", "ign", "fail"] {
        assert_eq!(
            log.count(&format!("parent {name} start")),
            2,
            "{name}: one run, one resume"
        );
    }
}

/// A sleep: the step before it runs once, the one after it once, and the handler runs
/// twice (the first run and the resume).
pub async fn sleep_resumes_once(host: &RunningHost, log: &Log) {
    host.bus()
        .send(&Durable {
            name: "nap".into(),
            ms: 300,
            signal: None,
        })
        .await
        .expect("sends");
    until("the sleep's end", || log.count("nap after: slept") == 1).await;
    assert_eq!(log.count("nap before"), 1);
    assert_eq!(log.count("nap run"), 2);
}
