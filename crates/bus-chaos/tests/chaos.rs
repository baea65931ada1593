//! Reliability under real failures: consumers killed with SIGKILL, handlers that abort
//! the process, Redis restarted mid-run.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

mod common;

use bus_chaos::{processed_key, runs_key, Job};
use bus_test_redis::{eventually, eventually_async, RedisServer, SyncClient, TestRedis};
use common::{backlog, bus, consumer, kill, send_jobs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_killed_with_sigkill_lose_nothing() {
    // SPEC §9: repeated SIGKILLs during a 100,000-message run.
    const JOBS: u64 = 100_000;
    const KILLS: i64 = 10;
    // Each consumer is killed after this much progress of its own, so the kills are
    // spread over the run and the last consumer drains the rest (about a sixth).
    const PER_ROUND: i64 = JOBS as i64 / (KILLS + 2);
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    send_jobs(&bus(&url, &prefix).await, JOBS).await;
    let mut client = redis.client();
    let processed = |c: &mut SyncClient| c.int(&["SCARD", &processed_key(&prefix)]).unwrap();

    for round in 0..KILLS {
        let before = processed(&mut client);
        let mut child = consumer(&url, &prefix, "record", 1_000, 100);
        // Kill it mid-stream: after it made some progress, never at a fixed time.
        let progressed = eventually(Duration::from_secs(60), || {
            processed(&mut client) >= before + PER_ROUND
        })
        .await;
        kill(&mut child);
        assert!(progressed, "round {round}: the consumer made no progress");
        assert!(
            processed(&mut client) < JOBS as i64,
            "round {round}: finished before the kill; send more jobs"
        );
    }
    let mut last = consumer(&url, &prefix, "record", 1_000, 100);
    let drained = eventually(Duration::from_secs(120), || {
        backlog(&mut client, &prefix) == [0; 4] && processed(&mut client) == JOBS as i64
    })
    .await;
    kill(&mut last);

    let members = client.cmd(&["SMEMBERS", &processed_key(&prefix)]).unwrap();
    let ids: HashSet<String> = members
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_owned())
        .collect();
    let lost = (0..JOBS).filter(|n| !ids.contains(&n.to_string())).count();
    let runs = client.int(&["GET", &runs_key(&prefix)]).unwrap();
    let left = backlog(&mut client, &prefix);
    let dead = client.int(&["LLEN", &common::keys(&prefix).dead]).unwrap();
    println!(
        "SIGKILL x{KILLS}: {JOBS} jobs, {runs} handler runs: {lost} lost, {} duplicate runs, \
         {} in flight, {dead} dead-lettered; [ready, in flight, delayed, stored] = {left:?}",
        runs - ids.len() as i64,
        left[1]
    );
    assert!(
        drained,
        "not drained: processed {}, [ready, in flight, delayed, stored] = {left:?}",
        ids.len()
    );
    assert_eq!(lost, 0, "jobs never processed");
    assert_eq!(left, [0; 4], "left in flight or stored");
    assert_eq!(dead, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_aborts_the_process_every_time_is_still_dead_lettered() {
    const LIMIT: u32 = 3;
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    bus(&url, &prefix).await.send(&Job { n: 1 }).await.unwrap();
    let mut client = redis.client();
    let keys = common::keys(&prefix);
    let dead_key = keys.dead.clone();
    let starts = AtomicU32::new(0);
    // One consumer start per round, until the message is dead-lettered.
    let dead_lettered = eventually_async(Duration::from_secs(60), || async {
        let mut client = redis.client();
        if client.int(&["LLEN", &dead_key]).unwrap() > 0 {
            return true;
        }
        let mut child = consumer(&url, &prefix, "abort", 300, LIMIT);
        starts.fetch_add(1, Ordering::SeqCst);
        // The child aborts in the handler, or recovers and dead-letters the message.
        let exited = eventually(Duration::from_secs(10), || {
            child.try_wait().unwrap().is_some() || client.int(&["LLEN", &dead_key]).unwrap() == 1
        })
        .await;
        if child.try_wait().unwrap().is_none() {
            kill(&mut child);
        }
        assert!(exited, "the consumer neither crashed nor dead-lettered");
        client.int(&["LLEN", &dead_key]).unwrap() > 0
    });
    assert!(
        dead_lettered.await,
        "never dead-lettered after {} consumer starts",
        starts.load(Ordering::SeqCst)
    );
    let id = client.cmd(&["LINDEX", &dead_key, "0"]).unwrap();
    let id = id.as_str().unwrap();
    let info = client.cmd(&["HGET", &keys.dead_info, id]).unwrap();
    let errors = client.cmd(&["HGET", &keys.errors, id]).unwrap();
    let runs = client.int(&["GET", &runs_key(&prefix)]).unwrap();
    assert_eq!(runs, i64::from(LIMIT), "the handler ran {runs} times; the limit is {LIMIT}; dead letter {info:?}, errors {errors:?}");
    assert!(info.as_str().unwrap().contains("\"delivery_limit\""));
    assert_eq!(backlog(&mut client, &prefix)[..3], [0, 0, 0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_mid_run_loses_nothing() {
    const JOBS: u64 = 5_000;
    let mut server = RedisServer::builder().appendonly(true).start().unwrap();
    let (url, prefix) = (server.url(), "restart".to_owned());
    send_jobs(&bus(&url, &prefix).await, JOBS).await;
    let mut child = consumer(&url, &prefix, "record", 2_000, 100);
    let processed = |c: &mut SyncClient| c.int(&["SCARD", &processed_key(&prefix)]).unwrap();
    let mut client = server.client();
    let started = eventually(Duration::from_secs(60), || processed(&mut client) >= 500);
    assert!(started.await);
    server.restart().unwrap();
    let mut client = server.client();
    let drained = eventually(Duration::from_secs(120), || {
        backlog(&mut client, &prefix) == [0; 4] && processed(&mut client) == JOBS as i64
    })
    .await;
    kill(&mut child);
    assert!(
        drained,
        "after the restart: processed {}, backlog {:?}",
        processed(&mut client),
        backlog(&mut client, &prefix)
    );
}
