//! The two layouts through the client API, byte by byte in Redis: reservation shapes,
//! token gating, renewal, recovery, release, and scripts run twice (a client re-send).

use std::time::Duration;

use bus_babelqueue::{BabelQueue, Content, DeadLetterBlock, Headers, Options, Reason};
use bus_redis::RedisConfig;
use bus_test_redis::TestRedis;
use serde_json::json;

const URN: &str = "urn:babel:orders:created";

async fn connect(redis: &TestRedis, options: Options) -> BabelQueue {
    let config = RedisConfig::from_url(&redis.url()).expect("url");
    BabelQueue::connect(&config, options)
        .await
        .expect("connect")
}

fn now() -> i64 {
    (bus_core::transport::now_ms() / 1000) as i64
}

fn members(redis: &TestRedis, key: &str) -> Vec<(Vec<u8>, i64)> {
    let reply = redis
        .client()
        .cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
        .expect("ZRANGE");
    reply
        .as_array()
        .unwrap_or_default()
        .chunks(2)
        .map(|p| {
            let score = p[1].as_str().expect("score");
            let score = if score == "inf" {
                i64::MAX
            } else {
                score.parse().expect("score")
            };
            (p[0].as_bytes().expect("member").to_vec(), score)
        })
        .collect()
}

fn list(redis: &TestRedis, key: &str) -> Vec<Vec<u8>> {
    let reply = redis
        .client()
        .cmd(&["LRANGE", key, "0", "-1"])
        .expect("LRANGE");
    reply
        .as_array()
        .unwrap_or_default()
        .iter()
        .map(|r| r.as_bytes().expect("element").to_vec())
        .collect()
}

#[tokio::test]
async fn legacy_reservations_are_token_gated() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = connect(&redis, Options::legacy()).await;
    let headers: Headers = [("traceparent".to_owned(), "00-ab-cd-01".to_owned())].into();
    let sent = bq
        .publish("orders", URN, &json!({"n": 1}), &headers)
        .await
        .expect("publish");
    let stored = list(&redis, "orders").pop().expect("stored");
    assert!(
        stored.starts_with(br#"{"__bq_frame":1,"headers":{"traceparent":"00-ab-cd-01"},"body":"#)
    );

    let consumer = bq.consumer("orders").await.expect("consumer");
    let reserved = consumer
        .reserve(10)
        .await
        .expect("reserve")
        .pop()
        .expect("one");
    assert_eq!(reserved.envelope().expect("envelope").meta(), sent.meta());
    assert_eq!(reserved.headers(), &headers);
    assert_eq!(list(&redis, "orders:processing"), vec![stored.clone()]);
    let deadlines = members(&redis, "orders:processing:deadlines");
    assert_eq!(deadlines.len(), 1);
    let (member, score) = &deadlines[0];
    assert!(member[..32]
        .iter()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_eq!(member[32], b':');
    assert_eq!(&member[33..], &stored[..]);
    assert!(
        (now() + 90 - 1..=now() + 90).contains(score),
        "deadline {score}"
    );

    // Renewal keeps it; the ack removes it; a re-sent ack (or a late one) does nothing.
    assert_eq!(
        consumer
            .renew(&[reserved.handle().clone()])
            .await
            .expect("renew"),
        [true]
    );
    assert_eq!(
        consumer
            .ack(&[reserved.handle().clone()])
            .await
            .expect("ack"),
        1
    );
    assert_eq!(
        consumer
            .ack(&[reserved.handle().clone()])
            .await
            .expect("ack"),
        0
    );
    assert_eq!(
        consumer
            .renew(&[reserved.handle().clone()])
            .await
            .expect("renew"),
        [false]
    );
    assert!(list(&redis, "orders:processing").is_empty());
    assert!(members(&redis, "orders:processing:deadlines").is_empty());
}

#[tokio::test]
async fn legacy_lapsed_reservations_go_back_to_the_tail_before_reserving() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = connect(
        &redis,
        Options::legacy().retry_after(Some(Duration::from_secs(1))),
    )
    .await;
    for n in 0..2 {
        bq.publish("orders", URN, &json!({ "n": n }), &Headers::new())
            .await
            .expect("publish");
    }
    let consumer = bq.consumer("orders").await.expect("consumer");
    let first = consumer
        .reserve(1)
        .await
        .expect("reserve")
        .pop()
        .expect("one");
    // Its deadline lapses (scores are whole seconds).
    let (m, _) = members(&redis, "orders:processing:deadlines")
        .pop()
        .expect("member");
    redis
        .client()
        .cmd(&[&b"ZADD"[..], b"orders:processing:deadlines", b"1", &m])
        .expect("ZADD");
    let next = consumer.reserve(10).await.expect("reserve");
    // The second message first, then the recovered one from the tail, bytes unchanged.
    assert_eq!(next.len(), 2);
    assert_eq!(next[1].body(), first.body());
    assert_eq!(next[1].envelope().expect("env").attempts(), 0);
    // The old reservation's settles are refused.
    assert_eq!(
        consumer.ack(&[first.handle().clone()]).await.expect("ack"),
        0
    );
    let block = DeadLetterBlock::new(Reason::Failed, "orders", 1, None, None);
    assert!(!consumer
        .dead_letter(&first, &block)
        .await
        .expect("dead-letter"));
    assert!(!consumer.retry(&first, Duration::ZERO).await.expect("retry"));
    assert_eq!(list(&redis, "orders:processing").len(), 2);
    assert!(list(&redis, "orders.dlq").is_empty());

    // Release puts them back at the head unchanged; a re-sent release does nothing.
    let handles: Vec<_> = next.iter().map(|r| r.handle().clone()).collect();
    assert_eq!(
        consumer.release(&handles).await.expect("release"),
        [true, true]
    );
    assert_eq!(
        consumer.release(&handles).await.expect("release"),
        [false, false]
    );
    let ready = list(&redis, "orders");
    assert_eq!(ready.len(), 2);
    assert_eq!(&ready[0][..], &next[1].body()[..]);
}

#[tokio::test]
async fn legacy_dead_letter_runs_once() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = connect(&redis, Options::legacy()).await;
    bq.publish("orders", URN, &json!({}), &Headers::new())
        .await
        .expect("publish");
    let consumer = bq.consumer("orders").await.expect("consumer");
    let reserved = consumer
        .reserve(1)
        .await
        .expect("reserve")
        .pop()
        .expect("one");
    let block = DeadLetterBlock::new(Reason::Failed, "orders", 1, Some("e".into()), None);
    assert!(consumer
        .dead_letter(&reserved, &block)
        .await
        .expect("dead-letter"));
    assert!(!consumer
        .dead_letter(&reserved, &block)
        .await
        .expect("again"));
    assert_eq!(list(&redis, "orders.dlq").len(), 1);
}

#[tokio::test]
async fn laravel_reserve_counts_the_attempt_and_acks_the_exact_member() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = connect(&redis, Options::laravel()).await;
    bq.publish(
        "orders",
        URN,
        &json!({"n": 9007199254740993u64}),
        &Headers::new(),
    )
    .await
    .expect("publish");
    assert_eq!(list(&redis, "queues:orders:notify"), vec![b"1".to_vec()]);
    let consumer = bq.consumer("orders").await.expect("consumer");
    let reserved = consumer
        .reserve(5)
        .await
        .expect("reserve")
        .pop()
        .expect("one");
    // The handler sees the job as stored: attempts before this delivery.
    assert_eq!(reserved.envelope().expect("env").attempts(), 0);
    assert!(String::from_utf8_lossy(reserved.body()).contains("9007199254740993"));
    let reserved_members = members(&redis, "queues:orders:reserved");
    assert_eq!(reserved_members.len(), 1);
    let member: serde_json::Value = serde_json::from_slice(&reserved_members[0].0).expect("json");
    assert_eq!(member["attempts"], 1);
    assert!(list(&redis, "queues:orders:notify").is_empty());

    assert_eq!(
        consumer
            .renew(&[reserved.handle().clone()])
            .await
            .expect("renew"),
        [true]
    );
    assert_eq!(
        consumer
            .ack(&[reserved.handle().clone()])
            .await
            .expect("ack"),
        1
    );
    assert!(members(&redis, "queues:orders:reserved").is_empty());
    assert_eq!(
        consumer
            .renew(&[reserved.handle().clone()])
            .await
            .expect("renew"),
        [false]
    );
}

#[tokio::test]
async fn laravel_poison_is_reserved_raw_and_dead_lettered_once() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = connect(&redis, Options::laravel()).await;
    // attempts missing: Laravel's pop cannot count it (a legacy consumer would handle it).
    let body = br#"{"job":"urn:babel:orders:created","data":{}}"#;
    redis
        .client()
        .cmd(&[&b"RPUSH"[..], b"queues:orders", body])
        .expect("RPUSH");
    let consumer = bq.consumer("orders").await.expect("consumer");
    let reserved = consumer
        .reserve(1)
        .await
        .expect("reserve")
        .pop()
        .expect("one");
    assert!(matches!(reserved.content(), Content::Poison(_)));
    assert!(
        consumer.retry(&reserved, Duration::ZERO).await.is_err(),
        "poison is never retried"
    );
    let block = DeadLetterBlock::new(Reason::Poison, "orders", 0, None, None);
    assert!(consumer
        .dead_letter(&reserved, &block)
        .await
        .expect("dead-letter"));
    assert!(!consumer
        .dead_letter(&reserved, &block)
        .await
        .expect("again"));
    let dlq = list(&redis, "queues:orders.dlq");
    assert_eq!(dlq.len(), 1);
    assert!(dlq[0].starts_with(
        br#"{"job":"urn:babel:orders:created","data":{},"dead_letter":{"reason":"poison""#
    ));
    assert_eq!(
        list(&redis, "queues:orders.dlq:notify"),
        vec![b"1".to_vec()]
    );
    assert!(members(&redis, "queues:orders:reserved").is_empty());
}

#[tokio::test]
async fn laravel_lapsed_reservations_and_due_delays_migrate_and_count() {
    let redis = TestRedis::start().expect("redis-server");
    let bq = connect(
        &redis,
        Options::laravel().retry_after(Some(Duration::from_secs(1))),
    )
    .await;
    bq.publish("orders", URN, &json!({}), &Headers::new())
        .await
        .expect("publish");
    let consumer = bq.consumer("orders").await.expect("consumer");
    let first = consumer
        .reserve(1)
        .await
        .expect("reserve")
        .pop()
        .expect("one");
    let (m, _) = members(&redis, "queues:orders:reserved")
        .pop()
        .expect("member");
    redis
        .client()
        .cmd(&[&b"ZADD"[..], b"queues:orders:reserved", b"1", &m])
        .expect("ZADD");
    assert_eq!(consumer.recover().await.expect("recover"), 1);
    assert_eq!(consumer.recover().await.expect("recover again"), 0);
    let again = consumer
        .reserve(1)
        .await
        .expect("reserve")
        .pop()
        .expect("recovered");
    // The recovered job is the reserved member: one attempt counted.
    assert_eq!(again.envelope().expect("env").attempts(), 1);
    // The stale handle cannot settle the new reservation.
    assert_eq!(
        consumer
            .ack(&[first.handle().clone()])
            .await
            .expect("late ack"),
        0
    );
    assert_eq!(members(&redis, "queues:orders:reserved").len(), 1);
    // A release with a delay is gated too: the second run writes nothing.
    assert!(consumer
        .retry(&again, Duration::from_secs(60))
        .await
        .expect("retry"));
    assert!(!consumer
        .retry(&again, Duration::from_secs(60))
        .await
        .expect("re-sent"));
    assert_eq!(members(&redis, "queues:orders:delayed").len(), 1);
}
