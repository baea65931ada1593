//! The outbox against a real PostgreSQL and a real Redis: what commits is relayed, what
//! rolls back never is; options carry through; a resend stores nothing; bad rows are
//! moved aside; outages of either server.

mod common;

use bus_core::transport::ConsumerExt;
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use bus_core::{Message, SendOptions};
use bus_outbox::{Error, Outbox, Relay, RelayConfig};
use bus_test_redis::eventually_async;
use common::{Env, Order, Placed, WAIT};
use tokio_util::sync::CancellationToken;

fn order(key: &str, seq: u64) -> Order {
    Order {
        key: key.into(),
        seq,
    }
}

#[tokio::test]
async fn a_committed_send_is_relayed_and_a_rolled_back_one_never_is() {
    let env = Env::start().await;
    env.sql("CREATE TABLE business (n int)");
    let mut tx = env.pool.begin().await.unwrap();
    bus_outbox::sqlx::query("INSERT INTO business VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let committed = env.outbox.send(&mut tx, &order("a", 1)).await.unwrap();
    // Nothing reaches Redis before the commit, even with a relay cycle in between.
    let relay = Relay::new(
        env.pool.clone(),
        env.transport.clone(),
        RelayConfig::default(),
    );
    assert_eq!(relay.relay_once().await.unwrap().claimed, 0);
    tx.commit().await.unwrap();

    let mut tx = env.pool.begin().await.unwrap();
    bus_outbox::sqlx::query("INSERT INTO business VALUES (2)")
        .execute(&mut *tx)
        .await
        .unwrap();
    env.outbox.send(&mut tx, &order("a", 2)).await.unwrap();
    tx.rollback().await.unwrap();

    let relayed = relay.relay_once().await.unwrap();
    assert_eq!((relayed.claimed, relayed.sent), (1, 1));
    let ready = env.orders();
    assert_eq!(ready, vec![(committed.to_string(), order("a", 1))]);
    assert_eq!(env.sql("SELECT count(*) FROM bus_outbox"), "0");
    assert_eq!(env.sql("SELECT n FROM business"), "1");
    assert_eq!(relay.relay_once().await.unwrap().claimed, 0);
}

#[tokio::test]
async fn options_and_events_carry_through_the_outbox() {
    let env = Env::start().await;
    let mut tx = env.pool.begin().await.unwrap();
    let options = SendOptions::new().header("tenant", "acme").key("k1");
    let with_header = env
        .outbox
        .send_with(&mut tx, &order("k1", 1), &options)
        .await
        .unwrap();
    let later = SystemTime::now() + Duration::from_secs(3600);
    env.outbox
        .send_with(&mut tx, &order("d", 1), &SendOptions::new().at(later))
        .await
        .unwrap();
    let dedup = SendOptions::new().dedup_key("once");
    env.outbox
        .send_with(&mut tx, &order("x", 1), &dedup)
        .await
        .unwrap();
    env.outbox
        .send_with(&mut tx, &order("x", 2), &dedup)
        .await
        .unwrap();
    // Events: no partition or deduplication key; a subscription gets a copy.
    let refused = env
        .outbox
        .publish_with(&mut tx, &Placed { n: 1 }, &SendOptions::new().key("k"))
        .await;
    assert!(matches!(refused, Err(Error::Bus(_))), "{refused:?}");
    tx.commit().await.unwrap();

    let subscription = bus_core::transport::Source::subscription(Placed::NAME, "audit").unwrap();
    let consumer = env
        .transport
        .consumer(
            &subscription,
            bus_core::transport::ConsumerOptions::new(Duration::from_secs(30), 5),
        )
        .await
        .unwrap();
    let mut tx = env.pool.begin().await.unwrap();
    let event = env.outbox.publish(&mut tx, &Placed { n: 7 }).await.unwrap();
    tx.commit().await.unwrap();

    let relay = Relay::new(
        env.pool.clone(),
        env.transport.clone(),
        RelayConfig::default(),
    );
    let relayed = relay.relay_once().await.unwrap();
    assert_eq!((relayed.sent, relayed.dead, relayed.kept), (5, 0, 0));
    let ready = env.ready("orders");
    let ids: Vec<String> = ready.iter().map(|e| e.id.to_string()).collect();
    assert_eq!(
        ready.len(),
        2,
        "{ids:?}: the keyed send and the first deduplicated one"
    );
    assert_eq!(ready[0].id, with_header);
    assert_eq!(ready[0].headers["tenant"], "acme");
    assert_eq!(env.redis.counts("orders").delayed, 1);
    let stop = CancellationToken::new();
    let events = consumer.take(10, &stop).await.unwrap();
    assert_eq!(events.len(), 1);
    let envelope = bus_core::Envelope::decode(&events[0].payload).unwrap();
    assert_eq!(envelope.id, event);
}

/// A relay that dies after the transport stored its batch and before its transaction
/// deleted the rows: the next cycle sends the rows again, and the transport's
/// deduplication stores nothing twice.
#[tokio::test]
async fn a_resend_after_a_crash_between_the_write_and_the_delete_stores_nothing() {
    let env = Env::start().await;
    let mut tx = env.pool.begin().await.unwrap();
    for seq in 0..20 {
        env.outbox.send(&mut tx, &order("k", seq)).await.unwrap();
    }
    tx.commit().await.unwrap();
    let crashing = Relay::new(
        env.pool.clone(),
        env.transport.clone(),
        RelayConfig::default().after_send(|| panic!("the relay dies here")),
    );
    let crashed = tokio::spawn(async move { crashing.relay_once().await }).await;
    assert!(crashed.is_err(), "the cycle must have died");
    assert_eq!(env.orders().len(), 20, "the batch reached Redis");
    assert_eq!(
        env.sql("SELECT count(*) FROM bus_outbox"),
        "20",
        "and its rows stayed"
    );

    let relay = Relay::new(
        env.pool.clone(),
        env.transport.clone(),
        RelayConfig::default(),
    );
    let relayed = relay.relay_once().await.unwrap();
    assert_eq!((relayed.sent, relayed.kept), (20, 0));
    let orders = env.orders();
    let seqs: Vec<u64> = orders.iter().map(|(_, o)| o.seq).collect();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>(), "each once, in order");
    assert_eq!(env.sql("SELECT count(*) FROM bus_outbox"), "0");
}

/// Rows no transport will take (inserted by hand, or by another writer) are moved aside
/// with a reason, and the rows around them are relayed.
#[tokio::test]
async fn unsendable_rows_are_moved_aside_with_a_reason_and_the_rest_goes_on() {
    let env = Env::start().await;
    let mut tx = env.pool.begin().await.unwrap();
    env.outbox.send(&mut tx, &order("k", 1)).await.unwrap();
    tx.commit().await.unwrap();
    let good = env.sql("SELECT payload FROM bus_outbox");
    let insert = |destination: &str, payload: &str| {
        env.sql(&format!(
            "INSERT INTO bus_outbox (kind, destination, message_id, partition_key, payload) \
             VALUES ('queue', '{destination}', 'm-{destination}', 'k', {payload})"
        ));
    };
    insert("no:such{queue}", &format!("'{good}'::bytea"));
    insert("orders", "'not an envelope'::bytea");
    insert(
        "orders",
        &format!("'{good}'::bytea || repeat('x', 3000)::bytea"),
    );
    let mut tx = env.pool.begin().await.unwrap();
    env.outbox.send(&mut tx, &order("k", 2)).await.unwrap();
    tx.commit().await.unwrap();

    let relay = Relay::new(
        env.pool.clone(),
        env.transport.clone(),
        RelayConfig::default().max_message_size(2048),
    );
    let relayed = relay.relay_once().await.unwrap();
    assert_eq!((relayed.sent, relayed.dead, relayed.kept), (2, 3, 0));
    let seqs: Vec<u64> = env.orders().iter().map(|(_, o)| o.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
    let reasons = env.sql("SELECT destination || ' ' || reason FROM bus_outbox_dead ORDER BY id");
    let reasons: Vec<&str> = reasons.lines().collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(
        reasons[0].starts_with("no:such{queue} invalid destination"),
        "{reasons:?}"
    );
    assert!(reasons[1].starts_with("orders undecodable"), "{reasons:?}");
    assert!(reasons[2].starts_with("orders too large"), "{reasons:?}");
    let lag = relay.lag().await.unwrap();
    assert_eq!((lag.waiting, lag.dead), (0, 3));
}

/// PostgreSQL down: the send returns the database's error, and the transaction it was
/// part of wrote nothing at all.
#[tokio::test]
async fn with_postgres_down_the_send_fails_and_nothing_is_half_written() {
    let mut env = Env::start().await;
    env.sql("CREATE TABLE business (n int)");
    let mut tx = env.pool.begin().await.unwrap();
    bus_outbox::sqlx::query("INSERT INTO business VALUES (1)")
        .execute(&mut *tx)
        .await
        .unwrap();
    env.pg.kill();
    let sent = env.outbox.send(&mut tx, &order("k", 1)).await;
    assert!(matches!(sent, Err(Error::Database(_))), "{sent:?}");
    drop(tx);
    let mut conn = env.pool.acquire().await;
    assert!(conn.is_err(), "the database is down");
    env.pg.restart().unwrap();
    conn = env.pool.acquire().await;
    let sent = env.outbox.send(&mut conn.unwrap(), &order("k", 2)).await;
    assert!(sent.is_ok(), "{sent:?}: the pool reconnects");
    assert_eq!(env.sql("SELECT count(*) FROM business"), "0");
    assert_eq!(env.sql("SELECT count(*) FROM bus_outbox"), "1");
}

/// Redis down: committed rows wait (the lag shows them), and the running relay
/// delivers them by itself once Redis is back.
#[tokio::test]
async fn with_redis_down_rows_wait_visibly_and_the_relay_resumes_by_itself() {
    let env = Env::start().await;
    // Every write fsynced: the SIGKILL loses nothing Redis acknowledged.
    let mut redis = bus_test_redis::RedisServer::builder()
        .appendonly(true)
        .arg("--appendfsync")
        .arg("always")
        .start()
        .unwrap();
    let redis_test = bus_test_redis::TestRedis::with_url(redis.url()).unwrap();
    let transport = std::sync::Arc::new(bus_test_redis::bus::transport(&redis_test).await);
    let relay = Relay::new(
        env.pool.clone(),
        transport.clone(),
        RelayConfig::default().max_backoff(Duration::from_millis(200)),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (relay, stop) = (relay.clone(), stop.clone());
        async move { relay.run_until(stop).await }
    });
    let outbox = Outbox::new(bus_core::Bus::new(
        transport,
        bus_core::BusConfig::default(),
    ));
    let keyed = SendOptions::new().key("k");
    let mut tx = env.pool.begin().await.unwrap();
    outbox
        .send_with(&mut tx, &order("k", 0), &keyed)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(eventually_async(WAIT, || async { relay.lag().await.unwrap().waiting == 0 }).await);

    redis.kill();
    let mut tx = env.pool.begin().await.unwrap();
    for seq in 1..=10 {
        outbox
            .send_with(&mut tx, &order("k", seq), &keyed)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let waiting = eventually_async(WAIT, || async {
        let lag = relay.lag().await.unwrap();
        lag.waiting == 10 && lag.oldest >= Duration::from_millis(300)
    })
    .await;
    assert!(waiting, "the rows wait, and their age shows");

    redis.restart().unwrap();
    let drained =
        eventually_async(WAIT, || async { relay.lag().await.unwrap().waiting == 0 }).await;
    assert!(drained, "the relay resumed by itself");
    stop.cancel();
    running.await.unwrap().unwrap();
    let keys = bus_redis::keys::QueueKeys::new(
        redis_test.namespace(),
        &bus_core::transport::Source::queue("orders").unwrap(),
    );
    let stored = redis.client().list(&keys.ready).unwrap();
    let seqs: Vec<u64> = stored
        .iter()
        .map(|e| {
            let envelope = bus_core::Envelope::decode(e).unwrap();
            envelope
                .format
                .decode::<Order>("orders", &envelope.body)
                .unwrap()
                .seq
        })
        .collect();
    assert_eq!(seqs, (0..=10).collect::<Vec<_>>(), "each once, in order");
}

/// Three relays on one table, several writers: every row relayed once, and the rows of
/// each key stored in Redis in the order they were written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_relays_share_the_table_relay_each_row_once_and_keep_each_keys_order() {
    const KEYS: u64 = 12;
    const PER_KEY: u64 = 40;
    let env = Env::start().await;
    let stop = CancellationToken::new();
    let mut relays = Vec::new();
    for _ in 0..3 {
        let relay = Relay::new(
            env.pool.clone(),
            env.transport.clone(),
            RelayConfig::default().batch_size(7),
        );
        let stop = stop.clone();
        relays.push(tokio::spawn(async move { relay.run_until(stop).await }));
    }
    // Four writers; each key's rows written by one writer, in order, one or a few per
    // transaction, interleaved with the other keys and with unkeyed rows.
    let mut writers = Vec::new();
    for writer in 0..4u64 {
        let (pool, outbox) = (env.pool.clone(), env.outbox.clone());
        writers.push(tokio::spawn(async move {
            for seq in 0..PER_KEY {
                let mut tx = pool.begin().await.unwrap();
                for key in (writer..KEYS).step_by(4) {
                    let name = format!("key-{key}");
                    let keyed = SendOptions::new().key(name.clone());
                    outbox
                        .send_with(&mut tx, &order(&name, seq), &keyed)
                        .await
                        .unwrap();
                }
                outbox
                    .send(&mut tx, &order("unkeyed", writer * 1000 + seq))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let total = (KEYS * PER_KEY + 4 * PER_KEY) as usize;
    let all_there = eventually_async(WAIT, || async {
        env.sql("SELECT count(*) FROM bus_outbox") == "0"
    })
    .await;
    assert!(all_there, "the relays drained the table");
    stop.cancel();
    for relay in relays {
        relay.await.unwrap().unwrap();
    }
    let orders = env.orders();
    assert_eq!(orders.len(), total, "every row relayed once");
    let ids: BTreeSet<&str> = orders.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), total, "no message twice");
    for key in 0..KEYS {
        let name = format!("key-{key}");
        let seqs: Vec<u64> = orders
            .iter()
            .filter(|(_, o)| o.key == name)
            .map(|(_, o)| o.seq)
            .collect();
        assert_eq!(seqs, (0..PER_KEY).collect::<Vec<_>>(), "{name} in order");
    }
}

struct Collect(std::sync::Arc<std::sync::Mutex<Vec<u64>>>);

#[async_trait::async_trait]
impl bus_core::CommandProcessor<Order> for Collect {
    async fn process(
        &self,
        order: Order,
        _: &bus_core::Context,
    ) -> Result<(), bus_core::ProcessError> {
        self.0.lock().unwrap().push(order.seq);
        Ok(())
    }
}

/// A relay run beside a host (HostExt): woken by the commit's notification, it relays
/// what the application wrote, the host handles it, and both stop on shutdown.
#[tokio::test]
async fn a_relay_beside_a_host_delivers_and_stops_with_it() {
    use bus_outbox::HostExt;
    let env = Env::start().await;
    let handled = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let host = bus_core::Host::builder()
        .transport(env.transport.clone())
        .command::<Order, _>(Collect(handled.clone()))
        .build()
        .unwrap();
    // A long poll: only the notification can wake the relay in time.
    let relay = Relay::new(
        env.pool.clone(),
        env.transport.clone(),
        RelayConfig::default().poll_interval(Duration::from_secs(3600)),
    );
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { host.run_with_relay(relay, stop.cancelled_owned()).await }
    });
    // The relay's first cycle finds nothing and then listens; rows come after.
    let listening = eventually_async(WAIT, || async {
        env.sql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'") != "0"
    })
    .await;
    assert!(listening);
    let mut tx = env.pool.begin().await.unwrap();
    for seq in 0..3 {
        env.outbox.send(&mut tx, &order("k", seq)).await.unwrap();
    }
    tx.commit().await.unwrap();
    let all = eventually_async(WAIT, || async { handled.lock().unwrap().len() == 3 }).await;
    assert!(all, "handled: {:?}", handled.lock().unwrap());
    stop.cancel();
    running.await.unwrap().unwrap();
    assert_eq!(env.sql("SELECT count(*) FROM bus_outbox"), "0");
}

/// A row Redis refuses while it takes other rows: kept and counted, then moved aside
/// after `max_attempts`; the rows behind it go on (it holds back only its own key's).
#[tokio::test]
async fn a_row_redis_keeps_refusing_is_moved_aside_after_its_attempts() {
    let env = Env::start().await;
    let mut tx = env.pool.begin().await.unwrap();
    env.outbox.send(&mut tx, &order("k", 1)).await.unwrap();
    tx.commit().await.unwrap();
    let payload = env.sql("SELECT payload FROM bus_outbox");
    env.sql("DELETE FROM bus_outbox");
    let insert = |rows: &str| {
        env.sql(&format!(
            "INSERT INTO bus_outbox (kind, destination, message_id, partition_key, due_ms, payload) \
             SELECT 'queue', d, m, k::text, due::bigint, '{payload}'::bytea \
             FROM (VALUES {rows}) AS r(d, m, k, due)"
        ));
    };
    let due = (SystemTime::now() + Duration::from_secs(3600))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    // Redis refuses a delayed message whose id starts with `~` (its storage ids do).
    insert(&format!(
        "('orders', '~refused', 'a', {due}::bigint), ('orders', 'same-key', 'a', NULL), \
         ('orders', 'other-key', 'b', NULL), ('other', 'elsewhere', NULL, NULL)"
    ));
    let relay = Relay::new(
        env.pool.clone(),
        env.transport.clone(),
        RelayConfig::default().max_attempts(2),
    );
    let first = relay.relay_once().await.unwrap();
    assert_eq!((first.sent, first.dead, first.kept), (2, 0, 2));
    let left = env.sql("SELECT message_id || ' ' || attempts FROM bus_outbox ORDER BY id");
    assert_eq!(
        left, "~refused 1\nsame-key 0",
        "the refused row counted, its key held back"
    );
    insert("('orders', 'later', NULL, NULL)");
    let second = relay.relay_once().await.unwrap();
    assert_eq!((second.sent, second.dead, second.kept), (1, 1, 1));
    let dead = env.sql("SELECT message_id || ' ' || reason FROM bus_outbox_dead");
    assert!(dead.starts_with("~refused refused 2 times: "), "{dead}");
    let third = relay.relay_once().await.unwrap();
    assert_eq!(
        (third.sent, third.dead, third.kept),
        (1, 0, 0),
        "its key goes on"
    );
    // other-key, later, same-key (the payloads are copies of one message).
    assert_eq!(env.ready("orders").len(), 3);
    assert_eq!(env.ready("other").len(), 1);
}
