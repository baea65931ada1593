//! The dashboard's server against a real Redis, over HTTP: what the pages read (a queue's
//! ready, scheduled and in-flight messages; per-key backlogs; sagas), and its safety rules (CSRF token on
//! every POST, loopback host names without a token, the access token when set).

mod common;

use bus_core::records::ErrorRecord;
use bus_core::transport::ConsumerExt;
use bus_core::transport::{ConsumerOptions, Source};
use bus_core::{SagaStore, Transport};
use bus_dashboard::DashboardOptions;
use bus_redis_saga::RedisSagaStore;
use common::{csrf_of, eventually, http, setup, start_dashboard, Payment, Setup, WAIT};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn payments() -> Source {
    Source::queue("payments").unwrap()
}

/// `n` dead letters on `payments`, through a host whose handler refuses them.
async fn dead_letters(s: &Setup, n: u64) {
    let keys = s.transport.keys(&payments());
    let host = s.failing_host().await;
    for i in 0..n {
        s.bus.send(&Payment { n: i }).await.unwrap();
    }
    let dead = eventually(WAIT, || async { s.int("LLEN", &keys.dead) == n as i64 }).await;
    host.shutdown().await.unwrap();
    assert!(dead, "dead letters: {}", s.int("LLEN", &keys.dead));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_changes_need_a_post_with_the_pages_csrf_token() {
    let s = setup().await;
    dead_letters(&s, 3).await;
    let keys = s.transport.keys(&payments());
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;

    let page = http(addr, "GET", "/", &[], "").await;
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-security-policy")
        .unwrap()
        .contains("default-src 'self'"));
    assert!(
        !page.body.contains(&s.redis.url()),
        "the page shows the Redis URL"
    );
    let csrf = csrf_of(&page.body);

    let groups = http(addr, "GET", "/api/dead-letters?name=payments", &[], "")
        .await
        .json();
    assert_eq!(groups["total"], 3);
    assert_eq!(groups["groups"].as_array().unwrap().len(), 1);
    assert_eq!(
        groups["groups"][0]["error"],
        "card declined for payment # (gateway code #)"
    );
    let ids: Vec<String> = serde_json::from_value(groups["groups"][0]["ids"].clone()).unwrap();
    assert_eq!(ids.len(), 3);

    let json = [("content-type", "application/json")];
    let delete = serde_json::json!({ "name": "payments", "ids": [ids[0]] }).to_string();
    // No token, a wrong token, a GET: nothing changes.
    let refused = http(addr, "POST", "/api/dead-letters/delete", &json, &delete).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.json()["error"].as_str().unwrap().contains("CSRF"));
    let wrong = [json[0], ("x-csrf-token", "0".repeat(64).leak())];
    assert_eq!(
        http(addr, "POST", "/api/dead-letters/delete", &wrong, &delete)
            .await
            .status,
        403
    );
    assert_eq!(
        http(addr, "GET", "/api/dead-letters/delete", &[], "")
            .await
            .status,
        405
    );
    assert_eq!(s.int("LLEN", &keys.dead), 3);

    // With the page's token: one deleted, then the rest requeued to another queue.
    let ok = [json[0], ("x-csrf-token", csrf.as_str())];
    let deleted = http(addr, "POST", "/api/dead-letters/delete", &ok, &delete).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(deleted.json()["deleted"], serde_json::json!([ids[0]]));
    assert_eq!(s.int("LLEN", &keys.dead), 2);
    let requeue = serde_json::json!({ "name": "payments", "all": true, "to": "audit" }).to_string();
    let moved = http(addr, "POST", "/api/dead-letters/requeue", &ok, &requeue).await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(moved.json()["target"], "audit");
    assert_eq!(s.int("LLEN", &keys.dead), 0);
    let audit = s.transport.keys(&Source::queue("audit").unwrap());
    assert_eq!(s.int("LLEN", &audit.ready), 2);

    // Bad input is a clear 400 and changes nothing.
    for (body, says) in [
        (r#"{"name":"payments"}"#, "no dead letters selected"),
        (r#"{"name":"a/b/c","all":true}"#, "invalid queue"),
        (r#"{"name":"payments","all":true,"ids":["~1"]}"#, "not both"),
    ] {
        let bad = http(addr, "POST", "/api/dead-letters/requeue", &ok, body).await;
        assert_eq!(bad.status, 400, "{body}: {}", bad.body);
        assert!(
            bad.json()["error"].as_str().unwrap().contains(says),
            "{}",
            bad.body
        );
    }
    let not_json = http(addr, "POST", "/api/dead-letters/requeue", &ok, "{").await;
    assert!(not_json.status >= 400 && not_json.status < 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_only_loopback_host_names_are_served() {
    let s = setup().await;
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let local = http(
        addr,
        "GET",
        "/api/overview",
        &[("Host", "localhost:8080")],
        "",
    )
    .await;
    assert_eq!(local.status, 200, "{}", local.body);
    // A page whose DNS name was re-pointed at 127.0.0.1 (DNS rebinding) sends its own.
    for host in ["evil.example:8080", "evil.example"] {
        let refused = http(addr, "GET", "/", &[("Host", host)], "").await;
        assert_eq!(refused.status, 403, "{host}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_request_needs_it() {
    let s = setup().await;
    let options = DashboardOptions::default().token("open-sesame-42");
    let addr = start_dashboard(&s.transport, options).await;

    assert_eq!(
        http(addr, "GET", "/api/overview", &[], "").await.status,
        401
    );
    assert_eq!(http(addr, "GET", "/metrics", &[], "").await.status, 401);
    let redirect = http(addr, "GET", "/", &[], "").await;
    assert_eq!(redirect.status, 303);
    assert_eq!(redirect.header("location"), Some("/login"));
    let login = http(addr, "GET", "/login", &[], "").await;
    assert_eq!(login.status, 200);
    assert!(login.body.contains("type=\"password\""));

    let form = [("content-type", "application/x-www-form-urlencoded")];
    let wrong = http(addr, "POST", "/login", &form, "token=open-sesame-43").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    let right = http(addr, "POST", "/login", &form, "token=open-sesame-42").await;
    assert_eq!(right.status, 303);
    let cookie = right.header("set-cookie").unwrap().to_owned();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let pair = cookie.split(';').next().unwrap();

    let with_cookie = http(addr, "GET", "/api/overview", &[("Cookie", pair)], "").await;
    assert_eq!(with_cookie.status, 200, "{}", with_cookie.body);
    let bearer = [("Authorization", "Bearer open-sesame-42")];
    assert_eq!(http(addr, "GET", "/metrics", &bearer, "").await.status, 200);
    // The token, not the host name, guards a dashboard that has one.
    let remote = [
        ("Authorization", "Bearer open-sesame-42"),
        ("Host", "bus.internal:8080"),
    ];
    assert_eq!(
        http(addr, "GET", "/api/overview", &remote, "").await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_page_shows_ready_scheduled_and_in_flight_messages() {
    let s = setup().await;
    // One message retried with an error (ready again, with its history), one held in
    // flight with a 60 s lock, one fresh, one scheduled in an hour.
    s.bus
        .send_batch(&[Payment { n: 1 }, Payment { n: 2 }])
        .await
        .unwrap();
    let consumer = s
        .transport
        .consumer(
            &payments(),
            ConsumerOptions::new(Duration::from_secs(60), 5),
        )
        .await
        .unwrap();
    let taken = consumer.take(2, &CancellationToken::new()).await.unwrap();
    assert_eq!(taken.len(), 2);
    let error = ErrorRecord::now("gateway timeout after 3012 ms");
    consumer
        .retry(&taken[0].receipt, Duration::ZERO, &error)
        .await
        .unwrap();
    consumer.close().await.unwrap();
    s.bus.send(&Payment { n: 3 }).await.unwrap();
    s.bus
        .send_delayed(&Payment { n: 4 }, Duration::from_secs(3600))
        .await
        .unwrap();

    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let page = http(addr, "GET", "/api/queue?name=payments", &[], "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let q = page.json();
    let now = q["snapshot"]["at_ms"].as_u64().unwrap();
    assert_eq!(
        (
            &q["snapshot"]["ready"],
            &q["snapshot"]["in_flight"],
            &q["snapshot"]["delayed"]
        ),
        (&2.into(), &1.into(), &1.into())
    );
    let body = |m: &serde_json::Value| m["message"]["body"].to_string();
    // Processing order: the retried one first (it was pushed back before the fresh one).
    let ready = q["ready"].as_array().unwrap();
    assert_eq!(ready.len(), 2);
    assert_eq!(body(&ready[0]), r#"{"n":1}"#);
    assert_eq!(ready[0]["delivery_count"], 1);
    assert_eq!(
        ready[0]["errors"][0]["message"],
        "gateway timeout after 3012 ms"
    );
    assert_eq!(body(&ready[1]), r#"{"n":3}"#);
    assert!(ready[1]["errors"].as_array().unwrap().is_empty());

    let in_flight = q["in_flight"].as_array().unwrap();
    assert_eq!(in_flight.len(), 1);
    assert_eq!(body(&in_flight[0]), r#"{"n":2}"#);
    assert_eq!(in_flight[0]["delivery_count"], 1);
    let deadline = in_flight[0]["lock_deadline_ms"].as_u64().unwrap();
    assert!(
        (now + 1..=now + 60_000).contains(&deadline),
        "{deadline} vs {now}"
    );

    let scheduled = q["scheduled"].as_array().unwrap();
    assert_eq!(scheduled.len(), 1);
    assert_eq!(body(&scheduled[0]), r#"{"n":4}"#);
    let due = scheduled[0]["due_at_ms"].as_u64().unwrap();
    assert!(
        (now + 3_500_000..=now + 3_600_000).contains(&due),
        "{due} vs {now}"
    );

    let bad = http(addr, "GET", "/api/queue?name=bad%20name", &[], "").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sagas_are_listed_shown_and_deleted() {
    let s = setup().await;
    let prefix = s.redis.namespace().to_owned();
    let store = RedisSagaStore::new(s.transport.client().clone()).prefix(prefix.as_str());
    store
        .create(
            "order",
            "o-17",
            br#"{"paid":true}"#.to_vec().into(),
            Duration::from_secs(600),
        )
        .await
        .unwrap();
    let options = DashboardOptions::default().saga_prefix(prefix.as_str());
    let addr = start_dashboard(&s.transport, options).await;

    let list = http(addr, "GET", "/api/sagas", &[], "").await.json();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(
        (&list[0]["partition"], &list[0]["id"]),
        (&"order".into(), &"o-17".into())
    );
    let shown = http(addr, "GET", "/api/saga?partition=order&id=o-17", &[], "")
        .await
        .json();
    assert_eq!(shown["data"], r#"{"paid":true}"#);
    assert!(shown["stamp"].as_str().is_some_and(|s| !s.is_empty()));
    let ttl = shown["ttl_ms"].as_u64().unwrap();
    assert!((1..=600_000).contains(&ttl), "{ttl}");

    // A key at a saga's name that is not a saga hash is refused, not shown or touched.
    let key = store.key("order", "legacy");
    s.redis.client().cmd(&["SET", &key, "old"]).unwrap();
    let foreign = http(addr, "GET", "/api/saga?partition=order&id=legacy", &[], "").await;
    assert_eq!(foreign.status, 400);
    assert!(foreign.body.contains("not a saga hash"), "{}", foreign.body);

    let csrf = csrf_of(&http(addr, "GET", "/", &[], "").await.body);
    let headers = [
        ("content-type", "application/json"),
        ("x-csrf-token", csrf.as_str()),
    ];
    let body = r#"{"partition":"order","id":"o-17"}"#;
    let deleted = http(addr, "POST", "/api/sagas/delete", &headers, body).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert_eq!(deleted.json()["existed"], true);
    let gone = http(addr, "GET", "/api/saga?partition=order&id=o-17", &[], "")
        .await
        .json();
    assert_eq!(gone["exists"], false);
    assert_eq!(s.int("EXISTS", &store.key("order", "o-17")), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_rate_adds_up_to_the_messages_processed() {
    let s = setup().await;
    // Register the queue (a host starts its consumer), then queue 20 with no host.
    s.failing_host().await.shutdown().await.unwrap();
    let batch: Vec<Payment> = (0..20).map(|n| Payment { n }).collect();
    s.bus.send_batch(&batch).await.unwrap();
    let options = DashboardOptions::default().sample_interval(Duration::from_millis(200));
    let addr = start_dashboard(&s.transport, options).await;
    let overview = || async { http(addr, "GET", "/api/overview", &[], "").await.json() };
    let row = |o: &serde_json::Value| o["queues"][0].clone();
    let sampled = eventually(WAIT, || async {
        row(&overview().await)["history"][0]["ready"] == 20
    })
    .await;
    assert!(
        sampled,
        "the server never sampled the queue: {}",
        overview().await
    );

    let seen = std::sync::Arc::new(common::Seen::default());
    let host = s.succeeding_host(seen.clone()).await;
    let done = eventually(WAIT, || async { seen.processed().len() == 20 }).await;
    assert!(done, "processed {:?}", seen.processed());
    // Once a sample after the last ack exists, the rates over the history integrate to
    // the 20 messages processed.
    let keys = s.transport.keys(&payments());
    let settled = eventually(WAIT, || async { s.int("HLEN", &keys.msgs) == 0 }).await;
    assert!(settled);
    let total = std::sync::Mutex::new(0.0);
    let integrated = eventually(WAIT, || async {
        let history = row(&overview().await)["history"].clone();
        let points = history.as_array().unwrap();
        let sum = points
            .windows(2)
            .map(|w| {
                let dt = w[1]["t"].as_f64().unwrap() - w[0]["t"].as_f64().unwrap();
                w[1]["rate"].as_f64().unwrap() * dt / 1000.0
            })
            .sum::<f64>();
        *total.lock().unwrap() = sum;
        (sum - 20.0).abs() < 0.01 && points.last().unwrap()["ready"] == 0
    })
    .await;
    host.shutdown().await.unwrap();
    assert!(
        integrated,
        "rates add up to {:?}, not 20",
        total.lock().unwrap()
    );
}

#[derive(Debug, serde::Serialize, serde::Deserialize, bus_core::RedisCommand)]
#[bus(queue = "uploads")]
struct Upload {
    blob: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_is_shown_clipped_and_left_whole_in_redis() {
    let s = setup().await;
    let blob = "x".repeat(100_000);
    s.bus.send(&Upload { blob: blob.clone() }).await.unwrap();
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let page = http(addr, "GET", "/api/queue?name=uploads", &[], "").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.len() < 20_000,
        "{} bytes sent for one message",
        page.body.len()
    );
    let shown = page.json()["ready"][0]["message"]["body"].clone();
    let text = shown.as_str().unwrap();
    // `{"blob":"` + the blob + `"}`
    let size = blob.len() + 11;
    assert!(
        text.starts_with(&format!("<{size} bytes, too large to show here")),
        "{text:.80}"
    );
    // The message itself is untouched.
    let keys = s.transport.keys(&Source::queue("uploads").unwrap());
    let stored = s.redis.client().cmd(&["LINDEX", &keys.ready, "0"]).unwrap();
    let stored = String::from_utf8_lossy(stored.as_bytes().unwrap()).into_owned();
    assert!(stored.contains(&blob), "{stored:.80}");
}

/// With the DEFAULT sample interval (10 s), the overview says how long
/// the server has sampled (not the plot's minimum width), and a queue's plot has a line
/// (two points, the last one now) before the second sample is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_overview_has_a_line_and_says_how_long_it_sampled() {
    let s = setup().await;
    s.failing_host().await.shutdown().await.unwrap();
    s.bus.send(&Payment { n: 1 }).await.unwrap();
    let started = std::time::Instant::now();
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let overview = || async { http(addr, "GET", "/api/overview", &[], "").await.json() };
    let seen = std::sync::Mutex::new(serde_json::Value::Null);
    let line = eventually(WAIT, || async {
        let now = overview().await;
        let two = now["queues"][0]["history"]
            .as_array()
            .is_some_and(|points| points.len() >= 2);
        *seen.lock().unwrap() = now;
        two
    })
    .await;
    let elapsed = started.elapsed();
    let last = seen.into_inner().unwrap();
    assert!(line, "no line: {last}");
    assert_eq!(last["sample_interval_ms"], 10_000);
    assert!(
        elapsed < Duration::from_secs(10),
        "the line came after {elapsed:?}, when a second sample could have drawn it"
    );
    let points = last["queues"][0]["history"].as_array().unwrap();
    let now = last["now_ms"].as_u64().unwrap();
    assert_eq!(points.last().unwrap()["t"].as_u64(), Some(now), "{last}");
    assert_eq!(points.last().unwrap()["ready"], 1);
    let since = last["sampling_since_ms"].as_u64().expect("sampling began");
    let sampled_for = Duration::from_millis(now - since);
    assert!(
        sampled_for <= elapsed + Duration::from_secs(1),
        "sampled for {sampled_for:?} after {elapsed:?}"
    );
}

/// The Timing page's data, from reports as hosts write them (two hosts,
/// two types): each type summed over the window, busiest first, with its durations; one
/// type's history and histogram; a request without a type refused.
#[tokio::test]
async fn the_timing_endpoints_sum_each_type_over_the_window() {
    use bus_core::timing::{TimingReport, TypeTiming};
    let s = setup().await;
    let reporter = s.transport.extras().timing_reporter.unwrap();
    let admin = bus_redis::admin::Admin::new(s.transport.clone());
    let now = admin.redis_minute().await.unwrap();
    let timing = |handled: u64, failed: u64, us: u64| {
        let mut t = TypeTiming::default();
        t.handled = handled;
        t.failed = failed;
        t.total_us = (handled + failed) * us;
        t.buckets[TypeTiming::bucket_of(us)] = handled + failed;
        t
    };
    let reports = [
        TimingReport::new(
            "a:1:1:0",
            1,
            now,
            vec![
                ("fast".into(), timing(30, 0, 400)),
                ("slow".into(), timing(2, 1, 700_000)),
            ],
        ),
        TimingReport::new("b:2:1:0", 1, now, vec![("fast".into(), timing(10, 2, 400))]),
        TimingReport::new(
            "a:1:1:0",
            2,
            now - 5,
            vec![("slow".into(), timing(4, 0, 700_000))],
        ),
        // Outside a one-hour window.
        TimingReport::new(
            "a:1:1:0",
            3,
            now - 90,
            vec![("old".into(), timing(9, 0, 100))],
        ),
    ];
    for report in &reports {
        reporter.record(report).await.unwrap();
    }
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;

    let view = http(addr, "GET", "/api/timing?minutes=60", &[], "").await;
    assert_eq!(view.status, 200, "{}", view.body);
    let view = view.json();
    assert_eq!(view["minutes"], 60);
    let types = view["types"].as_array().unwrap();
    let names: Vec<&str> = types
        .iter()
        .map(|t| t["message_type"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fast", "slow"], "{view}");
    assert_eq!(types[0]["handled"], 40);
    assert_eq!(types[0]["failed"], 2);
    assert_eq!(types[0]["mean_ms"], 0.4);
    assert_eq!(types[0]["p95_ms"], 0.5);
    assert_eq!(types[1]["handled"], 6);
    assert_eq!(types[1]["failed"], 1);
    assert_eq!(types[1]["p95_ms"], 1000.0);
    // Two hours back, the old type is in.
    let wide = http(addr, "GET", "/api/timing?minutes=120", &[], "")
        .await
        .json();
    assert_eq!(wide["types"].as_array().unwrap().len(), 3, "{wide}");

    let slow = http(
        addr,
        "GET",
        "/api/timing/type?name=slow&minutes=60",
        &[],
        "",
    )
    .await;
    assert_eq!(slow.status, 200, "{}", slow.body);
    let slow = slow.json();
    assert_eq!(slow["span_minutes"], 1);
    let points = slow["points"].as_array().unwrap();
    assert_eq!(points.len(), 60);
    let handled: u64 = points.iter().map(|p| p["handled"].as_u64().unwrap()).sum();
    assert_eq!(handled, 6);
    let at = |minute: u64| {
        points
            .iter()
            .find(|p| p["t"] == minute * 60_000)
            .map(|p| p["handled"].clone())
    };
    assert_eq!(at(now), Some(2.into()), "{points:?}");
    assert_eq!(at(now - 5), Some(4.into()));
    let buckets = slow["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), bus_core::timing::BUCKETS);
    let full: Vec<_> = buckets.iter().filter(|b| b["count"] != 0).collect();
    assert_eq!(full.len(), 1);
    assert_eq!(full[0]["le_ms"], 1000.0);
    assert_eq!(full[0]["count"], 7);
    // 72 hours in at most 240 points.
    let long = http(
        addr,
        "GET",
        "/api/timing/type?name=slow&minutes=99999",
        &[],
        "",
    )
    .await
    .json();
    assert_eq!(long["minutes"], 4320);
    assert!(
        long["points"].as_array().unwrap().len() <= 240,
        "{}",
        long["points"]
    );
    let missing = http(addr, "GET", "/api/timing/type", &[], "").await;
    assert_eq!(missing.status, 400, "{}", missing.body);
}

/// A scheduled message cancelled from the dashboard, with
/// the page's CSRF token, audited; a second cancel finds nothing; a read-only dashboard
/// refuses it.
#[tokio::test]
async fn a_scheduled_message_is_cancelled_audited_and_refused_read_only() {
    let s = setup().await;
    let keys = s.transport.keys(&payments());
    let id = s
        .bus
        .send_delayed(&Payment { n: 1 }, Duration::from_secs(3600))
        .await
        .unwrap();
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let read_only =
        start_dashboard(&s.transport, DashboardOptions::default().read_only(true)).await;
    let queue = http(addr, "GET", "/api/queue?name=payments", &[], "")
        .await
        .json();
    let scheduled = queue["scheduled"].as_array().unwrap();
    assert_eq!(scheduled.len(), 1, "{queue}");
    assert_eq!(scheduled[0]["message"]["id"], id.to_string());
    let storage_id = scheduled[0]["storage_id"].as_str().unwrap().to_owned();
    let body = serde_json::json!({ "name": "payments", "id": storage_id }).to_string();

    for (dashboard, status) in [(read_only, 403), (addr, 200)] {
        let page = http(dashboard, "GET", "/", &[], "").await;
        let csrf = csrf_of(&page.body);
        let headers = [
            ("content-type", "application/json"),
            ("x-csrf-token", csrf.as_str()),
        ];
        let done = http(dashboard, "POST", "/api/scheduled/cancel", &headers, &body).await;
        assert_eq!(done.status, status, "{}", done.body);
        if status == 403 {
            assert_eq!(s.int("ZCARD", &keys.delayed), 1, "read-only cancelled");
            continue;
        }
        assert_eq!(done.json()["cancelled"], true);
        assert_eq!(s.int("ZCARD", &keys.delayed), 0);
        assert_eq!(s.int("HLEN", &keys.msgs), 0, "the envelope stays");
        let again = http(dashboard, "POST", "/api/scheduled/cancel", &headers, &body).await;
        assert_eq!(again.json()["cancelled"], false);
        let bad = serde_json::json!({ "name": "bad{name}", "id": "1" }).to_string();
        let bad = http(dashboard, "POST", "/api/scheduled/cancel", &headers, &bad).await;
        assert_eq!(bad.status, 400, "{}", bad.body);
    }
    let audit = http(addr, "GET", "/api/audit", &[], "").await.json();
    let entries = audit.as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(entries[0]["action"], "cancel");
    assert_eq!(entries[0]["target"], "payments");
    assert_eq!(entries[0]["detail"], storage_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_page_lists_the_keys_with_the_most_waiting() {
    let s = setup().await;
    let admin = bus_redis::admin::Admin::new(s.transport.clone());
    admin
        .order_per_key(&payments(), Some(bus_core::flow::PerKey::fifo()))
        .await
        .unwrap();
    for (key, n) in [("big", 5), ("mid", 3), ("small", 1)] {
        let batch: Vec<Payment> = (0..n).map(|n| Payment { n }).collect();
        s.bus.send_batch_keyed(&batch, key).await.unwrap();
    }
    // One message of each key in flight (one at a time per key: never more).
    let consumer = s
        .transport
        .consumer(
            &payments(),
            ConsumerOptions::new(Duration::from_secs(60), 5),
        )
        .await
        .unwrap();
    let mut held = Vec::new();
    while held.len() < 3 {
        let taken = tokio::time::timeout(
            WAIT,
            consumer.take(3 - held.len(), &CancellationToken::new()),
        )
        .await
        .expect("each key starts one message")
        .unwrap();
        held.extend(taken);
    }

    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let keys = http(addr, "GET", "/api/queue/keys?name=payments", &[], "").await;
    assert_eq!(keys.status, 200, "{}", keys.body);
    let keys = keys.json();
    assert_eq!(keys["complete"], true);
    let rows: Vec<(String, u64, u64)> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["key"].as_str().unwrap().to_owned(),
                k["waiting"].as_u64().unwrap(),
                k["in_flight"].as_u64().unwrap(),
            )
        })
        .collect();
    // "small" has nothing waiting: no backlog to list.
    assert_eq!(rows, [("big".into(), 4, 1), ("mid".into(), 2, 1)]);

    let q = http(addr, "GET", "/api/queue?name=payments", &[], "")
        .await
        .json();
    let snapshot = &q["snapshot"];
    assert_eq!(
        (
            &snapshot["ready"],
            &snapshot["keyed"],
            &snapshot["in_flight"]
        ),
        (&0.into(), &6.into(), &3.into())
    );
    let overview = http(addr, "GET", "/api/overview", &[], "").await.json();
    assert_eq!(overview["queues"][0]["keyed"], 6, "{overview}");

    // A queue that is not ordered lists no key; a bad name is refused.
    let plain = http(addr, "GET", "/api/queue/keys?name=other", &[], "")
        .await
        .json();
    assert_eq!(plain["keys"], serde_json::json!([]));
    let bad = http(addr, "GET", "/api/queue/keys?name=bad%20name", &[], "").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    consumer.close().await.unwrap();
}
