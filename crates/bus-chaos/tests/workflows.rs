//! Workflows with their hosts SIGKILLed (SPEC §9): three `workflow-host`
//! processes, every setting at its default, one killed and restarted after every few
//! hundred handler runs, while they work through
//!
//! - a batch of 10,000 members, one in ~100 rejected, one delivery in ten failing;
//! - a batch of 100 members that each open a child batch of 20 (every tenth child batch
//!   with a dead member);
//! - 50 parents that each fan out 40 children (every fifth with a dead child) and resume
//!   with their results.
//!
//! Checked from the handlers' own records: every callback and continuation stored once
//! (one message id, at most one first delivery), and run after the last run of every
//! member it waited for; every member run at least once; the batches' counts.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command};
use std::time::Duration;

use bus_conformance::workflows::{Done, Item, Nest, Parent};
use bus_core::{Bus, BusConfig};
use bus_redis::RedisTransport;
use bus_test_redis::{eventually_async, SyncClient, TestRedis};
use bus_workflows::store::MemberResult;
use bus_workflows::{BatchId, BatchState, ChildPolicy, RedisWorkflowStore, Workflows};
use common::kill;

const MEMBERS: u64 = 10_000;
const NESTS: u64 = 100;
const PARENTS: u64 = 50;
const CHILDREN: u64 = 40;
const KILLS: usize = 12;

fn host(url: &str, prefix: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_workflow-host"))
        .env("REDIS_URL", url)
        .env("BUS_PREFIX", prefix)
        .env(
            "RUST_LOG",
            std::env::var("WF_HOST_LOG").unwrap_or_else(|_| "error".into()),
        )
        .spawn()
        .expect("start workflow-host")
}

/// One handler run, as its record says.
#[derive(Debug, Clone)]
struct Run {
    kind: String,
    /// `<batch>:<index>` of a member, `<batch>:<kind>` of a callback, a parent's name.
    about: String,
    /// A member's number, a callback's or continuation's message id.
    what: String,
    delivery: u32,
    start: u128,
    end: u128,
    outcome: String,
}

fn runs(client: &mut SyncClient, prefix: &str) -> Vec<Run> {
    let lines = client.list(&format!("{prefix}:test:wf")).unwrap();
    lines
        .iter()
        .map(|line| {
            let line = String::from_utf8_lossy(line);
            let f: Vec<&str> = line.split(' ').collect();
            let number = |i: usize| f.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
            Run {
                kind: f[0].to_owned(),
                about: f[1].to_owned(),
                what: f[2].to_owned(),
                delivery: number(3) as u32,
                start: number(5),
                end: if f[0] == "cb" || f[0] == "resume" {
                    number(5)
                } else {
                    number(6)
                },
                outcome: f.get(7).or(f.get(6)).map_or("", |v| v).to_owned(),
            }
        })
        .collect()
}

fn batch_of(member: &str) -> &str {
    member.rsplit_once(':').map_or("", |(b, _)| b)
}

/// Every callback header (`<batch>:<kind>`) was stored once: one message id, at most
/// one first delivery (a second stored copy would start at delivery 1 too).
fn each_callback_once(runs: &[Run]) -> BTreeMap<String, u128> {
    let mut first_start: BTreeMap<String, u128> = BTreeMap::new();
    let mut ids: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut fresh: BTreeMap<&str, usize> = BTreeMap::new();
    for run in runs.iter().filter(|r| r.kind == "cb") {
        ids.entry(&run.about).or_default().insert(&run.what);
        *fresh.entry(&run.about).or_default() += usize::from(run.delivery == 1);
        let start = first_start.entry(run.about.clone()).or_insert(run.start);
        *start = (*start).min(run.start);
    }
    for (header, ids) in &ids {
        assert_eq!(
            ids.len(),
            1,
            "callback {header} stored under {} ids",
            ids.len()
        );
        assert!(
            fresh[header] <= 1,
            "callback {header} stored {} times",
            fresh[header]
        );
    }
    first_start
}

/// The latest end of a run of any member of `batch`.
fn last_member_end(runs: &[Run], batch: &str) -> u128 {
    runs.iter()
        .filter(|r| (r.kind == "item" || r.kind == "child") && batch_of(&r.about) == batch)
        .map(|r| r.end)
        .max()
        .unwrap_or(0)
}

async fn done(workflows: &Workflows, batch: &BatchId) -> bool {
    let status = workflows.status(batch).await.unwrap().expect("the batch");
    status.state == BatchState::Done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_callback_and_continuation_once_after_its_members_with_hosts_killed() {
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    let mut client = redis.client();
    let transport = RedisTransport::connect(&bus_test_redis::bus::config(&redis))
        .await
        .unwrap();
    let workflows = Workflows::new(RedisWorkflowStore::for_transport(&transport));
    let bus = Bus::new(transport, BusConfig::default());
    let mut hosts: Vec<Child> = (0..3).map(|_| host(&url, &prefix)).collect();

    let main = workflows
        .batch(&bus)
        .on_success(&Done {
            what: "main".into(),
        })
        .unwrap()
        .on_complete(&Done {
            what: "main".into(),
        })
        .unwrap()
        .on_death(&Done {
            what: "main".into(),
        })
        .unwrap()
        .open()
        .await
        .unwrap();
    let nested = workflows
        .batch(&bus)
        .on_success(&Done {
            what: "nested".into(),
        })
        .unwrap()
        .on_complete(&Done {
            what: "nested".into(),
        })
        .unwrap()
        .open()
        .await
        .unwrap();
    for i in 0..PARENTS {
        let dying = if i % 5 == 0 { vec![3] } else { vec![] };
        let policy = ChildPolicy::Continue;
        let parent = Parent {
            name: format!("p{i}"),
            children: CHILDREN,
            dying,
            policy,
            other: false,
        };
        bus.send(&parent).await.unwrap();
    }
    let nests: Vec<Nest> = (0..NESTS)
        .map(|i| Nest {
            children: 20,
            child_dies: i % 10 == 0,
        })
        .collect();
    nested.send_all(&nests).await.unwrap();
    nested.close().await.unwrap();
    let items: Vec<Item> = (0..MEMBERS)
        .map(|n| Item {
            n,
            die: n % 101 == 7,
            fail: false,
        })
        .collect();
    main.send_all(&items).await.unwrap();
    main.close().await.unwrap();

    // A host is killed after every few hundred handler runs, and started again.
    let records = format!("{prefix}:test:wf");
    let watcher = std::sync::Mutex::new(redis.client());
    let count = || watcher.lock().unwrap().len(&records).unwrap();
    for k in 0..KILLS {
        let seen = count();
        let progressed = || async {
            count() >= seen + 600
                || (done(&workflows, main.id()).await && done(&workflows, nested.id()).await)
        };
        assert!(
            eventually_async(Duration::from_secs(120), progressed).await,
            "no progress"
        );
        let victim = k % hosts.len();
        kill(&mut hosts[victim]);
        hosts[victim] = host(&url, &prefix);
    }
    let resumed = || {
        let runs = runs(&mut watcher.lock().unwrap(), &prefix);
        runs.iter()
            .filter(|r| r.kind == "resume")
            .map(|r| r.about.clone())
            .collect::<BTreeSet<_>>()
            .len()
    };
    // A batch is done once its callbacks are stored: their handlers may not have run yet.
    let callbacks_ran = || {
        let callbacks = redis.counts("wf-done");
        callbacks.ready == 0 && callbacks.inflight == 0
    };
    let finished = || async {
        done(&workflows, main.id()).await
            && done(&workflows, nested.id()).await
            && resumed() == PARENTS as usize
            && callbacks_ran()
    };
    assert!(
        eventually_async(Duration::from_secs(300), finished).await,
        "the workflows never finished"
    );
    for mut host in hosts {
        kill(&mut host);
    }

    let runs = runs(&mut client, &prefix);
    let again = runs.iter().filter(|r| r.delivery > 1).count();
    println!(
        "{} handler runs ({again} redeliveries), {KILLS} hosts killed",
        runs.len()
    );
    let callbacks = each_callback_once(&runs);
    let main_id = main.id().as_str();
    let complete = callbacks[&format!("{main_id}:complete")];
    assert!(!callbacks.contains_key(&format!("{main_id}:success")));
    assert!(
        complete > last_member_end(&runs, main_id),
        "main callback before a member's last run"
    );
    let first_death = runs
        .iter()
        .filter(|r| r.outcome == "die" && batch_of(&r.about) == main_id)
        .map(|r| r.end)
        .min()
        .unwrap();
    assert!(callbacks[&format!("{main_id}:death")] > first_death);
    check_main(&runs, &workflows, main.id()).await;
    check_nested(&runs, &callbacks, &workflows, nested.id(), main.id()).await;
    check_parents(&runs);
}

/// Every member of the main batch ran; the rejected ones are dead, rejected.
async fn check_main(runs: &[Run], workflows: &Workflows, batch: &BatchId) {
    let ran: BTreeSet<u64> = runs
        .iter()
        .filter(|r| r.kind == "item" && batch_of(&r.about) == batch.as_str())
        .filter_map(|r| r.what.parse().ok())
        .collect();
    assert_eq!(ran.len() as u64, MEMBERS, "every member ran");
    let status = workflows.status(batch).await.unwrap().unwrap();
    assert_eq!(status.total, MEMBERS);
    assert_eq!(status.succeeded + status.dead, MEMBERS);
    let mut from = 0;
    while from < MEMBERS {
        let page = workflows.store().results(batch, from, 1000).await.unwrap();
        for (i, result) in page.into_iter().enumerate() {
            let n = from + i as u64;
            match result {
                MemberResult::Dead(dead) if n % 101 == 7 => assert_eq!(dead.reason, "rejected"),
                MemberResult::Dead(dead) => {
                    assert_eq!(dead.reason, "delivery_limit", "{n}: {dead:?}")
                }
                MemberResult::Succeeded(_) => assert_ne!(n % 101, 7, "{n} was rejected"),
                other => panic!("member {n} never settled: {other:?}"),
            }
        }
        from += 1000;
    }
}

/// Each child batch sent one callback, after its members; the nested batch's callback
/// came after every child batch's members.
async fn check_nested(
    runs: &[Run],
    callbacks: &BTreeMap<String, u128>,
    workflows: &Workflows,
    batch: &BatchId,
    main: &BatchId,
) {
    let children: Vec<(&String, &u128)> = callbacks
        .iter()
        .filter(|(h, _)| h.ends_with(":success") || h.ends_with(":complete"))
        .filter(|(h, _)| ![batch.as_str(), main.as_str()].contains(&batch_of(h)))
        .collect();
    assert_eq!(
        children.len(),
        NESTS as usize,
        "one callback per child batch"
    );
    let nested = callbacks[&format!("{}:complete", batch.as_str())];
    for (header, start) in &children {
        assert!(
            **start > last_member_end(runs, batch_of(header)),
            "{header} before its members"
        );
        // (Its callback is sent before the nested batch's member settles; the two
        // callbacks' handlers run concurrently, in no set order.)
        assert!(
            nested > last_member_end(runs, batch_of(header)),
            "the nested batch's callback before a member of its child {header}"
        );
    }
    let status = workflows.status(batch).await.unwrap().unwrap();
    assert_eq!(
        (status.total, status.succeeded + status.dead),
        (NESTS, NESTS)
    );
    assert!(
        status.dead >= NESTS / 10,
        "every tenth child batch had a dead member"
    );
}

/// Each parent resumed once (one first delivery of its resume), after all its children
/// ran, with their results.
fn check_parents(runs: &[Run]) {
    for i in 0..PARENTS {
        let name = format!("p{i}");
        let resumes: Vec<&Run> = runs
            .iter()
            .filter(|r| r.kind == "resume" && r.about == name)
            .collect();
        assert!(!resumes.is_empty(), "{name} never resumed");
        assert!(
            resumes.iter().filter(|r| r.delivery == 1).count() <= 1,
            "{name} resumed twice"
        );
        let first = resumes.iter().map(|r| r.start).min().unwrap();
        let base = i * 1000;
        let last_child = runs
            .iter()
            .filter(|r| r.kind == "child")
            .filter(|r| {
                r.what
                    .parse::<u64>()
                    .is_ok_and(|n| (base..base + CHILDREN).contains(&n))
            })
            .map(|r| r.end)
            .max()
            .unwrap();
        assert!(
            first > last_child,
            "{name} resumed before its last child ran"
        );
        // Every child, the dead one too (the policy is Continue); the sum of the live ones'.
        let sum: u64 = (0..CHILDREN)
            .filter(|k| i % 5 != 0 || *k != 3)
            .map(|k| (base + k) * 10)
            .sum();
        assert_eq!(resumes[0].outcome, format!("{CHILDREN}:{sum}"), "{name}");
    }
}
