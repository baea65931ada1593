//! Find and act on all that matches, and edit and retry, against
//! a real redis-server: bounded pages with progress, each criterion, each action, a
//! consumer racing a bulk action (nothing lost, nothing twice), an edited dead letter
//! requeued with its original kept.

mod common;

use bus_core::transport::ConsumerExt;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant, SystemTime};

use bus_core::transport::{ConsumerOptions, DeadLetterReason, Source, Transport};
use bus_management::{Edited, Error, Place, SearchAction as Action, SearchQuery};
use common::{setup, work, Setup, Staging, Work};
use tokio_util::sync::CancellationToken;

fn n_of(found: &bus_management::Found) -> u64 {
    let value: serde_json::Value =
        serde_json::from_str(found.message.as_ref().unwrap().body.get()).unwrap();
    value["n"].as_u64().unwrap()
}

/// Every page of a search, with the progress each reported.
async fn search_all(
    s: &Setup,
    query: &SearchQuery,
    limit: u64,
) -> (Vec<bus_management::Found>, Vec<(u64, u64)>) {
    let mut found = Vec::new();
    let mut progress = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = s
            .management
            .search(&work(), query, cursor.as_deref(), limit)
            .await
            .unwrap();
        assert!(
            page.scanned <= limit,
            "a page read {} > {limit}",
            page.scanned
        );
        progress.push((page.position, page.total));
        found.extend(page.found);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return (found, progress),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_pages_through_ready_delayed_and_dead_by_each_criterion() {
    let s = setup().await;
    let works: Vec<Work> = (1..=500).map(|n| Work { n }).collect();
    s.bus.send_batch(&works).await.unwrap();
    // Dead letters: the first three, with "failure of 1" as their error.
    s.dead_letter(&work(), 3, DeadLetterReason::Rejected).await;
    let later = SystemTime::now() + Duration::from_secs(3600);
    let delayed = s.bus.send_at(&Work { n: 9001 }, later).await.unwrap();
    let headers = BTreeMap::from([("tenant".to_owned(), "Acme-EU".to_owned())]);
    let tagged = s
        .management
        .send(&work(), None, r#"{"n":777}"#, headers)
        .await
        .unwrap();

    // Body text, pages of 100: one match, and progress that ends at the total.
    let (found, progress) = search_all(&s, &SearchQuery::default().body("\"n\":250}"), 100).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].place, n_of(&found[0])), (Place::Ready, 250));
    assert_eq!(
        found[0].storage_id, None,
        "a fresh envelope has no storage id"
    );
    let total = 497 + 1 + 1 + 3;
    assert!(progress.len() >= 5, "{progress:?}");
    assert!(progress.windows(2).all(|w| w[0].0 < w[1].0), "{progress:?}");
    assert_eq!(progress.last(), Some(&(total, total)));

    // Error text: the dead letters (their history says "failure of 1").
    let (found, _) = search_all(&s, &SearchQuery::default().error("FAILURE of"), 1000).await;
    let dead: Vec<u64> = found.iter().map(n_of).collect();
    assert_eq!(dead, [1, 2, 3]);
    assert!(found.iter().all(|f| f.place == Place::Dead));
    assert_eq!(found[0].reason.as_deref(), Some("rejected"));
    // A reason matches too.
    let (found, _) = search_all(&s, &SearchQuery::default().error("rejected"), 1000).await;
    assert_eq!(found.len(), 3);

    // Header, id, type, and a place filter.
    let (found, _) = search_all(&s, &SearchQuery::default().header("tenant", "acme"), 1000).await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].message.as_ref().unwrap().id, tagged.to_string());
    let (found, _) = search_all(&s, &SearchQuery::default().id(delayed.to_string()), 1000).await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].place, Place::Delayed);
    let (found, _) = search_all(
        &s,
        &SearchQuery::default()
            .message_type("work")
            .places([Place::Delayed, Place::Dead]),
        1000,
    )
    .await;
    assert_eq!(found.len(), 4);

    // An empty query and a bad cursor are refused.
    let empty = s
        .management
        .search(&work(), &SearchQuery::default(), None, 10)
        .await;
    assert!(
        matches!(
            empty,
            Err(Error::Redis(bus_redis::Error::InvalidRequest(_)))
        ),
        "{empty:?}"
    );
    let bad = s
        .management
        .search(&work(), &SearchQuery::default().body("x"), Some("x"), 10)
        .await;
    assert!(bad.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_action_changes_only_the_matches_and_reports_them() {
    let s = setup().await;
    let keys = s.keys(&work());
    let works: Vec<Work> = (1..=300).map(|n| Work { n }).collect();
    s.bus.send_batch(&works).await.unwrap();
    s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    let later = SystemTime::now() + Duration::from_secs(3600);
    s.bus.send_at(&Work { n: 5000 }, later).await.unwrap();
    s.bus.send_at(&Work { n: 5001 }, later).await.unwrap();

    // Delete the ready messages whose body says 1xx (n = 100..=199): pages of 50, so
    // the cursor must step back over what each page removed.
    let query = SearchQuery::default()
        .body("\"n\":1")
        .places([Place::Ready]);
    let dry = s
        .management
        .search(&work(), &query, None, 1000)
        .await
        .unwrap();
    let wanted = dry.found.len() as u64;
    assert_eq!(wanted, 111 - 1, "1, 10-19, 100-199 minus the dead n=1");
    let done = s
        .management
        .act_all(&work(), &query, 50, &Action::Delete, |_| {})
        .await
        .unwrap();
    assert_eq!((done.matched, done.changed, done.gone), (wanted, wanted, 0));
    assert_eq!(s.len("LLEN", &keys.ready), 298 - wanted as i64);
    let again = s
        .management
        .search(&work(), &query, None, 1000)
        .await
        .unwrap();
    assert!(again.found.is_empty(), "left: {}", again.found.len());

    // Requeue the delayed ones: due now, on the ready list.
    let delayed = SearchQuery::default()
        .body("\"n\":500")
        .places([Place::Delayed]);
    let done = s
        .management
        .act_all(&work(), &delayed, 1000, &Action::Requeue, |_| {})
        .await
        .unwrap();
    assert_eq!(done.changed, 2);
    assert_eq!(s.len("ZCARD", &keys.delayed), 0);
    // Requeue the dead ones (by error text): back on ready, their errors kept.
    let dead = SearchQuery::default().error("failure");
    let done = s
        .management
        .act_all(&work(), &dead, 1000, &Action::Requeue, |_| {})
        .await
        .unwrap();
    assert_eq!(done.changed, 2);
    assert_eq!(s.len("LLEN", &keys.dead), 0);
    let ready_now = 298 - wanted as i64 + 4;
    assert_eq!(s.len("LLEN", &keys.ready), ready_now);
    // Ready messages asked to be requeued stay as they are.
    let done = s
        .management
        .act_all(
            &work(),
            &SearchQuery::default().body("\"n\":5000"),
            1000,
            &Action::Requeue,
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!((done.matched, done.unchanged, done.changed), (1, 1, 0));

    // Move the 2xx ones to another queue (another slot: copy, then remove).
    let staging = Source::queue("staging").unwrap();
    s.bus.send(&Staging { n: 0 }).await.unwrap();
    let moved = SearchQuery::default().body("\"n\":2");
    let done = s
        .management
        .act_all(
            &work(),
            &moved,
            1000,
            &Action::Move(staging.clone()),
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(done.changed, 111, "2, 20-29, 200-299");
    assert_eq!(s.len("LLEN", &s.keys(&staging).ready), 112);
    assert_eq!(s.len("LLEN", &keys.ready), ready_now - 111);
    // A move to the queue itself is refused.
    let own = s
        .management
        .act(&work(), &moved, None, 10, &Action::Move(work()))
        .await;
    assert!(own.is_err());
}

/// A consumer takes messages while every one of them is being deleted by a search: each
/// message is either handled or deleted, never both, never neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_action_racing_a_consumer_neither_loses_nor_repeats_a_message() {
    let s = setup().await;
    let works: Vec<Work> = (1..=3000).map(|n| Work { n }).collect();
    let ids: BTreeSet<String> = s
        .bus
        .send_batch(&works)
        .await
        .unwrap()
        .into_iter()
        .map(|id| id.to_string())
        .collect();
    let consumer = s
        .transport
        .consumer(&work(), ConsumerOptions::new(Duration::from_secs(60), 20))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let taker = tokio::spawn(async move {
        let mut taken = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let batch = consumer.take(20, &stop).await.unwrap();
            if batch.is_empty() {
                break;
            }
            for delivery in &batch {
                taken.push(
                    bus_core::Envelope::decode(&delivery.payload)
                        .unwrap()
                        .id
                        .to_string(),
                );
            }
            let receipts: Vec<_> = batch.iter().map(|d| d.receipt.clone()).collect();
            consumer.ack(&receipts).await.unwrap();
        }
        consumer.close().await.unwrap();
        taken
    });
    let done = s
        .management
        .act_all(
            &work(),
            &SearchQuery::default().message_type("work"),
            100,
            &Action::Delete,
            |_| {},
        )
        .await
        .unwrap();
    let taken = taker.await.unwrap();
    let deleted: BTreeSet<String> = done.ids.iter().cloned().collect();
    let handled: BTreeSet<String> = taken.iter().cloned().collect();
    assert_eq!(handled.len(), taken.len(), "a message was delivered twice");
    assert!(deleted.is_disjoint(&handled), "deleted and handled");
    println!(
        "deleted {}, handled {}, gone {}",
        deleted.len(),
        handled.len(),
        done.gone
    );
    let union: BTreeSet<String> = deleted.union(&handled).cloned().collect();
    assert_eq!(
        union,
        ids,
        "{} deleted + {} handled",
        deleted.len(),
        handled.len()
    );
    assert_eq!(s.len("LLEN", &s.keys(&work()).ready), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_dead_letter_is_requeued_once_and_its_original_kept() {
    let s = setup().await;
    let keys = s.keys(&work());
    let sent = s.bus.send(&Work { n: 13 }).await.unwrap();
    let dead = s.dead_letter(&work(), 1, DeadLetterReason::Rejected).await;
    let headers = BTreeMap::from([("fixed-by".to_owned(), "ops".to_owned())]);

    // Bad input: refused, nothing changed.
    let bad = s
        .management
        .edit_and_requeue(&work(), &dead[0], headers.clone(), "{not json", "alice")
        .await;
    assert!(
        matches!(bad, Err(Error::Redis(bus_redis::Error::InvalidRequest(_)))),
        "{bad:?}"
    );
    assert_eq!(s.len("LLEN", &keys.dead), 1);

    let edited = s
        .management
        .edit_and_requeue(&work(), &dead[0], headers.clone(), r#"{"n":14}"#, "alice")
        .await
        .unwrap();
    assert_eq!(
        edited,
        Edited::Requeued {
            message_id: sent.to_string()
        }
    );
    assert_eq!(s.len("LLEN", &keys.dead), 0);
    assert_eq!(
        s.len("HLEN", &keys.msgs),
        0,
        "the dead letter's envelope left msgs"
    );
    assert_eq!(s.len("HLEN", &keys.errors), 0);
    let ready = s.management.peek(&work(), 10).await.unwrap();
    assert_eq!(ready.len(), 1);
    let message = ready[0].message.as_ref().unwrap();
    assert_eq!(message.body.get(), r#"{"n":14}"#);
    assert_eq!(message.headers, headers);
    assert_eq!(message.id, sent.to_string());

    let history = s.management.edits(&work(), 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].who, "alice");
    assert_eq!(history[0].storage_id, dead[0]);
    assert_eq!(
        history[0].original.as_ref().unwrap().body.get(),
        r#"{"n":13}"#
    );
    assert_eq!(
        history[0].edited.as_ref().unwrap().body.get(),
        r#"{"n":14}"#
    );
    assert_eq!(history[0].errors.len(), 1, "{:?}", history[0].errors);

    // Once only: the dead letter is gone.
    let again = s
        .management
        .edit_and_requeue(&work(), &dead[0], headers, r#"{"n":15}"#, "alice")
        .await
        .unwrap();
    assert_eq!(again, Edited::NotFound);
    assert_eq!(s.len("LLEN", &keys.ready), 1);
}
