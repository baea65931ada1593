//! Queues exist from their first send (no consumer needed to be listed), and a name or a
//! prefix that does not exist is an error that says what does.

mod common;

use bus_core::transport::Source;
use bus_core::{Envelope, Format};
use bus_management::{Error, Management};
use bus_redis::{keys, RedisConfig};
use common::{setup, work, Work};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_is_listed_from_its_first_send_without_any_consumer() {
    let s = setup().await;
    let ns = s.redis.namespace();
    // No consumer ever started: nothing wrote the registry sets.
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let staging = Source::queue("staging").unwrap();
    let envelope = Envelope::new("staging", Format::Json, &br#"{"n":2}"#[..])
        .encode()
        .unwrap();
    let mut redis = s.redis.client();
    redis
        .cmd(&[&b"RPUSH"[..], s.keys(&staging).ready.as_bytes(), &envelope])
        .unwrap();
    // A foreign consumer registered a subscription the documented way, without the
    // registry; and keys that are not the bus's share the prefix.
    redis
        .cmd(&["SADD", &keys::subscriptions(ns, "paid"), "mail"])
        .unwrap();
    // (Built by hand on purpose: `QueueKeys` builds no key that is not the bus's, nor any
    // with an invalid name.)
    for junk in [
        format!("{ns}:{{junk}}:other"),
        format!("{ns}:{{bad name}}:ready"),
    ] {
        redis.cmd(&["SET", &junk, "x"]).unwrap();
    }
    assert!(redis
        .cmd(&["EXISTS", &keys::queue_registry(ns)])
        .unwrap()
        .as_int()
        .is_some_and(|n| n == 0));

    let m = &s.management;
    assert_eq!(m.queues().await.unwrap(), ["staging", "work"]);
    let topics = m.topics().await.unwrap();
    assert_eq!(topics.len(), 1);
    assert_eq!(
        (topics[0].topic.as_str(), topics[0].subscriptions.clone()),
        ("paid", vec!["mail".to_owned()])
    );
    let all = m.stats_all().await.unwrap();
    let rows: Vec<(&str, u64)> = all.iter().map(|q| (q.queue.as_str(), q.ready)).collect();
    assert_eq!(rows, [("staging", 1), ("work", 1), ("paid/mail", 0)]);

    // A registered queue without keys is still listed, once.
    redis
        .cmd(&["SADD", &keys::queue_registry(ns), "work", "idle"])
        .unwrap();
    assert_eq!(m.queues().await.unwrap(), ["idle", "staging", "work"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_and_wrong_prefixes_are_errors_that_say_what_exists() {
    let s = setup().await;
    let ns = s.redis.namespace();
    s.bus.send(&Work { n: 1 }).await.unwrap();
    let m = &s.management;
    m.ensure_exists(&work()).await.unwrap();

    let typo = Source::queue("wrok").unwrap();
    let err = m.ensure_exists(&typo).await.unwrap_err();
    match &err {
        Error::UnknownSource {
            name,
            prefix,
            known,
            other_prefixes,
        } => {
            assert_eq!((name.as_str(), prefix.as_str()), ("wrok", ns));
            assert_eq!(known, &["work"]);
            assert!(
                other_prefixes.is_empty(),
                "only looked for when nothing is known"
            );
        }
        other => panic!("expected UnknownSource, got {other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("wrok") && text.contains(ns) && text.contains("work"),
        "{text}"
    );

    // Under another prefix nothing exists; the error names where the keys are.
    let config = RedisConfig::from_url(&s.redis.url())
        .unwrap()
        .prefix("wrong");
    let wrong = Management::connect(&config).await.unwrap();
    let err = wrong.ensure_exists(&work()).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, Error::UnknownSource { known, other_prefixes, .. }
            if known.is_empty() && other_prefixes.iter().any(|p| p == ns)),
        "{err:?}"
    );
    assert!(text.contains("prefix wrong") && text.contains(ns), "{text}");
    // (A server shared through BUS_TEST_REDIS_URL may hold other tests' prefixes too.)
    assert!(wrong
        .other_prefixes()
        .await
        .unwrap()
        .iter()
        .any(|p| p == ns));
    assert!(!m.other_prefixes().await.unwrap().iter().any(|p| p == ns));

    // A subscription known only from its topic's `subs` set exists.
    let mail = Source::subscription("paid", "mail").unwrap();
    assert!(m.ensure_exists(&mail).await.is_err());
    s.redis
        .client()
        .cmd(&["SADD", &keys::subscriptions(ns, "paid"), "mail"])
        .unwrap();
    m.ensure_exists(&mail).await.unwrap();
}
