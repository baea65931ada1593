//! The batch and children scenarios.

use std::collections::BTreeMap;

use bus_core::transport::{Receipt, Source};
use bus_core::{MessageId, RunningHost};
use bytes::Bytes;

use super::{until, wait_done, Done, Grow, Item, Log, Nest, Other, Parent};
use bus_workflows::store::{BatchSpec, Callback, Mark, Outcome, Settle};
use bus_workflows::{BatchId, CallbackKind, ChildPolicy, Error, WorkflowStore, Workflows};

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
    assert_eq!(status.outcome, Some(bus_workflows::BatchOutcome::Success));
}

/// A member adds a sibling after the batch was closed (it is allowed: the batch cannot
/// finish before that member does), which adds another: the batch waits for all of them.
pub async fn members_add_siblings_after_close(
    host: &RunningHost,
    workflows: &Workflows,
    log: &Log,
) {
    let bus = host.bus();
    let batch = workflows
        .batch(&bus)
        .on_success(&Done {
            what: "g success".into(),
        })
        .unwrap()
        .open()
        .await
        .expect("opens");
    batch.send(&Grow { n: 0, more: 4 }).await.expect("adds");
    batch.close().await.expect("closes");
    until("the success callback", || log.count("g success") == 1).await;
    for n in 0..5 {
        assert_eq!(log.count(&format!("grow {n}")), 1, "{:?}", log.all());
    }
    assert!(log.first("g success").unwrap() > log.first("grow 4").unwrap());
    let status = wait_done(workflows, batch.id()).await;
    assert_eq!((status.total, status.succeeded), (5, 5));
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
    // Each child batch sends its callback before its member settles (docs/concepts.md,
    // "Nesting"); the callbacks' handlers then run concurrently, in no set order.
    until("the parent's and the child batches' callbacks", || {
        log.count("n complete") == 1
            && log.count("child success") == 1
            && log.count("child complete") == 1
    })
    .await;
    assert_eq!(log.count("n success"), 0, "a child batch had a dead member");
    let parent = log.first("n complete").unwrap();
    // The child batches' members are items 1000 and up.
    let last_child = log.last_prefix("item 100").max(log.last_prefix("died 100"));
    assert!(
        parent > last_child.expect("the children ran"),
        "the parent's callback ran before a child batch's member"
    );
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

/// A settle that names an older delivery of a member (what the relay's sweep sends for a
/// mark it found stale, or a consumer's late drop of its pre-mark) leaves the mark that a
/// newer delivery wrote since: only that delivery's own settle counts the member.
pub async fn a_late_settle_leaves_a_newer_deliverys_mark(store: &dyn WorkflowStore) {
    let batch = BatchId::generate();
    let mut spec = BatchSpec::new(batch.clone());
    let callback = MessageId::generate();
    spec.callbacks.push(Callback::new(
        CallbackKind::Success,
        "wf-done",
        callback.clone(),
        Bytes::from_static(b"{}"),
    ));
    assert!(store.open(&spec).await.expect("opens"));
    assert_eq!(store.add(&batch, "one", 1, None).await.expect("adds"), 0);
    assert!(store
        .close(&batch)
        .await
        .expect("closes")
        .callbacks
        .is_empty());
    let source = Source::queue("wf-items").unwrap();
    let member = MessageId::generate();
    let delivery = |n: u32| Receipt::stored(Bytes::from_static(b"~7"), n);
    let mark = |n: u32| {
        let outcome = Outcome::Succeeded { result: None };
        Mark::new(0, outcome, member.clone(), source.clone(), delivery(n))
    };
    // Delivery 1 marked, its process gone; delivery 2 marks the member again.
    store.mark(&batch, &[mark(1)]).await.expect("marks 1");
    store.mark(&batch, &[mark(2)]).await.expect("marks 2");
    // What was decided about delivery 1 changes nothing now.
    for late in [
        Settle::Drop {
            index: 0,
            receipt: delivery(1),
        },
        Settle::Confirm {
            index: 0,
            receipt: Some(delivery(1)),
        },
    ] {
        let fired = store
            .settle(&batch, std::slice::from_ref(&late))
            .await
            .expect("settles");
        assert!(fired.callbacks.is_empty(), "{late:?} counted the member");
    }
    let status = store.status(&batch, 10).await.unwrap().expect("the batch");
    assert_eq!(status.pending(), 1, "the member is not counted yet");
    // Delivery 2's own confirmation counts it, and the callback fires once.
    let own = Settle::Confirm {
        index: 0,
        receipt: Some(delivery(2)),
    };
    let fired = store.settle(&batch, &[own]).await.expect("settles");
    let ids: Vec<&MessageId> = fired.callbacks.iter().map(|c| &c.id).collect();
    assert_eq!(ids, [&callback], "the success callback fires");
}
