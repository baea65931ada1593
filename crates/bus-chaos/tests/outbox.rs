//! The outbox and the inbox with real processes SIGKILLed (`outbox-node`), and Redis and
//! PostgreSQL restarted: every committed message is delivered exactly once, nothing of
//! a rolled-back transaction ever is, and a handler killed after its commit does not
//! write twice. Checked from the handlers' own records (`deliveries`, `effects`), read
//! once everything has settled.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bus_chaos::outbox::{Ship, ROLLED_BACK_EVERY, TABLES};
use bus_core::{Bus, BusConfig, CommandProcessor, Context, Host, ProcessError};
use bus_outbox::sqlx::postgres::PgPoolOptions;
use bus_outbox::sqlx::PgPool;
use bus_outbox::{Outbox, Relay, RelayConfig};
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::bus::Running;
use bus_test_redis::{eventually_async, PostgresServer, RedisServer, TestRedis};

const WAIT: Duration = Duration::from_secs(60);

/// A PostgreSQL and a Redis of the test's own, and the outbox's tables.
struct World {
    pg: PostgresServer,
    url: String,
    pool: PgPool,
    redis: RedisServer,
    namespace: String,
}

impl World {
    async fn start() -> World {
        let pg = PostgresServer::start().unwrap();
        let url = pg.create_database().unwrap();
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect(&url)
            .await
            .unwrap();
        Outbox::migrate(&pool).await.unwrap();
        bus_outbox::sqlx::raw_sql(TABLES)
            .execute(&pool)
            .await
            .unwrap();
        // Every write fsynced: a SIGKILLed Redis keeps what it acknowledged.
        let redis = RedisServer::builder()
            .appendonly(true)
            .arg("--appendfsync")
            .arg("always")
            .start()
            .unwrap();
        let namespace = TestRedis::with_url(redis.url())
            .unwrap()
            .namespace()
            .to_owned();
        World {
            pg,
            url,
            pool,
            redis,
            namespace,
        }
    }

    fn node(&self, mode: &str, settings: &[(&str, &str)]) -> Node {
        let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-node"));
        command
            .env("OUTBOX_MODE", mode)
            .env("DATABASE_URL", &self.url)
            .env("REDIS_URL", self.redis.url())
            .env("BUS_PREFIX", &self.namespace)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped());
        for (name, value) in settings {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start outbox-node");
        let (lines, receiver) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if lines.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Node {
            child,
            lines: receiver,
            committed: 0,
        }
    }

    async fn transport(&self) -> RedisTransport {
        let config = RedisConfig::from_url(&self.redis.url())
            .unwrap()
            .prefix(self.namespace.as_str());
        RedisTransport::connect(&config).await.unwrap()
    }

    async fn scalar(&self, sql: &str) -> i64 {
        bus_outbox::sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Relays what waits and consumes it with a recording host, until the outbox and
    /// the queue are empty.
    async fn drain(&self) {
        let transport = self.transport().await;
        let relay = Relay::new(self.pool.clone(), transport.clone(), RelayConfig::default());
        // A pool of the handlers' own: connections opened on the host's handler threads
        // end with the host.
        let handlers = PgPoolOptions::new()
            .max_connections(4)
            .connect(&self.url)
            .await
            .unwrap();
        let host = Host::builder()
            .transport(transport)
            .command::<Ship, _>(Recorder {
                pool: handlers.clone(),
            })
            .build()
            .unwrap();
        let running = Running::start(host);
        let stop = tokio_util::sync::CancellationToken::new();
        let relaying = tokio::spawn({
            let stop = stop.clone();
            async move { relay.run_until(stop).await }
        });
        let settled = eventually_async(WAIT, || async {
            let counts =
                bus_test_redis::bus::counts(&mut self.redis.client(), &self.namespace, "shipments");
            let waiting = self.scalar("SELECT count(*) FROM bus_outbox").await;
            waiting == 0 && counts.ready == 0 && counts.inflight == 0 && counts.msgs == 0
        })
        .await;
        assert!(settled, "the outbox and the queue drained");
        stop.cancel();
        relaying.await.unwrap().unwrap();
        running.stop().await;
        handlers.close().await;
    }

    /// Every committed order delivered exactly once (one run, the first delivery), and
    /// no other: nothing of a rolled-back transaction.
    async fn assert_exactly_once(&self) -> usize {
        let committed: Vec<i64> = bus_outbox::sqlx::query_scalar("SELECT n FROM orders ORDER BY n")
            .fetch_all(&self.pool)
            .await
            .unwrap();
        let rows: Vec<(i64, i32)> =
            bus_outbox::sqlx::query_as("SELECT n, delivery FROM deliveries ORDER BY n")
                .fetch_all(&self.pool)
                .await
                .unwrap();
        let mut runs: BTreeMap<i64, Vec<i32>> = BTreeMap::new();
        for (n, delivery) in rows {
            runs.entry(n).or_default().push(delivery);
        }
        let twice: Vec<_> = runs.iter().filter(|(_, d)| d.len() != 1).collect();
        assert!(twice.is_empty(), "delivered more than once: {twice:?}");
        let delivered: Vec<i64> = runs.keys().copied().collect();
        let rolled_back: Vec<_> = delivered
            .iter()
            .filter(|n| *n % ROLLED_BACK_EVERY == ROLLED_BACK_EVERY - 1)
            .collect();
        assert!(
            rolled_back.is_empty(),
            "rolled back, yet delivered: {rolled_back:?}"
        );
        let missing: Vec<_> = committed.iter().filter(|n| !runs.contains_key(n)).collect();
        assert!(
            missing.is_empty(),
            "committed, never delivered: {missing:?}"
        );
        assert_eq!(delivered, committed);
        committed.len()
    }
}

/// One `outbox-node` process and what it printed.
struct Node {
    child: Child,
    lines: mpsc::Receiver<String>,
    committed: usize,
}

impl Node {
    /// Waits until the process has printed `count` more `committed` lines (or `line`).
    fn wait_for(&mut self, count: usize, line: Option<&str>) {
        let deadline = Instant::now() + WAIT;
        let target = self.committed + count;
        while self.committed < target {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = self
                .lines
                .recv_timeout(left)
                .expect("outbox-node went quiet");
            if next.starts_with("committed ") {
                self.committed += 1;
            } else if Some(next.as_str()) == line {
                return;
            }
        }
    }

    fn sigkill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for the process to exit by itself; says whether a signal ended it.
    fn died_by_signal(mut self) -> bool {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return std::os::unix::process::ExitStatusExt::signal(&status).is_some();
            }
            assert!(Instant::now() < deadline, "outbox-node did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The handler of the final drain: records each run.
struct Recorder {
    pool: PgPool,
}

#[async_trait]
impl CommandProcessor<Ship> for Recorder {
    async fn process(&self, ship: Ship, ctx: &Context) -> Result<(), ProcessError> {
        bus_outbox::sqlx::query(
            "INSERT INTO deliveries (n, message_id, delivery) VALUES ($1, $2, $3)",
        )
        .bind(ship.n)
        .bind(ctx.message_id().as_str())
        .bind(ctx.delivery_count() as i32)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

/// Applications SIGKILLed while writing: first one without a relay (its commits wait
/// for one), then three with a relay in the process, killed wherever they are, then one
/// more without a relay, so that the final drain surely has rows to relay (the relays of
/// the middle rounds may have caught up with everything before them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applications_killed_between_commit_and_relay_lose_nothing_and_send_nothing_rolled_back() {
    let world = World::start().await;
    let mut app = world.node("app", &[("OUTBOX_FROM", "0"), ("OUTBOX_COUNT", "1000000")]);
    app.wait_for(150, None);
    app.sigkill();
    for round in 1..=3 {
        let from = (round * 1_000_000).to_string();
        let mut app = world.node(
            "app",
            &[
                ("OUTBOX_FROM", &from),
                ("OUTBOX_COUNT", "1000000"),
                ("OUTBOX_RELAY", "1"),
            ],
        );
        app.wait_for(150, None);
        app.sigkill();
    }
    let mut app = world.node(
        "app",
        &[("OUTBOX_FROM", "4000000"), ("OUTBOX_COUNT", "1000000")],
    );
    app.wait_for(150, None);
    app.sigkill();
    assert!(
        world.scalar("SELECT count(*) FROM bus_outbox").await > 0,
        "rows left for a relay"
    );
    world.drain().await;
    let delivered = world.assert_exactly_once().await;
    assert!(delivered >= 750, "{delivered}");
}

/// A relay that aborts right after a cycle's sends, before it deletes their rows, three
/// times (after its first, second and third cycle): the rows are sent again by the next
/// relay, and stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_killed_between_the_redis_write_and_the_delete_deliver_nothing_twice() {
    let world = World::start().await;
    let mut app = world.node("app", &[("OUTBOX_FROM", "0"), ("OUTBOX_COUNT", "400")]);
    app.wait_for(usize::MAX, Some("done"));
    app.sigkill();
    let written = world.scalar("SELECT count(*) FROM bus_outbox").await;
    assert_eq!(written, 320);
    for cycles in 1..=3 {
        let after = cycles.to_string();
        let relay = world.node(
            "relay",
            &[
                ("OUTBOX_CRASH_AFTER_CYCLES", &after),
                ("OUTBOX_BATCH", "40"),
            ],
        );
        assert!(relay.died_by_signal(), "the relay aborted after its sends");
        let counts =
            bus_test_redis::bus::counts(&mut world.redis.client(), &world.namespace, "shipments");
        let waiting = world.scalar("SELECT count(*) FROM bus_outbox").await;
        // Each crash left its last cycle's rows in the table, and their messages in Redis.
        assert_eq!(counts.ready + waiting, written + 40, "after crash {cycles}");
    }
    world.drain().await;
    assert_eq!(world.assert_exactly_once().await, 320);
}

/// Redis restarted (gracefully, then SIGKILLed) and PostgreSQL restarted (fast
/// shutdown, then SIGKILLed) while an application writes and relays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_and_postgres_restarted_under_a_writing_application() {
    let mut world = World::start().await;
    let mut app = world.node(
        "app",
        &[
            ("OUTBOX_FROM", "0"),
            ("OUTBOX_COUNT", "1000000"),
            ("OUTBOX_RELAY", "1"),
        ],
    );
    app.wait_for(100, None);
    world.redis.restart().unwrap();
    app.wait_for(100, None);
    world.redis.kill();
    world.redis.restart().unwrap();
    app.wait_for(100, None);
    world.pg.restart().unwrap();
    app.wait_for(100, None);
    world.pg.kill();
    world.pg.restart().unwrap();
    app.wait_for(100, None);
    app.sigkill();
    world.drain().await;
    let delivered = world.assert_exactly_once().await;
    assert!(delivered >= 500, "{delivered}");
}

/// A handler process killed after the inbox committed its writes and before the ack,
/// for each message: the redelivery is acknowledged without running the handler, so
/// the writes happen once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_killed_after_its_commit_before_the_ack_writes_once() {
    const MESSAGES: i64 = 4;
    let world = World::start().await;
    let bus = Bus::new(world.transport().await, BusConfig::default());
    for n in 0..MESSAGES {
        bus.send(&Ship { n }).await.unwrap();
    }
    let drained = || async {
        let counts =
            bus_test_redis::bus::counts(&mut world.redis.client(), &world.namespace, "shipments");
        counts.ready == 0 && counts.inflight == 0 && counts.msgs == 0 && counts.delayed == 0
    };
    let mut processes = 0;
    while !drained().await {
        assert!(processes <= MESSAGES + 3, "the queue does not drain");
        processes += 1;
        let mut node = world.node("handler", &[("OUTBOX_KILL_AFTER_COMMIT", "1")]);
        node.wait_for(usize::MAX, Some("up"));
        // It dies after a commit, or handles the last redelivery and stays up.
        let settled = eventually_async(WAIT, || {
            let exited = node.child.try_wait().unwrap().is_some();
            let drained = &drained;
            async move { exited || drained().await }
        })
        .await;
        assert!(settled);
        node.sigkill();
    }
    let kills = world.scalar("SELECT count(*) FROM kills").await;
    assert_eq!(
        kills, MESSAGES,
        "each message's handler was killed after its commit"
    );
    let runs: Vec<(i64, i64)> =
        bus_outbox::sqlx::query_as("SELECT n, count(*) FROM deliveries GROUP BY n ORDER BY n")
            .fetch_all(&world.pool)
            .await
            .unwrap();
    let effects: Vec<(i64, i64)> =
        bus_outbox::sqlx::query_as("SELECT n, count(*) FROM effects GROUP BY n ORDER BY n")
            .fetch_all(&world.pool)
            .await
            .unwrap();
    let once: Vec<(i64, i64)> = (0..MESSAGES).map(|n| (n, 1)).collect();
    assert_eq!(effects, once, "each message's writes committed once");
    assert_eq!(
        runs, once,
        "the redeliveries were acknowledged without a run"
    );
}
