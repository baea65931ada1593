//! Flow control across consumer processes, measured from the handlers' own
//! start and end records (`CHAOS_TIMELINE=1`): pause, a global concurrency limit, a
//! rate limit and per-key ordering hold over several hosts, with their default settings.

use std::process::Child;
use std::time::Duration;

mod common;

use bus_chaos::Job;
use bus_core::flow::{PerKey, RateLimit};
use bus_core::transport::Source;
use bus_core::Message;
use bus_redis::admin::Admin;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::{eventually, SyncClient, TestRedis};
use common::{backlog, bus, consumer_command, kill, now_ms, processed, send_jobs, timeline_fields};

/// One handler run: job, start and end (ms since the epoch, the handler's clock).
#[derive(Debug, Clone, Copy)]
struct Run {
    n: u64,
    start: u64,
    end: u64,
    /// Its delivery count (1: the message's first start).
    delivery: u64,
}

fn timeline(client: &mut SyncClient, prefix: &str) -> Vec<Run> {
    timeline_fields(client, prefix)
        .into_iter()
        .map(|fields| Run {
            n: fields[0],
            start: fields[1],
            end: fields[2],
            delivery: fields[3],
        })
        .collect()
}

/// The most runs that overlapped (an end and a start in the same ms do not overlap).
fn peak(runs: &[Run]) -> usize {
    let mut edges: Vec<(u64, i32)> = runs
        .iter()
        .flat_map(|r| [(r.start, 1), (r.end, -1)])
        .collect();
    edges.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, edge) in edges {
        now += edge;
        peak = peak.max(now);
    }
    peak as usize
}

/// A timed consumer process: `concurrency` handlers, no prefetch, `work_ms` per job.
fn timed_consumer(redis: &TestRedis, concurrency: u32, work_ms: u64) -> Child {
    consumer_command(&redis.url(), redis.namespace(), "record", 30_000, 5)
        .env("CHAOS_TIMELINE", "1")
        .env("CHAOS_CONCURRENCY", concurrency.to_string())
        .env("CHAOS_PREFETCH", "0")
        .env("CHAOS_WORK_MS", work_ms.to_string())
        .spawn()
        .expect("start chaos-consumer")
}

async fn admin(redis: &TestRedis) -> Admin {
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    Admin::new(RedisTransport::connect(&config).await.unwrap())
}

fn jobs() -> Source {
    Source::queue(<Job as Message>::NAME).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_every_consumer_process_within_a_second_and_survives_their_restart() {
    const JOBS: u64 = 1_000;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = admin(&redis).await;
    let bus = bus(&redis.url(), &prefix).await;
    send_jobs(&bus, JOBS).await;
    let mut a = timed_consumer(&redis, 4, 20);
    let mut b = timed_consumer(&redis, 4, 20);
    assert!(
        eventually(Duration::from_secs(30), || processed(&mut client, &prefix)
            >= 100)
        .await,
        "the consumers made no progress"
    );

    let paused_at = now_ms();
    admin.pause(&jobs()).await.unwrap();
    assert!(admin.stats(&jobs()).await.unwrap().paused);
    // Running handlers finish and are acked; nothing else is taken.
    assert!(
        eventually(Duration::from_secs(5), || backlog(&mut client, &prefix)[1]
            == 0)
        .await,
        "messages stayed in flight on a paused queue"
    );
    let done = processed(&mut client, &prefix);
    assert!(done < JOBS as i64, "all done before the pause took effect");
    assert!(
        !eventually(Duration::from_millis(1_500), || processed(
            &mut client,
            &prefix
        ) > done)
        .await,
        "a handler ran on a paused queue"
    );
    let late: Vec<Run> = timeline(&mut client, &prefix)
        .into_iter()
        .filter(|r| r.start > paused_at + 1_000)
        .collect();
    assert!(
        late.is_empty(),
        "started more than 1 s after the pause: {late:?}"
    );
    // Sends still enqueue.
    let ready = backlog(&mut client, &prefix)[0];
    bus.send(&Job { n: JOBS }).await.unwrap();
    assert_eq!(backlog(&mut client, &prefix)[0], ready + 1);

    // The pause is the queue's: a consumer killed and started again takes nothing.
    kill(&mut a);
    a = timed_consumer(&redis, 4, 20);
    assert!(
        !eventually(Duration::from_millis(1_500), || processed(
            &mut client,
            &prefix
        ) > done)
        .await,
        "a restarted consumer ran a handler on a paused queue"
    );

    let resumed_at = now_ms();
    admin.resume(&jobs()).await.unwrap();
    assert!(!admin.stats(&jobs()).await.unwrap().paused);
    let all = eventually(Duration::from_secs(60), || {
        processed(&mut client, &prefix) == JOBS as i64 + 1
    })
    .await;
    kill(&mut a);
    kill(&mut b);
    assert!(all, "processed {}", processed(&mut client, &prefix));
    let first = timeline(&mut client, &prefix)
        .iter()
        .map(|r| r.start)
        .filter(|&start| start >= resumed_at)
        .min()
        .unwrap();
    assert!(
        first - resumed_at <= 1_000,
        "the first start came {} ms after the resume",
        first - resumed_at
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_holds_across_processes_and_a_killed_holder_frees_its_slots() {
    const JOBS: u64 = 150;
    const LIMIT: u32 = 3;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = admin(&redis).await;
    admin.limit_concurrency(&jobs(), Some(LIMIT)).await.unwrap();
    assert_eq!(admin.flow(&jobs()).await.unwrap().concurrency, Some(LIMIT));
    send_jobs(&bus(&redis.url(), &prefix).await, JOBS).await;
    // A holder takes the limit's three slots and never finishes: nobody else runs.
    let mut holder = consumer_command(&redis.url(), &prefix, "hold", 2_000, 5)
        .env("CHAOS_CONCURRENCY", "8")
        .env("CHAOS_PREFETCH", "0")
        .spawn()
        .expect("start chaos-consumer");
    assert!(
        eventually(Duration::from_secs(30), || backlog(&mut client, &prefix)[1]
            == 3)
        .await,
        "the holder never held the limit"
    );
    let mut consumers: Vec<Child> = (0..3).map(|_| timed_consumer(&redis, 8, 30)).collect();
    assert!(
        !eventually(Duration::from_millis(1_500), || processed(
            &mut client,
            &prefix
        ) > 0)
        .await,
        "a handler ran while the holder held every slot"
    );
    assert_eq!(backlog(&mut client, &prefix)[1], 3);
    // SIGKILL: its slots come back with its leases (lock expiry, then recovery).
    let killed_at = now_ms();
    kill(&mut holder);
    let all = eventually(Duration::from_secs(60), || {
        processed(&mut client, &prefix) == JOBS as i64
    })
    .await;
    for child in &mut consumers {
        kill(child);
    }
    assert!(all, "processed {}", processed(&mut client, &prefix));
    let runs = timeline(&mut client, &prefix);
    assert!(
        runs.iter().all(|r| r.start >= killed_at),
        "ran beside the holder"
    );
    let peak = peak(&runs);
    assert!(
        peak <= LIMIT as usize,
        "{peak} handlers ran at once; the limit is {LIMIT}"
    );
    assert_eq!(peak, LIMIT as usize, "the limit was never reached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_processes() {
    const JOBS: u64 = 40;
    const STARTS: usize = 10;
    const PER_MS: u64 = 500;
    // Between a reservation and its handler's start (dispatch in the process).
    const JITTER_MS: u64 = 60;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = admin(&redis).await;
    let rate = RateLimit::new(STARTS as u32, Duration::from_millis(PER_MS)).unwrap();
    admin.limit_rate(&jobs(), Some(rate)).await.unwrap();
    assert_eq!(admin.flow(&jobs()).await.unwrap().rate, Some(rate));
    send_jobs(&bus(&redis.url(), &prefix).await, JOBS).await;
    let mut consumers: Vec<Child> = (0..2).map(|_| timed_consumer(&redis, 8, 0)).collect();
    let all = eventually(Duration::from_secs(60), || {
        processed(&mut client, &prefix) == JOBS as i64
    })
    .await;
    for child in &mut consumers {
        kill(child);
    }
    assert!(all, "processed {}", processed(&mut client, &prefix));
    let mut starts: Vec<u64> = timeline(&mut client, &prefix)
        .iter()
        .map(|r| r.start)
        .collect();
    starts.sort_unstable();
    for (i, window) in starts.windows(STARTS + 1).enumerate() {
        let span = window[STARTS] - window[0];
        assert!(
            span + JITTER_MS >= PER_MS,
            "starts {i} to {} came within {span} ms: more than {STARTS} per {PER_MS} ms",
            i + STARTS
        );
    }
    let total = starts[starts.len() - 1] - starts[0];
    assert!(
        total + JITTER_MS >= 3 * PER_MS,
        "{JOBS} starts took only {total} ms"
    );
}

/// Per-key FIFO over three consumer processes (8 handlers and 16 prefetched each), one of
/// them SIGKILLed mid-run, every setting at its default: within each key no run overlaps
/// another and the runs come in the order sent, a run cut by the kill redone first (its key
/// waits for its lock, the default 60 s, to expire), from the handlers' own records; other
/// keys run meanwhile. With a per-key rate (4 starts per 300 ms per key), no key ever
/// starts more than 4 of its messages within 300 ms (a redo after the kill is a redelivery,
/// not counted: docs/redis-layout.md "Per-key rate limit").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_order_holds_across_processes_and_a_sigkill() {
    const KEYS: u64 = 20;
    const JOBS: u64 = 600;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = admin(&redis).await;
    const KEY_STARTS: usize = 4;
    const KEY_PER_MS: u64 = 300;
    // Between a reservation and its handler's start (dispatch in the process).
    const JITTER_MS: u64 = 60;
    let rate = RateLimit::new(KEY_STARTS as u32, Duration::from_millis(KEY_PER_MS)).unwrap();
    let order = PerKey::fifo().rate(Some(rate));
    admin.order_per_key(&jobs(), Some(order)).await.unwrap();
    assert_eq!(admin.flow(&jobs()).await.unwrap().per_key, Some(order));
    let bus = bus(&redis.url(), &prefix).await;
    // Job n is message n / KEYS of key n % KEYS.
    for n in 0..JOBS {
        bus.send_keyed(&Job { n }, &format!("k{}", n % KEYS))
            .await
            .unwrap();
    }
    // The defaults: the killed consumer's keys wait out the default lock (60 s).
    let defaults = bus_core::ProcessingSettings::default();
    let lock = defaults.message_lock_timeout;
    let ordered_consumer = || {
        consumer_command(
            &redis.url(),
            &prefix,
            "record",
            lock.as_millis() as u64,
            defaults.dead_letter_delivery_limit,
        )
        .env("CHAOS_TIMELINE", "1")
        .env("CHAOS_CONCURRENCY", "8")
        .env("CHAOS_PREFETCH", "16")
        .env("CHAOS_WORK_MS", "10")
        .spawn()
        .expect("start chaos-consumer")
    };
    let mut consumers: Vec<Child> = (0..3).map(|_| ordered_consumer()).collect();
    assert!(
        eventually(Duration::from_secs(30), || processed(&mut client, &prefix)
            >= 150)
        .await,
        "the consumers made no progress"
    );
    kill(&mut consumers[0]);
    let all = eventually(lock + Duration::from_secs(90), || {
        processed(&mut client, &prefix) == JOBS as i64
    })
    .await;
    for consumer in &mut consumers[1..] {
        kill(consumer);
    }
    assert!(
        all,
        "processed {} of {JOBS}",
        processed(&mut client, &prefix)
    );
    let runs = timeline(&mut client, &prefix);
    for key in 0..KEYS {
        let mut mine: Vec<Run> = runs.iter().filter(|r| r.n % KEYS == key).copied().collect();
        mine.sort_by_key(|r| (r.start, r.end));
        assert_eq!(
            mine.first().map(|r| r.n),
            Some(key),
            "k{key} did not start first"
        );
        for pair in mine.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(
                b.start >= a.end,
                "k{key}: job {} started at {} before job {} ended at {}",
                b.n,
                b.start,
                a.n,
                a.end
            );
            // The next message, or the same one again (killed after its record).
            assert!(
                b.n == a.n || b.n == a.n + KEYS,
                "k{key}: job {} ran after job {}: out of order",
                b.n,
                a.n
            );
        }
        // The rate counts first deliveries (a redo after the kill is a redelivery).
        let starts: Vec<u64> = mine
            .iter()
            .filter(|r| r.delivery == 1)
            .map(|r| r.start)
            .collect();
        for (i, window) in starts.windows(KEY_STARTS + 1).enumerate() {
            let span = window[KEY_STARTS] - window[0];
            assert!(
                span + JITTER_MS >= KEY_PER_MS,
                "k{key}: starts {i} to {} came within {span} ms: more than {KEY_STARTS} per {KEY_PER_MS} ms",
                i + KEY_STARTS
            );
        }
        let total = starts[starts.len() - 1] - starts[0];
        let windows = (starts.len() as u64 - 1) / KEY_STARTS as u64;
        assert!(
            total + JITTER_MS >= windows * KEY_PER_MS,
            "k{key}: {} starts took only {total} ms",
            starts.len()
        );
    }
    assert!(peak(&runs) > 1, "keys never ran side by side");
}

/// One `flaky` handler run: its process, start and end (ms) and whether it failed.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    pid: u32,
    start: u64,
    end: u64,
    failed: bool,
}

fn attempts(client: &mut SyncClient, prefix: &str) -> Vec<Attempt> {
    let list = client
        .cmd(&["LRANGE", &bus_chaos::attempts_key(prefix), "0", "-1"])
        .unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|line| {
            let fields: Vec<&str> = line.as_str().unwrap().split(' ').collect();
            Attempt {
                pid: fields[0].parse().unwrap(),
                start: fields[1].parse().unwrap(),
                end: fields[2].parse().unwrap(),
                failed: fields[3] == "fail",
            }
        })
        .collect()
}

/// One process's runs by start, split where nothing started for over a second: its
/// breaker's closed stretches and probes.
fn stretches(all: &[Attempt], pid: u32) -> Vec<Vec<Attempt>> {
    let mut runs: Vec<Attempt> = all.iter().filter(|a| a.pid == pid).copied().collect();
    runs.sort_by_key(|a| a.start);
    let mut out: Vec<Vec<Attempt>> = Vec::new();
    for run in runs {
        match out.last_mut() {
            Some(last) if run.start - last[last.len() - 1].start <= 1_000 => last.push(run),
            _ => out.push(vec![run]),
        }
    }
    out
}

/// A circuit breaker with its default settings (at least half of at least 20 runs
/// failed within 30 s: open for 5 s, then one probe) in each of two consumer processes,
/// against a real Redis: each stops after its own failures, probes one message per
/// cool-down while the outage lasts, and closes on the first probe that succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tripped_breaker_stops_its_process_then_probes_one_message_per_cool_down() {
    const JOBS: u64 = 2_000;
    let defaults = bus_core::CircuitBreaker::default();
    let cool_down = defaults.cool_down.as_millis() as u64;
    let minimum = defaults.minimum_calls as usize;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = admin(&redis).await;
    let bus = bus(&redis.url(), &prefix).await;
    client
        .cmd(&["SET", &bus_chaos::failing_key(&prefix), "1"])
        .unwrap();
    send_jobs(&bus, JOBS).await;
    let flaky = || {
        consumer_command(&redis.url(), redis.namespace(), "flaky", 30_000, 100)
            .env("CHAOS_BREAKER", "1")
            .env("CHAOS_CONCURRENCY", "4")
            .env("CHAOS_PREFETCH", "0")
            .env("CHAOS_WORK_MS", "20")
            .spawn()
            .expect("start chaos-consumer")
    };
    let mut a = flaky();
    let mut b = flaky();
    let pids = [a.id(), b.id()];

    // The outage lasts until each process has probed twice (and failed).
    let probed_twice = |client: &mut SyncClient| {
        let all = attempts(client, &prefix);
        pids.iter().all(|pid| stretches(&all, *pid).len() >= 3)
    };
    assert!(
        eventually(Duration::from_secs(60), || probed_twice(&mut client)).await,
        "the processes did not trip and probe twice"
    );
    // The hosts report their open breakers in their heartbeats (the dashboard's source).
    let open_in_heartbeats = || async {
        let hosts = admin.hosts().await.unwrap();
        hosts.len() == 2
            && hosts.iter().all(|h| {
                h.info.breakers.get(<Job as Message>::NAME) != Some(&bus_core::BreakerState::Closed)
                    && h.info.breakers.contains_key(<Job as Message>::NAME)
            })
    };
    let mut seen_open = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !seen_open && std::time::Instant::now() < deadline {
        seen_open = open_in_heartbeats().await;
        if !seen_open {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(seen_open, "no heartbeat showed the breakers open");
    client
        .cmd(&["DEL", &bus_chaos::failing_key(&prefix)])
        .unwrap();
    assert!(
        eventually(Duration::from_secs(90), || processed(&mut client, &prefix)
            == JOBS as i64)
        .await,
        "the jobs were not all processed after the outage ended"
    );
    kill(&mut a);
    kill(&mut b);

    let all = attempts(&mut client, &prefix);
    let mut closed = 0;
    for pid in pids {
        let stretches = stretches(&all, pid);
        // Closed until `minimum` runs had failed; the runs that had started when it opened
        // (at most one per other handler slot: 3) finish, and nothing starts after.
        let burst = &stretches[0];
        assert!(burst.iter().all(|a| a.failed), "{pid}: {burst:?}");
        assert!(
            (minimum..=minimum + 3).contains(&burst.len()),
            "{pid}: {} runs before the breaker opened",
            burst.len()
        );
        // Up to the probe that closed it (after that, a quiet second is the queue's).
        let end = stretches[1..]
            .iter()
            .position(|s| !s.first().unwrap().failed)
            .map_or(stretches.len(), |i| i + 2);
        for pair in stretches[..end].windows(2) {
            let (before, probe) = (&pair[0], &pair[1]);
            let quiet = probe[0].start - before[before.len() - 1].start;
            // ms stamps: a 1 ms rounding either side.
            assert!(
                quiet + 1 >= cool_down,
                "{pid}: probed {quiet} ms after the last run"
            );
            // The probe runs alone: nothing else starts until it ended.
            if probe.len() > 1 {
                assert!(probe[1].start >= probe[0].end, "{pid}: {probe:?}");
            }
        }
        // While the outage lasted, each probe failed and re-opened it: one run each.
        let probes = &stretches[1..end];
        let failed_probes = probes.iter().take_while(|s| s[0].failed).count();
        for stretch in &probes[..failed_probes] {
            assert_eq!(
                stretch.len(),
                1,
                "{pid}: a failed probe was not alone: {stretch:?}"
            );
        }
        assert!(failed_probes >= 2, "{pid}: {failed_probes} failed probes");
        // The first probe that succeeded closed it: messages flowed again.
        if let Some(closing) = probes.get(failed_probes) {
            assert!(closing.iter().all(|a| !a.failed), "{pid}: {closing:?}");
            closed += 1;
        }
    }
    assert!(closed >= 1, "no breaker closed after the outage");
}

/// A consumer process with the fleet-scoped circuit breaker (otherwise its defaults):
/// `flaky` mode, 4 handlers, no prefetch, 20 ms per job, the given lock timeout.
fn fleet_consumer_command(redis: &TestRedis, lock_ms: u64) -> std::process::Command {
    let mut command = consumer_command(&redis.url(), redis.namespace(), "flaky", lock_ms, 100);
    command
        .env("CHAOS_BREAKER", "fleet")
        .env("CHAOS_CONCURRENCY", "4")
        .env("CHAOS_PREFETCH", "0")
        .env("CHAOS_WORK_MS", "20");
    command
}

fn fleet_consumer(redis: &TestRedis, lock_ms: u64) -> Child {
    fleet_consumer_command(redis, lock_ms)
        .spawn()
        .expect("start chaos-consumer")
}

/// The same, with the breaker's log lines (`info` and up) collected: its stderr, read
/// until the process ends.
fn logged_fleet_consumer(
    redis: &TestRedis,
    lock_ms: u64,
) -> (Child, std::thread::JoinHandle<String>) {
    let mut child = fleet_consumer_command(redis, lock_ms)
        .env("RUST_LOG", "warn,bus_core::host::breaker=info")
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start chaos-consumer");
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut out);
        out
    });
    (child, reader)
}

/// When the queue's fleet breaker was first seen tripped (ms, Redis's clock, which is
/// this machine's): its `breaker_until` less the cool-down.
async fn first_trip(admin: &Admin, cool_down: u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if let Some(until) = admin.flow(&jobs()).await.unwrap().breaker_until_ms {
            return until - cool_down;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the fleet breaker was never tripped");
}

/// Every process's runs by start, split where nothing started anywhere for over a second.
fn fleet_stretches(all: &[Attempt]) -> Vec<Vec<Attempt>> {
    let mut runs = all.to_vec();
    runs.sort_by_key(|a| a.start);
    let mut out: Vec<Vec<Attempt>> = Vec::new();
    for run in runs {
        match out.last_mut() {
            Some(last) if run.start - last[last.len() - 1].start <= 1_000 => last.push(run),
            _ => out.push(vec![run]),
        }
    }
    out
}

/// The circuit breaker's fleet scope with every other setting at its default (it opens
/// when at least half of at least 20 runs failed within 30 s, stays open 5 s, then lets
/// one message through), in three consumer processes against a real Redis, measured from
/// the handlers' own records: the first process whose window trips stops all three; after
/// each cool-down exactly one run starts in the whole fleet (the probe); a failed probe
/// trips it again; the first probe that succeeds closes it, and every process runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_breaker_stops_every_process_and_one_probe_at_a_time_closes_it_for_all() {
    const JOBS: u64 = 2_000;
    let cool_down = bus_core::CircuitBreaker::default().cool_down.as_millis() as u64;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = admin(&redis).await;
    let bus = bus(&redis.url(), &prefix).await;
    client
        .cmd(&["SET", &bus_chaos::failing_key(&prefix), "1"])
        .unwrap();
    send_jobs(&bus, JOBS).await;
    let (mut hosts, logs): (Vec<Child>, Vec<_>) = (0..3)
        .map(|_| logged_fleet_consumer(&redis, 30_000))
        .unzip();
    let pids: Vec<u32> = hosts.iter().map(Child::id).collect();

    let t0 = first_trip(&admin, cool_down).await;
    // The operator sees it, with its end.
    let until = admin.stats(&jobs()).await.unwrap().breaker_until_ms;
    assert!(until.is_some_and(|u| u >= t0 + cool_down), "{until:?}");
    // Every host shows it (heartbeats, the dashboard's source): open or, at the probe's
    // host, half-open.
    let mut all_open = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !all_open && std::time::Instant::now() < deadline {
        let hosts = admin.hosts().await.unwrap();
        all_open = hosts.len() == 3
            && hosts.iter().all(|h| {
                h.info
                    .breakers
                    .get(<Job as Message>::NAME)
                    .is_some_and(|s| *s != bus_core::BreakerState::Closed)
            });
        if !all_open {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert!(
        all_open,
        "not every host's heartbeat showed the fleet breaker open"
    );
    // The outage lasts for two probes (both fail).
    let probes_failed = |client: &mut SyncClient| {
        attempts(client, &prefix)
            .iter()
            .filter(|a| a.start + 100 >= t0 + cool_down)
            .count()
            >= 2
    };
    assert!(
        eventually(Duration::from_secs(30), || probes_failed(&mut client)).await,
        "no two probes ran"
    );
    client
        .cmd(&["DEL", &bus_chaos::failing_key(&prefix)])
        .unwrap();
    assert!(
        eventually(Duration::from_secs(90), || processed(&mut client, &prefix)
            == JOBS as i64)
        .await,
        "the jobs were not all processed after the outage ended"
    );
    for host in &mut hosts {
        kill(host);
    }

    let all = attempts(&mut client, &prefix);
    // Every process ran (and failed) before the trip.
    for pid in &pids {
        assert!(
            all.iter().any(|a| a.pid == *pid && a.start <= t0),
            "{pid} never ran before the trip"
        );
    }
    let stretches = fleet_stretches(&all);
    let burst = &stretches[0];
    assert!(burst.iter().all(|a| a.failed), "{burst:?}");
    // Nothing started anywhere after the trip (runs reserved just before it start within
    // a few ms) until the cool-down ended.
    let last = burst[burst.len() - 1].start;
    assert!(
        last <= t0 + 50,
        "a run started {} ms after the trip",
        last - t0
    );
    // Each failed probe ran alone in the whole fleet, a cool-down after the trip before it
    // (the first trip, then the failed probe's own re-trip when it ended).
    let closing = 1 + stretches[1..]
        .iter()
        .position(|s| !s[0].failed)
        .expect("no probe succeeded");
    assert!(closing >= 3, "{} failed probes", closing - 1);
    let first = stretches[1][0].start;
    assert!(
        first + 2 >= t0 + cool_down,
        "probed {} ms after the trip",
        first - t0
    );
    for i in 1..closing {
        assert_eq!(
            stretches[i].len(),
            1,
            "a failed probe was not alone: {:?}",
            stretches[i]
        );
        let next = stretches[i + 1][0].start;
        let tripped = stretches[i][0].end;
        assert!(
            next + 2 >= tripped + cool_down,
            "probed {} ms after the re-trip",
            next - tripped
        );
    }
    // The probe that succeeded ran alone until it ended; then, within a second, every
    // process ran again.
    let after: Vec<Attempt> = stretches[closing..].concat();
    let closed = after[0].end;
    assert!(
        after[1..].iter().all(|a| a.start >= closed),
        "{:?}",
        &after[..2]
    );
    for pid in &pids {
        let resumed = after.iter().find(|a| a.pid == *pid).map(|a| a.start);
        assert!(
            resumed.is_some_and(|start| start <= closed + 1_000),
            "{pid} resumed {:?} ms after the close",
            resumed.map(|start| start - closed)
        );
    }
    assert_eq!(admin.stats(&jobs()).await.unwrap().breaker_until_ms, None);

    // Each process logged each change of its breaker once: open once, then again after
    // each probe of its own that failed; half-open once per probe it ran; closed once.
    let logs: Vec<String> = logs.into_iter().map(|l| l.join().unwrap()).collect();
    for (pid, log) in pids.iter().zip(&logs) {
        let probes: Vec<&Attempt> = stretches[1..=closing]
            .iter()
            .map(|s| &s[0])
            .filter(|a| a.pid == *pid)
            .collect();
        let failed = probes.iter().filter(|a| a.failed).count();
        let count = |text: &str| log.matches(text).count();
        assert_eq!(
            (
                count("circuit breaker open on every host"),
                count("circuit breaker half-open"),
                count("circuit breaker closed")
            ),
            (1 + failed, probes.len(), 1),
            "{pid}: {log}"
        );
    }
}

/// The fleet breaker's probe slot is held for the prober's lock timeout, at its default
/// (60 s): when the process running the probe is SIGKILLed mid-probe, no process takes
/// anything until that lock timeout has passed, then exactly one takes the next probe, and
/// its success closes the breaker for the survivors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_probe_whose_process_is_killed_frees_the_slot_after_the_lock_timeout() {
    const JOBS: u64 = 500;
    let cool_down = bus_core::CircuitBreaker::default().cool_down.as_millis() as u64;
    let lock_ms = bus_core::ProcessingSettings::default()
        .message_lock_timeout
        .as_millis() as u64;
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let admin = admin(&redis).await;
    let bus = bus(&redis.url(), &prefix).await;
    client
        .cmd(&["SET", &bus_chaos::failing_key(&prefix), "1"])
        .unwrap();
    send_jobs(&bus, JOBS).await;
    let mut hosts = vec![
        fleet_consumer(&redis, lock_ms),
        fleet_consumer(&redis, lock_ms),
        fleet_consumer(&redis, lock_ms),
    ];
    let t0 = first_trip(&admin, cool_down).await;
    // Once the runs started before the trip are over, the next run (the probe) hangs.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    client
        .cmd(&["SET", &bus_chaos::holding_key(&prefix), "1"])
        .unwrap();
    let held = |client: &mut SyncClient| {
        client
            .int(&["LLEN", &bus_chaos::held_key(&prefix)])
            .unwrap()
            > 0
    };
    assert!(
        eventually(Duration::from_secs(15), || held(&mut client)).await,
        "no probe started"
    );
    let probe = client
        .cmd(&["LINDEX", &bus_chaos::held_key(&prefix), "0"])
        .unwrap();
    let fields: Vec<u64> = probe
        .as_str()
        .unwrap()
        .split(' ')
        .map(|f| f.parse().unwrap())
        .collect();
    let (probe_pid, probe_start) = (fields[0] as u32, fields[1]);
    assert!(
        probe_start + 2 >= t0 + cool_down,
        "probed {} ms after the trip",
        probe_start - t0
    );
    let killed = hosts.iter().position(|h| h.id() == probe_pid).unwrap();
    kill(&mut hosts[killed]);
    let mut survivors: Vec<Child> = hosts
        .into_iter()
        .enumerate()
        .filter_map(|(i, h)| (i != killed).then_some(h))
        .collect();
    client
        .cmd(&["DEL", &bus_chaos::holding_key(&prefix)])
        .unwrap();
    client
        .cmd(&["DEL", &bus_chaos::failing_key(&prefix)])
        .unwrap();
    assert!(
        eventually(Duration::from_secs(lock_ms / 1_000 + 60), || processed(
            &mut client,
            &prefix
        ) == JOBS
            as i64)
        .await,
        "the jobs were not all processed after the probe's host was killed"
    );
    let survivor_pids: Vec<u32> = survivors.iter().map(Child::id).collect();
    for host in &mut survivors {
        kill(host);
    }

    let mut after: Vec<Attempt> = attempts(&mut client, &prefix)
        .into_iter()
        .filter(|a| a.start > probe_start)
        .collect();
    after.sort_by_key(|a| a.start);
    // Nothing ran while the dead probe held the slot; then one probe, alone, succeeded.
    let next = after[0];
    assert!(
        next.start + 50 >= probe_start + lock_ms,
        "a run started {} ms after the killed probe",
        next.start - probe_start
    );
    assert!(
        next.start <= probe_start + lock_ms + 5_000,
        "the slot reopened only {} ms after the killed probe",
        next.start - probe_start
    );
    assert!(!next.failed, "{next:?}");
    assert!(
        after[1..].iter().all(|a| a.start >= next.end),
        "{:?}",
        &after[..2]
    );
    for pid in survivor_pids {
        assert!(
            after.iter().any(|a| a.pid == pid),
            "{pid} never ran after the close"
        );
    }
}
