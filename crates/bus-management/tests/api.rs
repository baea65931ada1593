//! The management API against a real Redis: counts, peeks, dead letters, requeue (same
//! queue, some, another slot, same slot), delete, purge, scheduled, subscriptions, sagas.

mod common;

use bus_core::transport::ConsumerExt;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::records::ErrorRecord;
use bus_core::transport::{ConsumerOptions, DeadLetterReason, Source};
use bus_core::{CommandProcessor, Context, Host, ProcessError, SagaStore, Transport};
use bus_management::{Error, Selection};
use bus_redis_saga::RedisSagaStore;
use common::{eventually, setup, work, Paid, Setup, Work};
use tokio_util::sync::CancellationToken;

/// What a host processed: (n, delivery count, message id, headers).
type Seen = (u64, u32, String, BTreeMap<String, String>);

/// Records what a host processed.
#[derive(Default)]
struct Collect(Mutex<Vec<Seen>>);

#[async_trait]
impl CommandProcessor<Work> for Arc<Collect> {
    async fn process(&self, work: Work, ctx: &Context) -> Result<(), ProcessError> {
        self.0.lock().unwrap().push((
            work.n,
            ctx.delivery_count(),
            ctx.message_id().to_string(),
            ctx.headers().clone(),
        ));
        Ok(())
    }
}

impl Collect {
    fn seen(&self) -> Vec<Seen> {
        let mut seen = self.0.lock().unwrap().clone();
        seen.sort_by_key(|s| s.0);
        seen
    }
}

/// Runs a host with a `Work` collector until `count` messages were processed and every
/// key of the queue but its counter is empty again.
async fn process_work(s: &Setup, count: usize) -> Vec<Seen> {
    let collect = Arc::new(Collect::default());
    let host = Host::builder()
        .transport(s.transport.clone())
        .command::<Work, _>(Arc::clone(&collect))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let keys = s.keys(&work());
    let done = eventually(Duration::from_secs(20), || async {
        collect.0.lock().unwrap().len() >= count
            && s.len("LLEN", &keys.ready) == 0
            && s.len("HLEN", &keys.msgs) == 0
    })
    .await;
    host.shutdown().await.unwrap();
    assert!(done, "processed {:?}", collect.seen());
    collect.seen()
}

fn body_n(message: &Option<bus_management::MessageSummary>) -> u64 {
    let value: serde_json::Value =
        serde_json::from_str(message.as_ref().unwrap().body.get()).unwrap();
    value["n"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_peek_dead_letters_and_scheduled_show_what_the_transport_stored() {
    let s = setup().await;
    let ids = s
        .bus
        .send_batch(&[Work { n: 1 }, Work { n: 2 }, Work { n: 3 }])
        .await
        .unwrap();
    let dead = s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    s.bus.send(&Work { n: 4 }).await.unwrap();
    let delayed_id = s
        .bus
        .send_delayed(&Work { n: 5 }, Duration::from_secs(3600))
        .await
        .unwrap();

    let stats = s.management.stats(&work()).await.unwrap();
    assert_eq!(
        (
            stats.queue.as_str(),
            stats.ready,
            stats.in_flight,
            stats.delayed,
            stats.dead_letters
        ),
        ("work", 2, 0, 1, 2)
    );
    assert!(stats.oldest_age_ms.unwrap() < 60_000, "{stats:?}");

    let peeked = s.management.peek(&work(), 10).await.unwrap();
    assert_eq!(peeked.len(), 2);
    assert_eq!(peeked[0].message.as_ref().unwrap().id, ids[2].as_str());
    assert_eq!(body_n(&peeked[0].message), 3);
    assert_eq!(body_n(&peeked[1].message), 4);
    assert_eq!((peeked[0].position, peeked[0].delivery_count), (0, 0));
    assert!(peeked[0].storage_id.is_none());
    assert_eq!(
        stats.oldest_sent_at_ms,
        Some(peeked[0].message.as_ref().unwrap().sent_at_ms)
    );
    assert_eq!(s.management.peek(&work(), 1).await.unwrap().len(), 1);

    let letters = s.management.dead_letters(&work(), 10).await.unwrap();
    assert_eq!(letters.len(), 2);
    for (i, letter) in letters.iter().enumerate() {
        assert_eq!(letter.storage_id, dead[i]);
        assert_eq!(letter.reason.as_deref(), Some("rejected"));
        assert_eq!(letter.delivery_count, 1);
        assert_eq!(letter.errors.len(), 1);
        assert_eq!(letter.errors[0].message, "failure of 1");
        assert!(letter.errors[0].at_ms > 0);
        assert!(letter.dead_lettered_at_ms.unwrap() >= letter.errors[0].at_ms);
        assert_eq!(letter.message.as_ref().unwrap().id, ids[i].as_str());
        assert_eq!(letter.message.as_ref().unwrap().message_type, "work");
        assert_eq!(body_n(&letter.message), i as u64 + 1);
    }
    assert_eq!(
        s.management.dead_letters(&work(), 1).await.unwrap().len(),
        1
    );

    let scheduled = s.management.scheduled(&work(), 10).await.unwrap();
    assert_eq!(scheduled.len(), 1);
    let due_in = scheduled[0]
        .due_at_ms
        .saturating_sub(bus_core::transport::now_ms());
    assert!(
        (3_500_000..=3_600_000).contains(&due_in),
        "due in {due_in} ms"
    );
    assert_eq!(scheduled[0].storage_id, delayed_id.as_str());
    assert_eq!(body_n(&scheduled[0].message), 5);

    // A foreign element that is not an envelope shows as such.
    s.redis
        .client()
        .cmd(&["RPUSH", &s.keys(&work()).ready, "garbage"])
        .unwrap();
    let peeked = s.management.peek(&work(), 10).await.unwrap();
    assert_eq!(peeked.len(), 3);
    assert!(peeked[2].message.is_none());
    assert!(peeked[2].decode_error.as_ref().unwrap().contains("garbage"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_all_gives_full_attempts_keeps_the_errors_and_gets_processed() {
    let s = setup().await;
    let ids = s
        .bus
        .send_batch(&[Work { n: 1 }, Work { n: 2 }, Work { n: 3 }])
        .await
        .unwrap();
    let dead = s.dead_letter(&work(), 3, DeadLetterReason::Rejected).await;
    let report = s
        .management
        .requeue(&work(), &Selection::All, None)
        .await
        .unwrap();
    assert_eq!(report.requeued, dead);
    assert_eq!(report.target, "work");
    assert!(
        report.not_found.is_empty() && report.skipped.is_empty() && report.duplicated.is_empty()
    );

    let keys = s.keys(&work());
    assert_eq!(s.len("LLEN", &keys.dead), 0);
    assert_eq!(s.len("LLEN", &keys.ready), 3);
    assert_eq!(s.len("HLEN", &keys.dead_info), 0);
    assert_eq!(
        s.len("HLEN", &keys.deliveries),
        0,
        "delivery counts start again"
    );
    assert_eq!(s.len("HLEN", &keys.errors), 3, "the error history is kept");
    let peeked = s.management.peek(&work(), 10).await.unwrap();
    let stored: Vec<String> = peeked
        .iter()
        .map(|p| p.storage_id.clone().unwrap())
        .collect();
    assert_eq!(stored, dead);
    assert!(peeked.iter().all(|p| p.delivery_count == 0));

    let seen = process_work(&s, 3).await;
    let got: Vec<(u64, u32, String)> = seen.into_iter().map(|(n, c, id, _)| (n, c, id)).collect();
    let want: Vec<(u64, u32, String)> = (1..=3)
        .map(|n| (n, 1, ids[n as usize - 1].to_string()))
        .collect();
    assert_eq!(got, want, "each runs once more, as a first delivery");
    assert_eq!(s.len("HLEN", &keys.errors), 0);
    let again = s
        .management
        .requeue(&work(), &Selection::All, None)
        .await
        .unwrap();
    assert!(again.requeued.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_some_by_id_reports_what_it_did_not_find() {
    let s = setup().await;
    s.bus
        .send_batch(&[Work { n: 1 }, Work { n: 2 }, Work { n: 3 }])
        .await
        .unwrap();
    let dead = s
        .dead_letter(&work(), 3, DeadLetterReason::DeliveryLimit)
        .await;
    let selection = Selection::Ids(vec![dead[1].clone(), "~999".into(), dead[1].clone()]);
    let report = s
        .management
        .requeue(&work(), &selection, None)
        .await
        .unwrap();
    assert_eq!(report.requeued, vec![dead[1].clone()]);
    assert_eq!(report.not_found, vec!["~999".to_owned()]);

    let left: Vec<String> = s
        .management
        .dead_letters(&work(), 10)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.storage_id)
        .collect();
    assert_eq!(left, vec![dead[0].clone(), dead[2].clone()]);
    let peeked = s.management.peek(&work(), 10).await.unwrap();
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked[0].storage_id.as_deref(), Some(dead[1].as_str()));
    assert_eq!(body_n(&peeked[0].message), 2);

    // No longer a dead letter: asking again finds nothing, and changes nothing.
    let again = s
        .management
        .requeue(&work(), &Selection::Ids(vec![dead[1].clone()]), None)
        .await
        .unwrap();
    assert!(again.requeued.is_empty());
    assert_eq!(again.not_found, vec![dead[1].clone()]);
    assert_eq!(s.len("LLEN", &s.keys(&work()).ready), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_to_another_queue_moves_the_envelope_and_a_host_there_processes_it() {
    let s = setup().await;
    let staging = Source::queue("staging").unwrap();
    // Misrouted messages: type `work` on the staging queue, dead-lettered as unknown.
    let headers = BTreeMap::from([("origin".to_owned(), "test".to_owned())]);
    let mut ids = Vec::new();
    for n in [7, 8] {
        let body = format!(r#"{{"n":{n}}}"#);
        let id = s
            .management
            .send(&staging, Some("work"), &body, headers.clone())
            .await
            .unwrap();
        ids.push(id.to_string());
    }
    let dead = s
        .dead_letter(&staging, 2, DeadLetterReason::UnknownType)
        .await;
    assert_eq!(
        s.management.dead_letters(&staging, 10).await.unwrap()[0]
            .reason
            .as_deref(),
        Some("unknown_type")
    );

    let one = s
        .management
        .requeue(
            &staging,
            &Selection::Ids(vec![dead[0].clone(), "~42".into()]),
            Some(&work()),
        )
        .await
        .unwrap();
    assert_eq!(
        (one.requeued, one.not_found),
        (vec![dead[0].clone()], vec!["~42".to_owned()])
    );
    assert_eq!(one.target, "work");
    let rest = s
        .management
        .requeue(&staging, &Selection::All, Some(&work()))
        .await
        .unwrap();
    assert_eq!(rest.requeued, vec![dead[1].clone()]);
    assert!(rest.duplicated.is_empty());

    // Nothing is left of them at the source.
    let from = s.keys(&staging);
    for (cmd, key) in [
        ("LLEN", &from.dead),
        ("LLEN", &from.ready),
        ("HLEN", &from.msgs),
        ("HLEN", &from.dead_info),
        ("HLEN", &from.errors),
        ("HLEN", &from.deliveries),
        ("ZCARD", &from.inflight),
    ] {
        assert_eq!(s.len(cmd, key), 0, "{key}");
    }
    // At the target they are fresh envelopes, unchanged.
    let peeked = s.management.peek(&work(), 10).await.unwrap();
    assert_eq!(peeked.len(), 2);
    assert!(peeked.iter().all(|p| p.storage_id.is_none()));

    let seen = process_work(&s, 2).await;
    assert_eq!(seen.len(), 2);
    for (i, (n, count, id, headers)) in seen.into_iter().enumerate() {
        assert_eq!((n, count), (7 + i as u64, 1));
        assert_eq!(id, ids[i]);
        assert_eq!(headers.get("origin").map(String::as_str), Some("test"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_to_another_subscription_of_the_topic_is_one_atomic_move() {
    let s = setup().await;
    let mail = Source::subscription("paid", "mail").unwrap();
    let audit = Source::subscription("paid", "audit").unwrap();
    let options = || ConsumerOptions::new(Duration::from_secs(60), 5);
    let audit_consumer = s.transport.consumer(&audit, options()).await.unwrap();
    let mail_consumer = s.transport.consumer(&mail, options()).await.unwrap();
    mail_consumer.close().await.unwrap();
    let id = s.bus.publish(&Paid { n: 9 }).await.unwrap();
    let dead = s.dead_letter(&mail, 1, DeadLetterReason::Rejected).await;

    let report = s
        .management
        .requeue(&mail, &Selection::Ids(dead.clone()), Some(&audit))
        .await
        .unwrap();
    assert_eq!(report.requeued, dead);
    assert_eq!(report.target, "paid/audit");
    let from = s.keys(&mail);
    assert_eq!(s.len("LLEN", &from.dead), 0);
    assert_eq!(s.len("HLEN", &from.msgs), 0);

    // The audit subscription now has its own copy and the moved one.
    let stop = CancellationToken::new();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while got.len() < 2 && std::time::Instant::now() < deadline {
        got.extend(audit_consumer.take(10, &stop).await.unwrap());
    }
    assert_eq!(got.len(), 2, "audit received {}", got.len());
    for delivery in &got {
        let summary = bus_core::Envelope::decode(&delivery.payload).unwrap();
        assert_eq!(summary.id, id);
        assert_eq!(delivery.delivery_count, 1);
    }
    audit_consumer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_dead_letter_removes_every_trace_once() {
    let s = setup().await;
    s.bus
        .send_batch(&[Work { n: 1 }, Work { n: 2 }])
        .await
        .unwrap();
    let dead = s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    assert!(s
        .management
        .delete_dead_letter(&work(), &dead[0])
        .await
        .unwrap());
    assert!(!s
        .management
        .delete_dead_letter(&work(), &dead[0])
        .await
        .unwrap());
    assert!(!s
        .management
        .delete_dead_letter(&work(), "~77")
        .await
        .unwrap());
    let keys = s.keys(&work());
    assert_eq!(s.len("LLEN", &keys.dead), 1);
    for key in [&keys.msgs, &keys.dead_info, &keys.errors, &keys.deliveries] {
        assert!(!s.hexists(key, &dead[0]), "{key} still has {}", dead[0]);
        assert!(s.hexists(key, &dead[1]), "{key} lost {}", dead[1]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_ready_and_delayed_but_keeps_in_flight_and_dead_letters() {
    let s = setup().await;
    s.bus
        .send_batch(&(1..=5).map(|n| Work { n }).collect::<Vec<_>>())
        .await
        .unwrap();
    // n=1 stays dead; n=2 is requeued, so a stored id waits on ready.
    let dead = s.dead_letter(&work(), 2, DeadLetterReason::Rejected).await;
    s.management
        .requeue(&work(), &Selection::Ids(vec![dead[1].clone()]), None)
        .await
        .unwrap();
    // n=3 is held in flight; n=4 waits for a retry an hour away.
    let consumer = s
        .transport
        .consumer(&work(), ConsumerOptions::new(Duration::from_secs(60), 5))
        .await
        .unwrap();
    let stop = CancellationToken::new();
    let held = consumer.take(2, &stop).await.unwrap();
    assert_eq!(held.len(), 2);
    consumer
        .retry(
            &held[1].receipt,
            Duration::from_secs(3600),
            &ErrorRecord::now("later"),
        )
        .await
        .unwrap();
    s.bus
        .send_delayed(&Work { n: 6 }, Duration::from_secs(3600))
        .await
        .unwrap();
    let before = s.management.stats(&work()).await.unwrap();
    assert_eq!(
        (
            before.ready,
            before.in_flight,
            before.delayed,
            before.dead_letters
        ),
        (2, 1, 2, 1)
    );

    let purged = s.management.purge(&work()).await.unwrap();
    assert_eq!((purged.ready, purged.delayed), (2, 2));
    let after = s.management.stats(&work()).await.unwrap();
    assert_eq!(
        (
            after.ready,
            after.in_flight,
            after.delayed,
            after.dead_letters
        ),
        (0, 1, 0, 1)
    );
    // Only the dead letter keeps its stored state, and the in-flight message its lease
    // (a fresh envelope reserved is held in a lease, not in `msgs`: docs/redis-layout.md).
    let keys = s.keys(&work());
    assert_eq!(s.len("HLEN", &keys.msgs), 1);
    assert_eq!(s.len("HLEN", &keys.deliveries), 1);
    assert_eq!(s.len("HLEN", &keys.errors), 1);
    assert!(s.hexists(&keys.msgs, &dead[0]));
    assert_eq!(s.len("ZCARD", &keys.leases), 1);
    // The held message is still the consumer's to ack.
    consumer.ack(&[held[0].receipt.clone()]).await.unwrap();
    assert_eq!(s.len("HLEN", &keys.msgs), 1);
    assert_eq!(s.management.stats(&work()).await.unwrap().in_flight, 0);
    consumer.close().await.unwrap();
    // Purging an empty queue does nothing.
    let nothing = s.management.purge(&work()).await.unwrap();
    assert_eq!((nothing.ready, nothing.delayed), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_deletes_recovered_messages_waiting_to_run_alone() {
    let s = setup().await;
    s.bus
        .send_batch(&(1..=3).map(|n| Work { n }).collect::<Vec<_>>())
        .await
        .unwrap();
    // A consumer takes all three and dies: another one's recovery puts them on `suspects`
    // (a consumer silent for 1.3 s is gone, at a recovery interval of 100 ms).
    let options = ConsumerOptions::new(Duration::from_millis(100), 5)
        .recovery_interval(Duration::from_millis(100));
    let holder = s
        .transport
        .consumer(&work(), options.clone())
        .await
        .unwrap();
    let stop = CancellationToken::new();
    assert_eq!(holder.take(3, &stop).await.unwrap().len(), 3);
    drop(holder);
    let consumer = s.transport.consumer(&work(), options).await.unwrap();
    let keys = s.keys(&work());
    let recovered = bus_test_redis::eventually_async(Duration::from_secs(10), || async {
        consumer.recover().await.unwrap();
        s.len("LLEN", &keys.suspects) == 3
    });
    assert!(recovered.await, "never recovered");
    assert_eq!(s.management.stats(&work()).await.unwrap().ready, 3);
    let purged = s.management.purge(&work()).await.unwrap();
    assert_eq!((purged.ready, purged.delayed), (3, 0));
    assert_eq!(s.len("LLEN", &keys.suspects), 0);
    assert_eq!(s.len("HLEN", &keys.msgs), 0);
    assert_eq!(s.management.stats(&work()).await.unwrap().ready, 0);
    consumer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_and_removing_a_subscription() {
    let s = setup().await;
    let options = || ConsumerOptions::new(Duration::from_secs(60), 5);
    for source in [
        work(),
        Source::subscription("paid", "mail").unwrap(),
        Source::subscription("paid", "audit").unwrap(),
    ] {
        s.transport
            .consumer(&source, options())
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
    }
    assert_eq!(
        s.management.queues().await.unwrap(),
        vec!["work".to_owned()]
    );
    let topics = s.management.topics().await.unwrap();
    assert_eq!(topics.len(), 1);
    assert_eq!(topics[0].topic, "paid");
    assert_eq!(
        topics[0].subscriptions,
        vec!["audit".to_owned(), "mail".to_owned()]
    );
    s.bus.publish(&Paid { n: 1 }).await.unwrap();
    let all = s.management.stats_all().await.unwrap();
    let names: Vec<(&str, u64)> = all.iter().map(|q| (q.queue.as_str(), q.ready)).collect();
    assert_eq!(
        names,
        vec![("work", 0), ("paid/audit", 1), ("paid/mail", 1)]
    );

    // Not empty: refused, and nothing changes.
    let mail = Source::subscription("paid", "mail").unwrap();
    match s
        .management
        .remove_subscription("paid", "mail", false)
        .await
    {
        Err(Error::NotEmpty {
            ready: 1,
            in_flight: 0,
            delayed: 0,
            dead: 0,
            ..
        }) => {}
        other => panic!("expected NotEmpty, got {other:?}"),
    }
    assert_eq!(s.management.stats(&mail).await.unwrap().ready, 1);
    assert_eq!(
        s.management.topics().await.unwrap()[0].subscriptions.len(),
        2
    );

    // Forced: gone, keys and all; publishes no longer reach it.
    let removed = s
        .management
        .remove_subscription("paid", "mail", true)
        .await
        .unwrap();
    assert!(removed.was_registered);
    assert!(removed.deleted_keys >= 1);
    assert_eq!(
        s.management.topics().await.unwrap()[0].subscriptions,
        vec!["audit".to_owned()]
    );
    for key in s.keys(&mail).all() {
        assert_eq!(s.len("EXISTS", key), 0, "{key} is left");
    }
    s.bus.publish(&Paid { n: 2 }).await.unwrap();
    assert_eq!(s.management.stats(&mail).await.unwrap().ready, 0);

    // An empty subscription goes without force; an unknown one is reported as such.
    let audit = Source::subscription("paid", "audit").unwrap();
    s.management.purge(&audit).await.unwrap();
    let removed = s
        .management
        .remove_subscription("paid", "audit", false)
        .await
        .unwrap();
    assert!(removed.was_registered);
    let again = s
        .management
        .remove_subscription("paid", "audit", false)
        .await
        .unwrap();
    assert!(!again.was_registered);
    assert_eq!(again.deleted_keys, 0);
    assert!(s.management.topics().await.unwrap()[0]
        .subscriptions
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sagas_are_listed_with_scan_and_deleted() {
    let s = setup().await;
    let client = s.transport.client().clone();
    let store = RedisSagaStore::new(client).prefix(s.redis.namespace());
    let ttl = Duration::from_secs(600);
    for (partition, id) in [("order", "1"), ("order", "2:b"), ("shipment", "1")] {
        store.create(partition, id, "{}".into(), ttl).await.unwrap();
    }
    let management = s.management.clone().saga_prefix(s.redis.namespace());
    let all = management.sagas(None).await.unwrap();
    let names: Vec<(&str, &str)> = all
        .iter()
        .map(|e| (e.partition.as_str(), e.id.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![("order", "1"), ("order", "2:b"), ("shipment", "1")]
    );
    assert!(all
        .iter()
        .all(|e| e.ttl_ms.is_some_and(|t| t > 500_000 && t <= 600_000)));
    assert_eq!(all[1].key, store.key("order", "2:b"));
    assert_eq!(management.sagas(Some("order")).await.unwrap().len(), 2);
    // By default management reads the sagas under the transport's prefix (here the
    // namespace, which is where these are); another prefix sees none of them.
    assert_eq!(s.management.sagas(None).await.unwrap().len(), 3);
    let elsewhere = s.management.clone().saga_prefix("elsewhere");
    assert!(elsewhere.sagas(None).await.unwrap().is_empty());

    assert!(management.delete_saga("order", "2:b").await.unwrap());
    assert!(!management.delete_saga("order", "2:b").await.unwrap());
    let left: Vec<String> = management
        .sagas(None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        left,
        vec![store.key("order", "1"), store.key("shipment", "1")]
    );
    assert!(management.sagas(Some("bad name")).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_json_says_why_and_stores_nothing() {
    let s = setup().await;
    let error = s
        .management
        .send(&work(), None, r#"{"n": 1,}"#, BTreeMap::new())
        .await
        .expect_err("not JSON");
    assert!(matches!(error, Error::InvalidBody(_)), "{error:?}");
    // serde_json's own words, with the place, once, however it is printed.
    let cause = "key must be a string at line 1 column 9";
    for (how, text) in [
        ("{}", error.to_string()),
        ("ErrorChain", bus_core::ErrorChain(&error).to_string()),
    ] {
        assert_eq!(
            text,
            format!("the message body is not valid JSON: {cause}"),
            "{how}"
        );
    }
    assert_eq!(s.redis.len(&s.keys(&work()).ready), 0);
}
