//! A rolling upgrade across a protocol version (docs/operations.md, "Upgrades"): the
//! chaos consumer of commit 1f46ce1 (protocol 1, the layout before leases), built from git
//! here, works a backlog and is SIGKILLed mid-run while today's producer keeps sending;
//! then today's hosts (protocol 4) must finish everything. And a host refuses to start on
//! a Redis that records another protocol, losing nothing.
//!
//! The old build lives in `<target>/upgrade-1f46ce1` (its own target dir, so its binary
//! never collides with today's), its source in `<target>/upgrade-1f46ce1-src`, both kept
//! between runs. It needs the git history (`git archive 1f46ce1`). Cold, the old build
//! took 68-77 s on the 2-core machine (118 crates); cached, under a second.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bus_chaos::{processed_key, Job};
use bus_redis::keys;
use bus_test_redis::{eventually, SyncClient, TestRedis};
use common::{bus, consumer_command, keys as queue_keys, kill};

/// The last commit of protocol 1.
const OLD: &str = "1f46ce1";
/// The default lock (`ProcessingSettings::default()`): what the old consumers' locks last,
/// so today's hosts recover them after that.
const LOCK_MS: u64 = 60_000;
const LIMIT: u32 = 100;

/// The target dir this test was built into: `<target>/debug/deps/upgrade-<hash>`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    exe.ancestors()
        .nth(3)
        .expect("the test runs from <target>/<profile>/deps")
        .to_path_buf()
}

/// Runs `command` to completion within `limit`, killing it past that.
fn run_bounded(mut command: Command, limit: Duration, what: &str) {
    let mut child = command.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{what} failed: {status}");
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} took longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The chaos consumer of commit 1f46ce1, built once (cached between runs).
fn old_consumer_binary() -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(path) = built.as_ref() {
        return path.clone();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = target_dir();
    let src = target.join(format!("upgrade-{OLD}-src"));
    let marker = src.join(".extracted");
    if !marker.exists() {
        // Extracted whole or not at all: into a fresh directory, marked when complete.
        let _ = std::fs::remove_dir_all(&src);
        std::fs::create_dir_all(&src).unwrap();
        let mut archive = Command::new("git");
        archive
            .current_dir(&root)
            .args(["archive", "--format=tar", OLD])
            .stdout(Stdio::piped());
        let mut archive = archive.spawn().expect("git runs");
        let mut tar = Command::new("tar");
        tar.arg("-x")
            .arg("-C")
            .arg(&src)
            .stdin(archive.stdout.take().unwrap());
        run_bounded(tar, Duration::from_secs(120), "tar -x of git archive");
        assert!(
            archive.wait().unwrap().success(),
            "git archive {OLD} failed (the test needs the repository's history)"
        );
        std::fs::write(&marker, OLD).unwrap();
    }
    let out = target.join(format!("upgrade-{OLD}"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut build = Command::new(cargo);
    build.current_dir(&src).env("CARGO_TARGET_DIR", &out).args([
        "build",
        "--locked",
        "-p",
        "bus-chaos",
        "--bin",
        "chaos-consumer",
    ]);
    let started = Instant::now();
    run_bounded(
        build,
        Duration::from_secs(1800),
        "building the 1f46ce1 chaos consumer",
    );
    println!("the {OLD} chaos consumer built in {:?}", started.elapsed());
    let path = out.join("debug/chaos-consumer");
    assert!(path.exists(), "no {}", path.display());
    *built = Some(path.clone());
    path
}

fn old_consumer(url: &str, prefix: &str) -> Child {
    let command = consumer_command(url, prefix, "record", LOCK_MS, LIMIT);
    // The same environment (1f46ce1's chaos consumer reads the same variables).
    let mut old = Command::new(old_consumer_binary());
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            old.env(key, value);
        }
    }
    old.spawn().expect("start the old chaos consumer")
}

/// Consumer processes, SIGKILLed when dropped: a failed assertion leaves none running.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn processed(client: &mut SyncClient, prefix: &str) -> i64 {
    client.int(&["SCARD", &processed_key(prefix)]).unwrap()
}

/// Plain JSON envelopes of jobs `from..to`, pushed as a protocol-1 producer does (one RPUSH
/// of the envelope, the same in both protocols).
fn push_jobs(client: &mut SyncClient, prefix: &str, from: u64, to: u64) {
    let ready = queue_keys(prefix).ready;
    for start in (from..to).step_by(1000) {
        let mut args = vec!["RPUSH".to_owned(), ready.clone()];
        args.extend((start..(start + 1000).min(to)).map(|n| {
            format!(r#"{{"v":1,"id":"job-{n}","type":"chaos","sent":1,"body":{{"n":{n}}}}}"#)
        }));
        assert!(client.cmd(&args).unwrap().as_int().is_some());
    }
}

/// Every key under `prefix`, as DUMPs: equal snapshots mean nothing was written.
fn snapshot(client: &mut SyncClient, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    client
        .scan_match(&format!("{prefix}*"))
        .unwrap()
        .into_iter()
        .filter_map(|key| {
            let dump = client.cmd(&["DUMP", &key]).unwrap();
            dump.as_bytes().map(|b| (key, b.to_vec()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_1_consumers_killed_mid_run_then_protocol_2_hosts_finish_everything() {
    const BACKLOG: u64 = 20_000;
    const MORE: u64 = 10_000;
    let old_binary = old_consumer_binary();
    assert!(old_binary.exists());
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    let mut client = redis.client();
    let k = queue_keys(&prefix);
    push_jobs(&mut client, &prefix, 0, BACKLOG);

    // Protocol 1 at work: two old consumers; today's producer keeps sending meanwhile.
    let mut old = Children(vec![
        old_consumer(&url, &prefix),
        old_consumer(&url, &prefix),
    ]);
    let producer = {
        let (url, prefix) = (url.clone(), prefix.clone());
        tokio::spawn(async move {
            let bus = bus(&url, &prefix).await;
            for start in (BACKLOG..BACKLOG + MORE).step_by(500) {
                let batch: Vec<Job> = (start..start + 500).map(|n| Job { n }).collect();
                bus.send_batch(&batch).await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    for (i, child) in old.0.iter_mut().enumerate() {
        let target = 4_000 * (i as i64 + 1);
        // Killed mid-stream, with messages in flight: after some progress, never at a
        // fixed time.
        let busy = eventually(Duration::from_secs(120), || {
            processed(&mut client, &prefix) >= target
                && client.int(&["ZCARD", &k.inflight]).unwrap() > 0
        })
        .await;
        kill(child);
        assert!(busy, "old consumer {i} made no progress");
    }
    let in_flight = client.int(&["ZCARD", &k.inflight]).unwrap();
    let processed_by_old = processed(&mut client, &prefix);
    assert!(in_flight > 0, "the old consumers left nothing in flight");
    assert_eq!(
        client.int(&["ZCARD", &k.leases]).unwrap(),
        0,
        "the old consumers made leases: not the protocol-1 build"
    );
    assert!(
        processed_by_old < (BACKLOG + MORE) as i64,
        "nothing left to upgrade"
    );

    // Protocol 2 takes over: today's hosts, default lock, recover the old layout's
    // in-flight messages after their lock and drain the rest.
    let mut new = Children(
        (0..2)
            .map(|_| {
                consumer_command(&url, &prefix, "record", LOCK_MS, LIMIT)
                    .spawn()
                    .expect("start chaos-consumer")
            })
            .collect(),
    );
    producer.await.unwrap();
    let total = (BACKLOG + MORE) as i64;
    let held: Vec<String> = [
        &k.ready,
        &k.suspects,
        &k.inflight,
        &k.delayed,
        &k.msgs,
        &k.deliveries,
        &k.leases,
        &k.leased,
        &k.isolated,
        &k.dead,
    ]
    .into_iter()
    .cloned()
    .collect();
    let drained = eventually(Duration::from_secs(240), || {
        processed(&mut client, &prefix) == total
            && held
                .iter()
                .all(|key| client.int(&["EXISTS", key.as_str()]).unwrap() == 0)
    })
    .await;
    for child in &mut new.0 {
        kill(child);
    }
    let left: Vec<(String, i64)> = held
        .iter()
        .map(|key| (key.clone(), client.int(&["EXISTS", key.as_str()]).unwrap()))
        .filter(|(_, n)| *n > 0)
        .collect();
    let members = client.cmd(&["SMEMBERS", &processed_key(&prefix)]).unwrap();
    let ids: HashSet<&str> = members
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let lost = (0..total as u64)
        .filter(|n| !ids.contains(n.to_string().as_str()))
        .count();
    println!(
        "upgrade: {total} jobs, {processed_by_old} processed by protocol 1, {in_flight} left \
         in its flight when killed; {lost} lost; keys left {left:?}"
    );
    assert!(
        drained,
        "not finished: {lost} never processed, keys left {left:?}"
    );
    assert_eq!(lost, 0);
    assert_eq!(
        client.get(&keys::protocol(&prefix)).unwrap().as_deref(),
        Some(bus_redis::PROTOCOL.to_string().as_bytes())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_refuses_to_start_on_a_redis_of_another_protocol_losing_nothing() {
    const JOBS: u64 = 100;
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    let mut client = redis.client();
    push_jobs(&mut client, &prefix, 0, JOBS);
    let key = keys::protocol(&prefix);
    let newer = (bus_redis::PROTOCOL + 1).to_string();
    client.set(&key, &newer).unwrap();
    let before = snapshot(&mut client, &prefix);

    let mut refused = consumer_command(&url, &prefix, "record", LOCK_MS, LIMIT)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chaos-consumer");
    let exited = eventually(Duration::from_secs(30), || {
        refused.try_wait().unwrap().is_some()
    })
    .await;
    if !exited {
        kill(&mut refused);
    }
    let out = refused.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        exited,
        "a host started on a Redis of protocol {newer}: {stderr}"
    );
    assert!(!out.status.success());
    // (The chaos consumer's `main` returns the error: Rust prints its Debug form.)
    assert!(
        stderr.contains("ProtocolMismatch") && stderr.contains(&format!(r#"found: "{newer}""#)),
        "{stderr}"
    );
    assert_eq!(
        snapshot(&mut client, &prefix),
        before,
        "the refused host wrote"
    );

    // Nothing was lost: once the record says this build's protocol, a host processes
    // every job.
    client.set(&key, bus_redis::PROTOCOL.to_string()).unwrap();
    let mut host = consumer_command(&url, &prefix, "record", LOCK_MS, LIMIT)
        .spawn()
        .expect("start chaos-consumer");
    let done = eventually(Duration::from_secs(60), || {
        processed(&mut client, &prefix) == JOBS as i64
    })
    .await;
    kill(&mut host);
    assert!(done, "processed {}", processed(&mut client, &prefix));
}
