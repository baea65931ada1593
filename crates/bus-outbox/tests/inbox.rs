//! The inbox against a real PostgreSQL and a real Redis, with a real host.

mod common;

use bus_core::transport::Placement;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{
    Backoff, CommandProcessor, Context, EventProcessor, EventSubscription, Host, Message,
    ProcessError, ProcessingSettings, SendOptions,
};
use bus_outbox::sqlx::PgPool;
use bus_outbox::{Error, InboxExt, InboxLayer, Outbox, Relay, RelayConfig};
use bus_test_redis::bus::Running;
use bus_test_redis::eventually;
use common::{Env, Order, Placed, WAIT};

/// Writes `(message id, seq)` into `effects` in the inbox's transaction; fails its first
/// delivery when `fail_first`, after writing.
struct Recorder {
    runs: Arc<AtomicU32>,
    fail_first: bool,
    /// Sends a follow-up through the outbox in the same transaction.
    outbox: Option<Outbox>,
}

#[async_trait]
impl CommandProcessor<Order> for Recorder {
    async fn process(&self, order: Order, ctx: &Context) -> Result<(), ProcessError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let mut tx = ctx.transaction().await?;
        bus_outbox::sqlx::query("INSERT INTO effects (message_id, seq) VALUES ($1, $2)")
            .bind(ctx.message_id().as_str())
            .bind(order.seq as i64)
            .execute(&mut **tx)
            .await?;
        if let Some(outbox) = &self.outbox {
            outbox.publish(&mut tx, &Placed { n: order.seq }).await?;
        }
        if self.fail_first && ctx.delivery_count() == 1 {
            return Err("the first delivery fails after writing".into());
        }
        Ok(())
    }

    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default().retry(Backoff::fixed(Duration::from_millis(10)))
    }
}

async fn effects_table(pool: &PgPool) {
    bus_outbox::sqlx::query("CREATE TABLE effects (message_id text, seq bigint)")
        .execute(pool)
        .await
        .unwrap();
}

fn host(env: &Env, recorder: Recorder) -> Host {
    Host::builder()
        .transport(env.transport.clone())
        .middleware(InboxLayer::new(env.pool.clone()))
        .command::<Order, _>(recorder)
        .build()
        .unwrap()
}

fn drained(env: &Env) -> bool {
    let counts = env.redis.counts("orders");
    counts.ready == 0 && counts.inflight == 0 && counts.delayed == 0 && counts.msgs == 0
}

/// The same message delivered twice (a redelivery after a crash between the commit and
/// the ack looks like this to the second host): the handler runs once, its writes are
/// committed once, and both deliveries are acknowledged.
#[tokio::test]
async fn a_redelivered_message_already_recorded_is_acked_without_running_its_handler() {
    let env = Env::start().await;
    effects_table(&env.pool).await;
    let prepared = env
        .bus
        .prepare(
            &Order {
                key: "k".into(),
                seq: 1,
            },
            &SendOptions::new(),
        )
        .await
        .unwrap();
    for _ in 0..2 {
        env.transport
            .send("orders", Placement::now(), vec![prepared.message.clone()])
            .await
            .unwrap();
    }
    let runs = Arc::new(AtomicU32::new(0));
    let running = Running::start(host(
        &env,
        Recorder {
            runs: runs.clone(),
            fail_first: false,
            outbox: None,
        },
    ));
    assert!(
        eventually(WAIT, || drained(&env)).await,
        "both deliveries acknowledged"
    );
    running.stop().await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(env.sql("SELECT count(*) FROM effects"), "1");
    assert_eq!(
        env.sql("SELECT source || ' ' || message_id FROM bus_inbox"),
        format!("orders {}", prepared.message.id)
    );
}

/// A handler that fails after writing: its writes and its mark roll back, and the retry
/// runs it again and commits once.
#[tokio::test]
async fn a_failed_handler_rolls_back_and_its_retry_commits_once() {
    let env = Env::start().await;
    effects_table(&env.pool).await;
    let runs = Arc::new(AtomicU32::new(0));
    let running = Running::start(host(
        &env,
        Recorder {
            runs: runs.clone(),
            fail_first: true,
            outbox: None,
        },
    ));
    running
        .bus
        .send(&Order {
            key: "k".into(),
            seq: 5,
        })
        .await
        .unwrap();
    assert!(eventually(WAIT, || runs.load(Ordering::SeqCst) == 2).await);
    assert!(eventually(WAIT, || drained(&env)).await);
    running.stop().await;
    assert_eq!(
        env.sql("SELECT seq FROM effects"),
        "5",
        "one write, from the retry"
    );
    assert_eq!(env.sql("SELECT count(*) FROM bus_inbox"), "1");
}

/// A handler that writes a follow-up into the outbox in its inbox transaction: the
/// follow-up exists once the handler's commit does, and is relayed.
#[tokio::test]
async fn a_handler_writes_its_follow_up_through_the_outbox_in_the_same_transaction() {
    let env = Env::start().await;
    effects_table(&env.pool).await;
    let runs = Arc::new(AtomicU32::new(0));
    let running = Running::start(host(
        &env,
        Recorder {
            runs: runs.clone(),
            fail_first: true,
            outbox: Some(env.outbox.clone()),
        },
    ));
    running
        .bus
        .send(&Order {
            key: "k".into(),
            seq: 9,
        })
        .await
        .unwrap();
    assert!(eventually(WAIT, || drained(&env)).await);
    running.stop().await;
    // The failed first run's follow-up rolled back with it.
    assert_eq!(env.sql("SELECT count(*) FROM bus_outbox"), "1");
    let relayed = Relay::new(
        env.pool.clone(),
        env.transport.clone(),
        RelayConfig::default(),
    )
    .relay_once()
    .await
    .unwrap();
    assert_eq!(relayed.sent, 1);
}

struct Audit {
    runs: Arc<AtomicU32>,
}

#[derive(EventSubscription)]
#[bus(event = Placed, name = "audit")]
struct AuditPlaced;

#[derive(EventSubscription)]
#[bus(event = Placed, name = "billing")]
struct BillPlaced;

#[async_trait]
impl<S: bus_core::Subscription<Event = Placed>> EventProcessor<S> for Audit {
    async fn process(&self, _: Placed, ctx: &Context) -> Result<(), ProcessError> {
        let mut tx = ctx.transaction().await?;
        bus_outbox::sqlx::query("INSERT INTO effects (message_id, seq) VALUES ($1, 0)")
            .bind(ctx.message_id().as_str())
            .execute(&mut **tx)
            .await?;
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// An event's copies share its message id: each subscription is recorded on its own,
/// so each runs.
#[tokio::test]
async fn each_subscription_of_an_event_commits_its_own_handling() {
    let env = Env::start().await;
    effects_table(&env.pool).await;
    let runs = Arc::new(AtomicU32::new(0));
    let host = Host::builder()
        .transport(env.transport.clone())
        .middleware(InboxLayer::new(env.pool.clone()).message::<Placed>())
        .event::<AuditPlaced, _>(Audit { runs: runs.clone() })
        .event::<BillPlaced, _>(Audit { runs: runs.clone() })
        .build()
        .unwrap();
    let running = Running::start(host);
    // The consumers register their subscriptions as they start.
    let registered = eventually(WAIT, || {
        let key = bus_redis::keys::subscriptions(env.redis.namespace(), Placed::NAME);
        env.redis.client().int(&["SCARD", &key]).unwrap_or(0) == 2
    })
    .await;
    assert!(registered);
    running.bus.publish(&Placed { n: 1 }).await.unwrap();
    assert!(eventually(WAIT, || runs.load(Ordering::SeqCst) == 2).await);
    running.stop().await;
    assert_eq!(
        env.sql("SELECT string_agg(source, ',' ORDER BY source) FROM bus_inbox"),
        "order-placed/audit,order-placed/billing"
    );
}

struct Lonely {
    answer: Arc<std::sync::Mutex<Option<String>>>,
}

#[async_trait]
impl CommandProcessor<Order> for Lonely {
    async fn process(&self, _: Order, ctx: &Context) -> Result<(), ProcessError> {
        let outcome = ctx.transaction().await.map(drop);
        let text = match outcome {
            Err(Error::NoInbox) => "no inbox".to_owned(),
            other => format!("{other:?}"),
        };
        *self.answer.lock().unwrap() = Some(text);
        Ok(())
    }
}

/// Outside a layer that covers the message, asking for the transaction is an error,
/// not a panic nor a transaction of nobody's.
#[tokio::test]
async fn a_message_the_layer_does_not_cover_has_no_transaction() {
    let env = Env::start().await;
    let answer = Arc::new(std::sync::Mutex::new(None));
    let host = Host::builder()
        .transport(env.transport.clone())
        .middleware(InboxLayer::new(env.pool.clone()).message::<Placed>())
        .command::<Order, _>(Lonely {
            answer: answer.clone(),
        })
        .build()
        .unwrap();
    let running = Running::start(host);
    running
        .bus
        .send(&Order {
            key: "k".into(),
            seq: 1,
        })
        .await
        .unwrap();
    assert!(eventually(WAIT, || answer.lock().unwrap().is_some()).await);
    running.stop().await;
    assert_eq!(answer.lock().unwrap().as_deref(), Some("no inbox"));
    assert_eq!(env.sql("SELECT count(*) FROM bus_inbox"), "0");
}

/// Pruning removes the marks older than what is kept, and only those.
#[tokio::test]
async fn pruning_removes_only_the_marks_older_than_kept() {
    let env = Env::start().await;
    env.sql(
        "INSERT INTO bus_inbox (source, message_id, handled_at) VALUES \
         ('orders', 'old', clock_timestamp() - interval '2 days'), \
         ('orders', 'new', clock_timestamp())",
    );
    let pruned = bus_outbox::prune_inbox(&env.pool, Duration::from_secs(24 * 3600))
        .await
        .unwrap();
    assert_eq!(pruned, 1);
    assert_eq!(env.sql("SELECT message_id FROM bus_inbox"), "new");
}
