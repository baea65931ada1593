//! Singleton processors across processes, with every setting at its default: of several
//! host processes running the same singleton processor, one handles at a time; when it
//! is killed with SIGKILL another takes over within the lease's bound (ttl + ttl/3),
//! and when it stops gracefully the next takes over within one retry (ttl/3).

use bus_core::defaults;
use std::process::{Child, Command};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod common;

use bus_chaos::{solo_runs_key, solo_up_key, Solo};
use bus_test_redis::{eventually, SyncClient, TestRedis};
use common::{bus, kill};

/// A `singleton-host` process.
fn host(url: &str, prefix: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_singleton-host"))
        .env("REDIS_URL", url)
        .env("BUS_PREFIX", prefix)
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("start singleton-host")
}

/// One finished handler run.
#[derive(Debug, Clone, Copy)]
struct Run {
    pid: u32,
    n: u64,
    start: u128,
    end: u128,
}

fn runs(client: &mut SyncClient, prefix: &str) -> Vec<Run> {
    client
        .list(&solo_runs_key(prefix))
        .unwrap()
        .iter()
        .map(|line| {
            let line = String::from_utf8_lossy(line);
            let f: Vec<&str> = line.split(' ').collect();
            Run {
                pid: f[0].parse().unwrap(),
                n: f[1].parse().unwrap(),
                start: f[2].parse().unwrap(),
                end: f[3].parse().unwrap(),
            }
        })
        .collect()
}

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

/// The pid in the lease's holder token (`<pid>:<id>`), if anyone holds it.
fn holder(client: &mut SyncClient, prefix: &str) -> Option<u32> {
    let token = client
        .get(&bus_redis::keys::singleton(prefix, "solo"))
        .unwrap()?;
    String::from_utf8_lossy(&token)
        .split(':')
        .next()?
        .parse()
        .ok()
}

async fn up(client: &mut SyncClient, prefix: &str, pid: u32) -> bool {
    eventually(Duration::from_secs(30), || {
        client.get(&solo_up_key(prefix, pid)).unwrap().is_some()
    })
    .await
}

/// Runs of different processes never overlap in time.
fn assert_no_overlap(runs: &[Run]) {
    for a in runs {
        for b in runs.iter().filter(|b| b.pid != a.pid) {
            assert!(
                a.end <= b.start || b.end <= a.start,
                "runs overlap across processes: {a:?} and {b:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_at_a_time_and_the_lease_moves_when_its_holder_is_killed() {
    let ttl = defaults::SINGLETON_TTL;
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    let mut client = redis.client();
    let bus = bus(&url, &prefix).await;

    let mut a = host(&url, &prefix);
    let a_pid = a.id();
    assert!(
        eventually(Duration::from_secs(30), || holder(&mut client, &prefix)
            == Some(a_pid))
        .await
    );
    let mut b = host(&url, &prefix);
    let b_pid = b.id();
    assert!(up(&mut client, &prefix, b_pid).await, "B did not start");

    // Both run: A, the holder, handles everything.
    for n in 0..200 {
        bus.send(&Solo { n }).await.unwrap();
    }
    let all = eventually(Duration::from_secs(60), || {
        runs(&mut client, &prefix).len() == 200
    })
    .await;
    let before = runs(&mut client, &prefix);
    assert!(all, "{} of 200 handled", before.len());
    assert!(
        before.iter().all(|r| r.pid == a_pid),
        "B handled while A held the lease"
    );

    // Kill A mid-stream.
    for n in 200..600 {
        bus.send(&Solo { n }).await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(60), || runs(&mut client, &prefix).len()
            >= 220)
        .await
    );
    let killed_at = micros();
    kill(&mut a);

    // B takes over when A's lease expires: not before (A renewed it at most ttl/3 before
    // the kill), and within ttl + ttl/3 (B retries every ttl/3).
    let took_over = eventually(ttl + ttl / 3 + Duration::from_secs(10), || {
        runs(&mut client, &prefix).iter().any(|r| r.pid == b_pid)
    })
    .await;
    assert!(took_over, "B never took over");
    let all = runs(&mut client, &prefix);
    let first_b = all
        .iter()
        .filter(|r| r.pid == b_pid)
        .map(|r| r.start)
        .min()
        .unwrap();
    let takeover = Duration::from_micros((first_b.saturating_sub(killed_at)) as u64);
    println!("SIGKILL of the holder: the other host took over after {takeover:?} (ttl {ttl:?})");
    assert!(
        takeover >= ttl * 2 / 3 - Duration::from_millis(500),
        "took over after {takeover:?}: A's lease was still valid"
    );
    assert!(
        takeover <= ttl + ttl / 3 + Duration::from_secs(1),
        "took over after {takeover:?}"
    );
    assert!(all
        .iter()
        .filter(|r| r.pid == a_pid)
        .all(|r| r.end <= killed_at));
    assert_eq!(holder(&mut client, &prefix), Some(b_pid));

    // A third host joins; B stops gracefully (SIGTERM) and gives the lease up: C takes it
    // at its next try, within ttl/3, long before the lease would have expired.
    let mut c = host(&url, &prefix);
    let c_pid = c.id();
    assert!(up(&mut client, &prefix, c_pid).await, "C did not start");
    let status = Command::new("kill")
        .args(["-TERM", &b_pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    b.wait().unwrap();
    let stopped_at = micros();
    assert!(
        eventually(ttl / 3 + Duration::from_secs(2), || holder(
            &mut client,
            &prefix
        ) == Some(c_pid))
        .await,
        "C did not take the released lease"
    );
    let handover = Duration::from_micros((micros() - stopped_at) as u64);
    println!("graceful stop of the holder: the next host took over within {handover:?}");
    for n in 600..650 {
        bus.send(&Solo { n }).await.unwrap();
    }
    let by_c = eventually(Duration::from_secs(30), || {
        runs(&mut client, &prefix)
            .iter()
            .any(|r| r.pid == c_pid && r.n >= 600)
    })
    .await;
    kill(&mut c);
    assert!(by_c, "C did not handle after taking over");
    let all = runs(&mut client, &prefix);
    assert!(all
        .iter()
        .filter(|r| r.pid == b_pid)
        .all(|r| r.end <= stopped_at));
    assert_no_overlap(&all);
}
