//! The operator's action layer (`Fleet::apply`) against a real Redis: every change is
//! made and appended to the audit log exactly once, by the actor given; a miss records
//! nothing; what a queue's kind cannot do is refused before anything is written; a log
//! that cannot be written leaves the change made and says so.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bus_babelqueue::Layout;
use bus_core::operator::Capability;
use bus_core::transport::{ConsumerOptions, DeadLetterReason, Source};
use bus_core::{SagaStore, Transport};
use bus_management::{
    Action, Actor, Audited, Error, Fleet, OnMatches, Outcome, Pages, SearchQuery, Selection,
};
use bus_redis_saga::RedisSagaStore;
use bus_test_redis::TestRedis;
use common::{setup, work, Work};

/// One audit entry as the test compares it: what, on what, how many, detail.
type Row = (String, String, u64, String);

fn row(action: &str, target: &str, count: u64, detail: &str) -> Row {
    (action.into(), target.into(), count, detail.into())
}

fn queue(name: &str) -> String {
    name.to_owned()
}

/// Every key of the test's namespace (the bus's `<ns>:...` and BabelQueue's `<ns>-...`)
/// with its value as `DUMP` serialises it: equal before and after means nothing was
/// written.
fn snapshot(redis: &TestRedis) -> Vec<(String, Vec<u8>)> {
    let mut client = redis.client();
    redis
        .keys()
        .into_iter()
        .map(|key| {
            let dump = client.cmd(&["DUMP", &key]).unwrap();
            let bytes = dump.as_bytes().map(<[u8]>::to_vec).unwrap_or_default();
            (key, bytes)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_change_is_made_and_audited_once_by_its_actor() {
    let s = setup().await;
    let ns = s.redis.namespace().to_owned();
    let fleet = Fleet::new(s.management.clone().saga_prefix(&ns));
    let ann = Actor::new("ann", "a test");
    for n in 0..5 {
        s.bus.send(&Work { n }).await.unwrap();
    }
    let dead = s.dead_letter(&work(), 4, DeadLetterReason::Rejected).await;
    let delayed = s
        .bus
        .send_delayed(&Work { n: 9 }, Duration::from_secs(600))
        .await
        .unwrap();
    let mail = Source::subscription("paid", "mail").unwrap();
    let consumer = s
        .transport
        .consumer(&mail, ConsumerOptions::new(Duration::from_secs(60), 1))
        .await
        .unwrap();
    consumer.close().await.unwrap();
    let store = RedisSagaStore::new(s.transport.client().clone()).prefix(&ns);
    store
        .create("order", "o-1", "{}".into(), Duration::from_secs(600))
        .await
        .unwrap();

    let mut outcomes: Vec<Outcome> = Vec::new();
    let apply = |action| {
        let fleet = fleet.clone();
        let ann = ann.clone();
        async move { fleet.apply(action, &ann).await.unwrap() }
    };
    let search = |queue: &str, act, pages| Action::ActOnMatches {
        queue: queue.to_owned(),
        query: SearchQuery::default().message_type("work"),
        criteria: "type \"work\"".into(),
        act,
        pages,
    };
    for action in [
        Action::Send {
            queue: queue("fresh"),
            message_type: None,
            body: r#"{"a":1}"#.into(),
            headers: Default::default(),
        },
        Action::Requeue {
            queue: queue("work"),
            selection: Selection::Ids(vec![dead[0].clone()]),
            to: None,
        },
        Action::Requeue {
            queue: queue("work"),
            selection: Selection::Ids(vec![dead[1].clone()]),
            to: Some(queue("staging")),
        },
        Action::DeleteDead {
            queue: queue("work"),
            ids: vec![dead[2].clone(), "nope".into()],
        },
        Action::DeleteDead {
            queue: queue("work"),
            ids: vec!["nope".into()],
        },
        Action::Edit {
            queue: queue("work"),
            id: dead[3].clone(),
            headers: [("fixed".to_owned(), "yes".to_owned())].into(),
            body: r#"{"n":33}"#.into(),
        },
        Action::Cancel {
            queue: queue("work"),
            id: delayed.to_string(),
        },
        Action::Cancel {
            queue: queue("work"),
            id: delayed.to_string(),
        },
        // The moved dead letter waits in staging; ready messages are left as they are by
        // a requeue, so that page changes nothing.
        search("staging", OnMatches::Delete, Pages::All { limit: 100 }),
        search(
            "work",
            OnMatches::Requeue,
            Pages::One {
                cursor: None,
                limit: 100,
            },
        ),
        Action::Pause {
            queue: queue("work"),
        },
        Action::Resume {
            queue: queue("work"),
        },
        Action::CloseBreaker {
            queue: queue("work"),
        },
        Action::Purge {
            queue: queue("work"),
        },
        Action::Unsubscribe {
            topic: "paid".into(),
            name: "mail".into(),
            force: true,
        },
        Action::DeleteSaga {
            partition: "order".into(),
            id: "o-1".into(),
        },
        Action::DeleteSaga {
            partition: "order".into(),
            id: "o-1".into(),
        },
    ] {
        outcomes.push(apply(action).await);
    }

    // What each did, as the tools show it.
    let said: Vec<String> = outcomes.iter().map(|o| o.lines().join(" | ")).collect();
    assert_eq!(said[1], "requeued 1 dead letter(s) of work to work");
    assert_eq!(said[2], "requeued 1 dead letter(s) of work to staging");
    assert_eq!(
        outcomes[3].shortfall().as_deref(),
        Some("not dead letters of work: nope")
    );
    assert_eq!(
        outcomes[4].missed().as_deref(),
        Some("nope is not a dead letter of work")
    );
    assert_eq!(
        outcomes[7].missed(),
        Some(format!("no delayed message {delayed} waits in work"))
    );
    assert_eq!(said[8], "delete: 1 of 1 match(es) of staging");
    assert_eq!(said[13], "purged 3 ready, 0 delayed message(s) of work");
    assert_eq!(
        outcomes[16].missed().as_deref(),
        Some("no saga o-1 in partition order")
    );
    assert_eq!(outcomes[13].json()["ready"], 3);
    let unsubscribed = &outcomes[14].json();
    let deleted_keys = unsubscribed["deleted_keys"].as_u64().unwrap();

    // The log: one entry per change, newest first, by ann through the test; the ids the
    // outcomes hold are the entries'.
    let log = s.management.audit_log(100).await.unwrap();
    let mut entries: Vec<Row> = log
        .iter()
        .rev()
        .map(|e| {
            assert_eq!((e.who.as_str(), e.via.as_str()), ("ann", "a test"), "{e:?}");
            (
                e.action.clone(),
                e.target.clone(),
                e.count,
                e.detail.clone(),
            )
        })
        .collect();
    let edit = entries.remove(3);
    assert!(
        edit.3.starts_with(&format!("dead letter {} (", dead[3])),
        "{edit:?}"
    );
    assert_eq!(
        entries,
        [
            row("requeue", "work", 1, "to work"),
            row("move", "work", 1, "to staging"),
            row("delete", "work", 1, &format!("dead letters {}", dead[2])),
            row("cancel", "work", 1, delayed.as_str()),
            row("delete", "staging", 1, "search matches (type \"work\")"),
            row("pause", "work", 1, ""),
            row("resume", "work", 1, ""),
            row("close-breaker", "work", 1, ""),
            row("purge", "work", 3, "3 ready, 0 delayed"),
            row(
                "unsubscribe",
                "paid/mail",
                1,
                &format!("{deleted_keys} key(s) deleted, forced")
            ),
            row("delete-saga", "order/o-1", 1, ""),
        ]
    );
    let recorded: Vec<&str> = outcomes
        .iter()
        .filter_map(|o| match &o.audited {
            Audited::Recorded(id) => Some(id.as_str()),
            Audited::Failed(e) => panic!("an append failed: {e}"),
            _ => None,
        })
        .collect();
    let logged: Vec<&str> = log.iter().rev().map(|e| e.id.as_str()).collect();
    assert_eq!(recorded, logged);
    // Not recorded: the send, the misses, the page that changed nothing.
    for unrecorded in [0, 4, 7, 9, 16] {
        assert!(
            matches!(outcomes[unrecorded].audited, Audited::Nothing),
            "{unrecorded}: {:?}",
            outcomes[unrecorded]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_a_kind_cannot_make_is_refused_and_writes_nothing() {
    let s = setup().await;
    let ns = s.redis.namespace().to_owned();
    // A BabelQueue queue of this test, with one message and one dead letter.
    let orders = format!("{ns}-orders");
    let envelope = |id: &str| {
        format!(
            r#"{{"job":"urn:babel:orders:created","trace_id":"t-{id}","data":{{"order":1}},"meta":{{"id":"{id}","queue":"{orders}","lang":"python","schema_version":1,"created_at":1}},"attempts":0}}"#
        )
    };
    let mut client = s.redis.client();
    client.cmd(&["RPUSH", &orders, &envelope("m-1")]).unwrap();
    client
        .cmd(&["RPUSH", &format!("{orders}.dlq"), &envelope("m-2")])
        .unwrap();
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let babel = bus_babelqueue::Admin::new(s.transport.client().clone()).layout(Layout::Legacy);
    let fleet = Fleet::new(s.management.clone()).with(Arc::new(babel));
    let address = format!("babel:{orders}");
    let ann = Actor::new("ann", "a test");
    let before = snapshot(&s.redis);

    let refused = |action: Action| {
        let fleet = fleet.clone();
        let ann = ann.clone();
        async move {
            match fleet.apply(action, &ann).await {
                Ok(outcome) => panic!("applied: {outcome:?}"),
                Err(error) => error,
            }
        }
    };
    let pause = refused(Action::Pause {
        queue: address.clone(),
    })
    .await;
    assert!(
        matches!(
            pause,
            Error::Bus(bus_core::Error::Unsupported {
                kind: "babel",
                capability: Capability::Pause
            })
        ),
        "{pause:?}"
    );
    assert_eq!(pause.to_string(), "babel queues cannot be paused");
    // Refused for what the kind cannot do before its name is looked up.
    let missing = refused(Action::Pause {
        queue: format!("babel:{ns}-missing"),
    });
    assert_eq!(missing.await.to_string(), "babel queues cannot be paused");
    let resume = refused(Action::Resume {
        queue: address.clone(),
    });
    assert_eq!(resume.await.to_string(), "babel queues cannot be resumed");
    let close = refused(Action::CloseBreaker {
        queue: address.clone(),
    });
    assert_eq!(
        close.await.to_string(),
        "babel queues cannot have a circuit breaker closed"
    );
    let native_only = [
        (
            "cancel",
            Action::Cancel {
                queue: address.clone(),
                id: "m-1".into(),
            },
        ),
        (
            "send",
            Action::Send {
                queue: address.clone(),
                message_type: None,
                body: "{}".into(),
                headers: Default::default(),
            },
        ),
        (
            "edit",
            Action::Edit {
                queue: address.clone(),
                id: "m-2".into(),
                headers: Default::default(),
                body: "{}".into(),
            },
        ),
        (
            "search",
            Action::ActOnMatches {
                queue: address.clone(),
                query: SearchQuery::default().id("m-1"),
                criteria: String::new(),
                act: OnMatches::Delete,
                pages: Pages::All { limit: 10 },
            },
        ),
    ];
    for (name, action) in native_only {
        let error = refused(action).await;
        assert!(matches!(error, Error::NativeOnly { .. }), "{error:?}");
        assert_eq!(
            error.to_string(),
            format!("`{name}` works on the bus's own queues; {address} is a babel queue")
        );
    }
    // Refused for what the names say, before anything moves.
    let across = refused(Action::Requeue {
        queue: address.clone(),
        selection: Selection::All,
        to: Some(queue("work")),
    });
    assert!(matches!(across.await, Error::AcrossKinds { .. }));
    let typo = refused(Action::Pause {
        queue: queue("wrok"),
    });
    assert!(matches!(typo.await, Error::UnknownSource { ref name, .. } if name == "wrok"));
    let kind = refused(Action::Purge {
        queue: queue("nosuch:x"),
    });
    assert!(matches!(kind.await, Error::UnknownKind { .. }));

    assert_eq!(snapshot(&s.redis), before, "a refused change wrote");
    assert!(s.management.audit_log(10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_written_leaves_the_change_made_and_says_so() {
    let s = setup().await;
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let audit = bus_redis::keys::audit(s.redis.namespace());
    // Not a stream: every append is refused (WRONGTYPE).
    s.redis.client().cmd(&["SET", &audit, "x"]).unwrap();
    let fleet = Fleet::new(s.management.clone());
    let outcome = fleet
        .apply(
            Action::Pause {
                queue: queue("work"),
            },
            &Actor::new("ann", "a test"),
        )
        .await
        .unwrap();
    let failure = outcome.audit_failure().map(ToString::to_string);
    assert!(
        failure.as_deref().is_some_and(|e| e.contains("WRONGTYPE")),
        "{outcome:?}"
    );
    assert!(s.management.stats(&work()).await.unwrap().paused);
}
