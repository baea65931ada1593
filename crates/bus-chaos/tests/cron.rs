//! Recurring messages across processes against a real Redis, every setting at its
//! default but the clock offsets: three `cron-host` processes with clocks 300 ms behind,
//! right and 300 ms ahead run one every-second schedule, and each tick is handled once,
//! none left out, also when one of them is killed with SIGKILL; ticks missed while every
//! host was down are skipped (the default) or caught up once.

use std::process::{Child, Command};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod common;

use bus_chaos::{cron_ticks_key, cron_up_key};
use bus_test_redis::{eventually, SyncClient, TestRedis};
use common::kill;

/// A `cron-host` process whose schedule reads a clock `offset_ms` off.
fn host(url: &str, prefix: &str, offset_ms: i64, missed: &str) -> Child {
    host_consuming(url, prefix, offset_ms, missed, true)
}

/// [`host`], consuming the schedule's queue or not.
fn host_consuming(url: &str, prefix: &str, offset_ms: i64, missed: &str, consume: bool) -> Child {
    Command::new(env!("CARGO_BIN_EXE_cron-host"))
        .env("CONSUME", if consume { "1" } else { "0" })
        .env("REDIS_URL", url)
        .env("BUS_PREFIX", prefix)
        .env("CLOCK_OFFSET_MS", offset_ms.to_string())
        .env("MISSED", missed)
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("start cron-host")
}

/// Stops a host gracefully (SIGTERM) and waits for it.
fn stop(child: &mut Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait().unwrap();
}

/// The ticks handled so far, in the order handled.
fn ticks(client: &mut SyncClient, prefix: &str) -> Vec<u64> {
    client
        .list(&cron_ticks_key(prefix))
        .unwrap()
        .iter()
        .map(|line| {
            let line = String::from_utf8_lossy(line);
            line.split(' ').nth(1).unwrap().parse().unwrap()
        })
        .collect()
}

/// When the host of `pid` started (ms), once it runs.
async fn started(client: &mut SyncClient, prefix: &str, pid: u32) -> u64 {
    let mut at = None;
    let up = eventually(Duration::from_secs(30), || {
        at = client.get(&cron_up_key(prefix, pid)).unwrap();
        at.is_some()
    })
    .await;
    assert!(up, "cron-host {pid} did not start");
    String::from_utf8_lossy(&at.unwrap()).parse().unwrap()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Each tick at most once, and every second between the first and the last.
fn assert_each_second_once(ticks: &[u64]) {
    let mut sorted = ticks.to_vec();
    sorted.sort_unstable();
    let steps: Vec<u64> = sorted.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        sorted.iter().all(|t| t % 1000 == 0) && steps.iter().all(|s| *s == 1000),
        "each second once, none twice or left out: {sorted:?}"
    );
}

async fn handled_at_least(client: &mut SyncClient, prefix: &str, n: usize) -> bool {
    eventually(Duration::from_secs(15), || ticks(client, prefix).len() >= n).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_skewed_hosts_send_each_tick_once_even_when_one_is_killed() {
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    let mut client = redis.client();
    // The fastest host, which presents each tick first, only schedules: its SIGKILL
    // below tests the schedule, not the recovery of the messages it held.
    let mut hosts = vec![
        host(&url, &prefix, -300, "skip"),
        host(&url, &prefix, 0, "skip"),
        host_consuming(&url, &prefix, 300, "skip", false),
    ];
    for h in &hosts {
        started(&mut client, &prefix, h.id()).await;
    }
    let before = ticks(&mut client, &prefix).len();
    assert!(handled_at_least(&mut client, &prefix, before + 4).await);

    // The fastest host dies mid-schedule: the others go on, still once per tick.
    let mut fastest = hosts.pop().unwrap();
    kill(&mut fastest);
    let after_kill = ticks(&mut client, &prefix).len();
    assert!(handled_at_least(&mut client, &prefix, after_kill + 3).await);
    for h in &mut hosts {
        stop(h);
    }
    let all = ticks(&mut client, &prefix);
    assert_each_second_once(&all);
    // The record in Redis names the last tick stored.
    let last = bus_test_redis::TestRedis::keys(&redis)
        .into_iter()
        .find(|k| k.ends_with(":schedule:beat"))
        .expect("the schedule's key");
    let last: u64 = String::from_utf8_lossy(&client.get(&last).unwrap().unwrap())
        .parse()
        .unwrap();
    assert_eq!(Some(&last), all.iter().max());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_missed_while_every_host_was_down_are_skipped_or_caught_up_once() {
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    let mut client = redis.client();
    // The schedule runs, then every host is down for three seconds: three ticks missed.
    let down = |client: &mut SyncClient| {
        let last = ticks(client, &prefix).into_iter().max().unwrap();
        (last, now_ms() + 3000)
    };
    let mut first = host(&url, &prefix, 0, "skip");
    started(&mut client, &prefix, first.id()).await;
    assert!(handled_at_least(&mut client, &prefix, 2).await);
    stop(&mut first);
    let (last, back) = down(&mut client);
    // Every host down: waiting for the clock is the point here.
    tokio::time::sleep(Duration::from_millis(back.saturating_sub(now_ms()))).await;

    // The default skips them: the first tick after the gap is after the restart.
    let mut skipping = host(&url, &prefix, 0, "skip");
    let restart = started(&mut client, &prefix, skipping.id()).await;
    let seen = ticks(&mut client, &prefix).len();
    assert!(handled_at_least(&mut client, &prefix, seen + 2).await);
    stop(&mut skipping);
    let after: Vec<u64> = ticks(&mut client, &prefix)
        .into_iter()
        .filter(|t| *t > last)
        .collect();
    assert!(
        after.iter().all(|t| *t > restart),
        "skip sent a tick missed before the restart at {restart}: {after:?}"
    );

    // Catch up once: the latest missed tick is sent at the restart, once, then on time.
    let (last, back) = down(&mut client);
    tokio::time::sleep(Duration::from_millis(back.saturating_sub(now_ms()))).await;
    let mut catching_up = host(&url, &prefix, 0, "catch_up_once");
    let restart = started(&mut client, &prefix, catching_up.id()).await;
    let seen = ticks(&mut client, &prefix).len();
    assert!(handled_at_least(&mut client, &prefix, seen + 2).await);
    stop(&mut catching_up);
    let after: Vec<u64> = ticks(&mut client, &prefix)
        .into_iter()
        .filter(|t| *t > last)
        .collect();
    let caught_up: Vec<u64> = after.iter().copied().filter(|t| *t <= restart).collect();
    assert_eq!(
        caught_up,
        vec![restart - restart % 1000],
        "one catch-up, the latest missed tick (restart at {restart}): {after:?}"
    );
    assert_each_second_once(&after);
    // And over the whole run, with its two gaps: no tick twice.
    let mut all = ticks(&mut client, &prefix);
    let count = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), count, "a tick handled twice: {all:?}");
}
