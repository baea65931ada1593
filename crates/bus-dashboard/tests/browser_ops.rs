//! The operations pages in a real headless Chromium: a fresh dashboard on a
//! Redis started with `--maxmemory-policy allkeys-lru` warns about it and plots at once;
//! a read-only dashboard refuses a requeue; every change made from the dashboard is in
//! the audit log. Screenshots go to `target/dashboard-screenshots/`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (scripts/test.sh installs them).

mod common;

use std::time::{Duration, Instant};

use bus_core::transport::Source;
use bus_core::{Bus, BusConfig};
use bus_dashboard::DashboardOptions;
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::{RedisServer, TestRedis};
use common::browser::{click, js, screenshot, Driver};
use common::{csrf_of, eventually, http, setup, start_dashboard, Payment, WAIT};
use serde_json::json;

/// With DEFAULT dashboard options (10 s samples): the overview
/// of a Redis that evicts shows a health warning saying what to change; it says how long
/// it has sampled, and its plots have lines before the second sample.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_redis_is_warned_about_and_a_fresh_overview_plots_at_once() {
    let server = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start()
        .unwrap();
    let redis = TestRedis::with_url(server.url()).unwrap();
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    let transport = RedisTransport::connect(&config).await.unwrap();
    let s = common::Setup {
        bus: Bus::new(transport.clone(), BusConfig::default()),
        transport,
        config,
        redis,
    };
    s.failing_host().await.shutdown().await.unwrap();
    for n in 1..=3 {
        s.bus.send(&Payment { n }).await.unwrap();
    }

    // The browser first: the clock of "before the second sample" starts with the server.
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let started = Instant::now();
    browser.goto(&format!("http://{addr}/")).await.unwrap();
    let lines = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('.chart path.series')].filter(p => p.getAttribute('d').includes('L')).length;")
            .await
            .as_u64()
            >= Some(6)
    })
    .await;
    let elapsed = started.elapsed();
    assert!(lines, "no plot lines on the overview");
    assert!(
        elapsed < Duration::from_secs(10),
        "lines only after {elapsed:?}, when a second sample could have drawn them"
    );
    let heading = js(&browser, "return document.querySelector('.charts').previousElementSibling.querySelector('h2').textContent;").await;
    let heading = heading.as_str().unwrap().to_owned();
    // "Since sampling began (3.2 s ago)" (or "(800 ms ago)"): no longer than the server
    // has run.
    let ago = heading
        .strip_prefix("Since sampling began (")
        .and_then(|rest| rest.strip_suffix(" ago)"))
        .unwrap_or_else(|| panic!("heading {heading:?}"));
    let seconds: f64 = match (ago.strip_suffix(" ms"), ago.strip_suffix(" s")) {
        (Some(ms), _) => ms.parse::<f64>().map(|ms| ms / 1000.0),
        (None, Some(s)) => s.parse(),
        _ => panic!("heading {heading:?}"),
    }
    .unwrap_or_else(|_| panic!("heading {heading:?}"));
    assert!(
        seconds <= started.elapsed().as_secs_f64() + 1.0,
        "{heading:?} after {:?}",
        started.elapsed()
    );

    // The health banner: the eviction policy, and what to change.
    let warned = eventually(WAIT, || async {
        js(&browser, "const c = document.querySelector('#health-banner [data-health-check=\"eviction\"]'); return c ? c.textContent : '';")
            .await
            .as_str()
            .is_some_and(|t| t.contains("allkeys-lru") && t.contains("noeviction"))
    })
    .await;
    assert!(
        warned,
        "no eviction warning: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    screenshot(&browser, "overview-health.png").await;
    click(&browser, "#health-banner a[href=\"#/health\"]").await;
    let listed = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('#health tr[data-health-check]')].map(r => r.dataset.healthCheck + ':' + r.querySelector('[data-severity]').dataset.severity);")
            .await
            == json!([
                "eviction:warning",
                "persistence:warning",
                "memory:ok",
                "replication:ok",
                "scripts:ok",
                "protocol:ok"
            ])
    })
    .await;
    assert!(
        listed,
        "health page: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    screenshot(&browser, "health.png").await;
    browser.close().await.unwrap();
}

/// A read-only dashboard shows no requeue or delete and its API refuses
/// them (403, nothing changed); a normal one's requeue, move and delete are each in the
/// audit log (who, what, how many), shown on the Audit page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_refuses_a_requeue_and_each_change_is_in_the_audit_log() {
    let s = setup().await;
    let payments = Source::queue("payments").unwrap();
    let keys = s.transport.keys(&payments);
    let failing = s.failing_host().await;
    for n in 1..=3 {
        s.bus.send(&Payment { n }).await.unwrap();
    }
    let dead = eventually(WAIT, || async { s.int("LLEN", &keys.dead) == 3 }).await;
    failing.shutdown().await.unwrap();
    assert!(dead, "dead letters: {}", s.int("LLEN", &keys.dead));

    let read_only =
        start_dashboard(&s.transport, DashboardOptions::default().read_only(true)).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{read_only}/#/dead/payments"))
        .await
        .unwrap();
    // The group is shown, with no button that changes anything.
    let shown = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelectorAll('[data-group]').length;",
        )
        .await
            == json!(1)
    })
    .await;
    assert!(
        shown,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    let visible = js(&browser, "return [...document.querySelectorAll('[data-action^=\"requeue\"], [data-action^=\"delete\"]')].filter(b => b.offsetParent !== null).length;").await;
    assert_eq!(
        visible,
        json!(0),
        "change buttons visible in read-only mode"
    );
    assert_eq!(
        js(
            &browser,
            "return document.getElementById('read-only') !== null;"
        )
        .await,
        json!(true)
    );
    screenshot(&browser, "read-only.png").await;
    // The page's own request, as a button would send it: refused.
    let refused = browser
        .execute_async(
            "const done = arguments[arguments.length - 1];
             post('/api/dead-letters/requeue', { name: 'payments', all: true, ids: [] })
               .then(() => done('accepted'), (e) => done(e.message));",
            Vec::new(),
        )
        .await
        .unwrap();
    assert!(refused.as_str().unwrap().contains("read-only"), "{refused}");
    let page = http(read_only, "GET", "/", &[], "").await;
    let csrf = csrf_of(&page.body);
    let headers = [
        ("content-type", "application/json"),
        ("x-csrf-token", csrf.as_str()),
    ];
    let body = json!({ "name": "payments", "all": true }).to_string();
    let response = http(
        read_only,
        "POST",
        "/api/dead-letters/requeue",
        &headers,
        &body,
    )
    .await;
    assert_eq!(response.status, 403, "{}", response.body);
    assert_eq!(
        s.int("LLEN", &keys.dead),
        3,
        "a read-only dashboard changed Redis"
    );
    assert_eq!(
        s.int("XLEN", &bus_redis::keys::audit(s.redis.namespace())),
        0
    );

    // A normal dashboard: requeue one, move one to another queue, delete one.
    let addr = start_dashboard(&s.transport, DashboardOptions::default().operator("alice")).await;
    browser
        .goto(&format!("http://{addr}/#/dead/payments"))
        .await
        .unwrap();
    click(&browser, "[data-group] button[data-action=\"open-group\"]").await;
    let opened = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelectorAll('[data-letter]').length;",
        )
        .await
            == json!(3)
    })
    .await;
    assert!(opened, "the group did not open");
    click(
        &browser,
        "[data-letter] button[data-action=\"requeue-one\"]",
    )
    .await;
    click(&browser, "#confirm-ok").await;
    let requeued = eventually(WAIT, || async {
        s.int("LLEN", &keys.dead) == 2 && s.int("LLEN", &keys.ready) == 1
    })
    .await;
    assert!(requeued, "dead {}", s.int("LLEN", &keys.dead));
    click(&browser, "[data-letter] button[data-action=\"delete-one\"]").await;
    click(&browser, "#confirm-ok").await;
    let deleted = eventually(WAIT, || async { s.int("LLEN", &keys.dead) == 1 }).await;
    assert!(deleted, "dead {}", s.int("LLEN", &keys.dead));

    browser
        .goto(&format!("http://{addr}/#/audit"))
        .await
        .unwrap();
    // Newest first: who, through what, what, on what, how many.
    let expected = json!([
        [
            "alice",
            "dashboard from 127.0.0.1",
            "delete",
            "payments",
            "1"
        ],
        [
            "alice",
            "dashboard from 127.0.0.1",
            "requeue",
            "payments",
            "1"
        ],
    ]);
    let audited = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('#audit tr[data-audit]')].map(r => [...r.cells].slice(1, 6).map(c => c.textContent));")
            .await
            == expected
    })
    .await;
    assert!(
        audited,
        "audit page: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    let details = js(&browser, "return [...document.querySelectorAll('#audit tr[data-audit]')].map(r => r.cells[6].textContent);").await;
    assert!(
        details[0].as_str().unwrap().starts_with("dead letters "),
        "{details}"
    );
    assert_eq!(details[1], "to payments");
    assert_eq!(
        s.int("XLEN", &bus_redis::keys::audit(s.redis.namespace())),
        2
    );
    screenshot(&browser, "audit.png").await;
    browser.close().await.unwrap();
}

/// The environment variable that makes [`host_process`] run a host: `<url> <prefix>`.
const HOST_PROCESS: &str = "BUS_DASHBOARD_TEST_HOST_PROCESS";

/// Not a test of its own: the host process of the hosts test below, which runs this test
/// binary again with [`HOST_PROCESS`] set and only this function selected. Without the
/// variable (a normal test run) it returns at once.
#[tokio::test]
async fn host_process() {
    let Ok(spec) = std::env::var(HOST_PROCESS) else {
        return;
    };
    let (url, prefix) = spec.split_once(' ').expect("<url> <prefix>");
    let config = RedisConfig::from_url(url).unwrap().prefix(prefix);
    let transport = RedisTransport::connect(&config).await.unwrap();
    let s = common::Setup {
        bus: Bus::new(transport.clone(), BusConfig::default()),
        transport,
        config,
        redis: TestRedis::with_url(url).unwrap(),
    };
    let _running = s.failing_host().await;
    // Runs until the parent kills it.
    std::future::pending::<()>().await;
}

/// With DEFAULT settings (a heartbeat every 5 s): the Hosts page lists
/// a host in this process and one in another process, with its pid, queues and
/// concurrency; the other is SIGKILLed and shown lost, this one stays running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_are_listed_and_a_killed_one_is_shown_lost() {
    let s = setup().await;
    let here = s.failing_host().await;
    let mut other = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "host_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(
            HOST_PROCESS,
            format!("{} {}", s.redis.url(), s.redis.namespace()),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let other_pid = other.id();

    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{addr}/#/hosts"))
        .await
        .unwrap();
    let states = "return Object.fromEntries([...document.querySelectorAll('#hosts tr[data-host]')].map(r => [r.cells[2].textContent, r.dataset.hostState]));";
    let mine = std::process::id().to_string();
    let theirs = other_pid.to_string();
    let listed = eventually(WAIT, || async {
        js(&browser, states).await == json!({ &mine: "running", &theirs: "running" })
    })
    .await;
    if !listed {
        let _ = other.kill();
    }
    assert!(
        listed,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    let row = js(&browser, &format!("return [...document.querySelectorAll('#hosts tr[data-host]')].find(r => r.cells[2].textContent === '{theirs}').innerText;")).await;
    let row = row.as_str().unwrap().to_owned();
    assert!(row.contains("payments"), "{row}");
    assert!(row.contains(env!("CARGO_PKG_VERSION")), "{row}");

    // SIGKILL: no graceful leave, the heartbeats just stop.
    other.kill().unwrap();
    other.wait().unwrap();
    let lost = eventually(WAIT, || async {
        js(&browser, states).await == json!({ &mine: "running", &theirs: "lost" })
    })
    .await;
    assert!(
        lost,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    let sub = js(
        &browser,
        "return document.querySelector('.page-head .sub').textContent;",
    )
    .await;
    assert!(
        sub.as_str().unwrap().starts_with("1 running, 1 lost"),
        "{sub}"
    );
    screenshot(&browser, "hosts.png").await;
    browser.close().await.unwrap();
    here.shutdown().await.unwrap();
}

/// The Hosts page's Schedules section lists a running host's recurring
/// schedule with its cron, zone, queue and policy, and its last tick once it ticked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_schedule_is_shown_with_its_last_tick() {
    let s = setup().await;
    let host = bus_core::Host::builder()
        .transport(s.transport.clone())
        .schedule(
            bus_core::Recurring::new("* * * * * *", || Payment { n: 0 })
                .name("every-second")
                .time_zone("Europe/Oslo")
                .missed(bus_core::Missed::CatchUpOnce),
        )
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{addr}/#/hosts"))
        .await
        .unwrap();
    let row = "const r = document.querySelector('#schedules tr[data-schedule=\"every-second\"]'); return r ? [...r.cells].map(c => c.textContent) : null;";
    // The last tick shows as a time of day ("–" before the first).
    let ticked = eventually(WAIT, || async {
        js(&browser, row).await[5]
            .as_str()
            .is_some_and(|last| last.contains(':'))
    })
    .await;
    let cells = js(&browser, row).await;
    assert!(
        ticked,
        "{cells} {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    assert_eq!(
        cells.as_array().unwrap()[..5],
        [
            json!("every-second"),
            json!("* * * * * *"),
            json!("Europe/Oslo"),
            json!("payments"),
            json!("catch up once")
        ],
        "{cells}"
    );
    screenshot(&browser, "schedules.png").await;
    browser.close().await.unwrap();
    host.shutdown().await.unwrap();
}

/// A message of its own queue, for the circuit breaker below.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, bus_core::RedisCommand)]
#[bus(queue = "shipments")]
struct Shipment {
    n: u64,
}

/// Always fails (the carrier is down), behind a circuit breaker with its defaults.
struct CarrierDown;

#[async_trait::async_trait]
impl bus_core::CommandProcessor<Shipment> for CarrierDown {
    async fn process(
        &self,
        _: Shipment,
        _: &bus_core::Context,
    ) -> Result<(), bus_core::ProcessError> {
        Err(bus_core::ProcessError::retry("the carrier's API is down"))
    }

    fn settings(&self) -> bus_core::ProcessingSettings {
        bus_core::ProcessingSettings::default()
            .dead_letter_delivery_limit(1_000)
            .retry(bus_core::Backoff::fixed(Duration::from_millis(10)))
            .circuit_breaker(Some(bus_core::CircuitBreaker::default()))
    }
}

/// A queue is paused from its page
/// (its consumers stop, the badge shows, sends still enqueue), then resumed (the messages
/// run); both are in the audit log; a read-only dashboard refuses a pause, and an unknown
/// queue is a 400 that creates nothing. A host's open circuit breaker shows on its
/// queue's page (from its heartbeat, default interval); a fleet-wide one shows with its
/// end, and the page's Close button closes it (audited).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_is_paused_and_resumed_from_its_page_and_a_tripped_breaker_shows_and_closes() {
    let s = setup().await;
    let payments = Source::queue("payments").unwrap();
    let keys = s.transport.keys(&payments);
    let seen = std::sync::Arc::new(common::Seen::default());
    let host = s.succeeding_host(std::sync::Arc::clone(&seen)).await;
    let breaking = bus_core::Host::builder()
        .transport(s.transport.clone())
        .command::<Shipment, _>(CarrierDown)
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let addr = start_dashboard(&s.transport, DashboardOptions::default().operator("bob")).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{addr}/#/queue/payments"))
        .await
        .unwrap();
    let flow = "const f = document.getElementById('flow'); return f ? f.innerText : '';";
    let consuming = eventually(WAIT, || async {
        js(&browser, flow)
            .await
            .as_str()
            .is_some_and(|t| t.contains("consuming") && t.contains("Concurrency limit: none"))
    })
    .await;
    assert!(
        consuming,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    click(&browser, "#pause-queue").await;
    click(&browser, "#confirm-ok").await;
    let paused = eventually(WAIT, || async {
        js(
            &browser,
            "return document.getElementById('paused-badge') !== null;",
        )
        .await
            == json!(true)
    })
    .await;
    assert!(paused, "no paused badge");
    let flow_key = keys.flow.clone();
    assert_eq!(
        s.redis
            .client()
            .cmd(&["HGET", &flow_key, "paused"])
            .unwrap()
            .as_str(),
        Some("1")
    );
    // Sends still enqueue; the paused consumer takes none of them.
    for n in 1..=3 {
        s.bus.send(&Payment { n }).await.unwrap();
    }
    let waiting = eventually(WAIT, || async { s.int("LLEN", &keys.ready) == 3 }).await;
    assert!(
        waiting && seen.processed().is_empty(),
        "{:?}",
        seen.processed()
    );
    let shown = eventually(WAIT, || async {
        js(
            &browser,
            "const c = document.querySelector('[data-tab=\"ready\"] .count'); return c ? c.textContent : '';",
        )
        .await
            == json!("3")
    })
    .await;
    assert!(shown, "the page did not show the 3 waiting messages");
    assert!(seen.processed().is_empty(), "{:?}", seen.processed());
    screenshot(&browser, "flow-paused.png").await;

    click(&browser, "#resume-queue").await;
    click(&browser, "#confirm-ok").await;
    let resumed = eventually(WAIT, || async {
        seen.processed().len() == 3
            && js(
                &browser,
                "return document.getElementById('paused-badge') === null && document.getElementById('pause-queue') !== null;",
            )
            .await
                == json!(true)
    })
    .await;
    assert!(resumed, "processed after resume: {:?}", seen.processed());
    assert_eq!(s.int("EXISTS", &flow_key), 0, "resume left the flow hash");

    // Refused without a change: read-only, and a queue that does not exist.
    let page = http(addr, "GET", "/", &[], "").await;
    let csrf = csrf_of(&page.body);
    let headers = [
        ("content-type", "application/json"),
        ("x-csrf-token", csrf.as_str()),
    ];
    let unknown = json!({ "name": "paymnets" }).to_string();
    let response = http(addr, "POST", "/api/queue/pause", &headers, &unknown).await;
    assert_eq!(response.status, 400, "{}", response.body);
    assert!(response.body.contains("paymnets"), "{}", response.body);
    let read_only =
        start_dashboard(&s.transport, DashboardOptions::default().read_only(true)).await;
    let page = http(read_only, "GET", "/", &[], "").await;
    let csrf = csrf_of(&page.body);
    let headers = [
        ("content-type", "application/json"),
        ("x-csrf-token", csrf.as_str()),
    ];
    let body = json!({ "name": "payments" }).to_string();
    let response = http(read_only, "POST", "/api/queue/pause", &headers, &body).await;
    assert_eq!(response.status, 403, "{}", response.body);
    let flow_keys = s
        .redis
        .client()
        .cmd(&["KEYS", &format!("{}*:flow", s.redis.namespace())])
        .unwrap();
    assert_eq!(
        flow_keys.as_array().map(<[_]>::len),
        Some(0),
        "{flow_keys:?}"
    );

    // Both changes in the audit log, newest first.
    browser
        .goto(&format!("http://{addr}/#/audit"))
        .await
        .unwrap();
    let expected = json!([
        ["bob", "dashboard from 127.0.0.1", "resume", "payments", "1"],
        ["bob", "dashboard from 127.0.0.1", "pause", "payments", "1"],
    ]);
    let audited = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('#audit tr[data-audit]')].map(r => [...r.cells].slice(1, 6).map(c => c.textContent));")
            .await
            == expected
    })
    .await;
    assert!(
        audited,
        "audit page: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );

    // The breaker: 20 failures open it; the host's next heartbeat says so.
    for n in 0..20 {
        s.bus.send(&Shipment { n }).await.unwrap();
    }
    browser
        .goto(&format!("http://{addr}/#/queue/shipments"))
        .await
        .unwrap();
    let open = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelectorAll('#flow .badge-breaker-open').length;",
        )
        .await
            == json!(1)
    })
    .await;
    assert!(open, "{}", js(&browser, flow).await);
    screenshot(&browser, "flow-breaker.png").await;
    // The Hosts page shows it beside the queue too.
    browser
        .goto(&format!("http://{addr}/#/hosts"))
        .await
        .unwrap();
    let listed = eventually(WAIT, || async {
        js(
            &browser,
            "const b = document.querySelector('#hosts [data-breaker=\"shipments\"]'); return b ? b.textContent : '';",
        )
        .await
        .as_str()
        .is_some_and(|t| t.starts_with("breaker "))
    })
    .await;
    assert!(
        listed,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    // A fleet-scoped trip (stored with the queue, as a host of that scope stores it) shows
    // on the queue's flow line at once, with its end.
    let source = bus_core::transport::Source::queue("shipments").unwrap();
    let options = bus_core::transport::ConsumerOptions::new(Duration::from_secs(60), 5);
    let consumer = bus_core::Transport::consumer(&s.transport, &source, options)
        .await
        .unwrap();
    consumer
        .extras()
        .fleet_breaker
        .expect("a fleet breaker")
        .trip(Duration::from_secs(600))
        .await
        .unwrap();
    browser
        .goto(&format!("http://{addr}/#/queue/shipments"))
        .await
        .unwrap();
    let fleet = eventually(WAIT, || async {
        js(
            &browser,
            "const b = document.querySelector('#flow [data-fleet-breaker]'); return b ? b.textContent : '';",
        )
        .await
        .as_str()
        .is_some_and(|t| t.starts_with("open on every host until "))
    })
    .await;
    assert!(fleet, "{}", js(&browser, flow).await);
    // Closed by hand from the page: gone from Redis and from the line, and audited.
    click(&browser, "#close-breaker").await;
    click(&browser, "#confirm-ok").await;
    let closed = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelector('#flow [data-fleet-breaker]') === null && document.getElementById('flow') !== null;",
        )
        .await
            == json!(true)
    })
    .await;
    assert!(closed, "{}", js(&browser, flow).await);
    let flow_key = s.transport.keys(&source).flow;
    assert_eq!(
        s.redis
            .client()
            .cmd(&["HGET", &flow_key, "breaker_until"])
            .unwrap()
            .as_str(),
        None
    );
    let audit = bus_redis::admin::Admin::new(s.transport.clone())
        .audit_log(1)
        .await
        .unwrap();
    assert_eq!(audit[0].action, "close-breaker", "{audit:?}");
    consumer.close().await.unwrap();
    browser.close().await.unwrap();
    breaking.shutdown().await.unwrap();
    host.shutdown().await.unwrap();
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, bus_core::RedisCommand)]
#[bus(queue = "refunds")]
struct Refund {
    n: u64,
}

/// Takes 20 ms per refund.
struct SlowRefunds;

#[async_trait::async_trait]
impl bus_core::CommandProcessor<Refund> for SlowRefunds {
    async fn process(
        &self,
        _: Refund,
        _: &bus_core::Context,
    ) -> Result<(), bus_core::ProcessError> {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
}

/// With DEFAULT settings (timing flushed every 10 s): a host
/// handles two types and the Timing page lists both with their counts, then one type's
/// history and histogram; a scheduled message is cancelled from its queue's page (and
/// audited); a message that expired before it was handled is counted under reason
/// `expired` on the dead-letter page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timing_page_shows_each_type_and_scheduled_and_expired_messages_are_visible() {
    let s = setup().await;
    let payments = Source::queue("payments").unwrap();
    let keys = s.transport.keys(&payments);
    // Expired before any host runs: dead-lettered `expired` when taken.
    s.bus
        .send_with(
            &Payment { n: 99 },
            &bus_core::SendOptions::new().expires_in(Duration::from_millis(1)),
        )
        .await
        .unwrap();
    let scheduled = s
        .bus
        .send_delayed(&Payment { n: 7 }, Duration::from_secs(3600))
        .await
        .unwrap();
    let seen = std::sync::Arc::new(common::Seen::default());
    let host = bus_core::Host::builder()
        .transport(s.transport.clone())
        .command::<Payment, _>(std::sync::Arc::clone(&seen))
        .command::<Refund, _>(SlowRefunds)
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    for n in 0..10 {
        s.bus.send(&Payment { n }).await.unwrap();
    }
    for n in 0..4 {
        s.bus.send(&Refund { n }).await.unwrap();
    }

    let addr = start_dashboard(&s.transport, DashboardOptions::default().operator("bob")).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{addr}/#/timing"))
        .await
        .unwrap();
    let rows = "return Object.fromEntries([...document.querySelectorAll('#timing tr[data-timing-type]')].map(r => [r.dataset.timingType, r.cells[1].textContent]));";
    let listed = eventually(WAIT, || async {
        js(&browser, rows).await == json!({ "payments": "10", "refunds": "4" })
    })
    .await;
    assert!(
        listed,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    screenshot(&browser, "timing.png").await;
    click(&browser, "#timing a[data-timing-link=\"refunds\"]").await;
    let history = eventually(WAIT, || async {
        js(&browser, "const t = document.getElementById('timing-type'); const runs = [...document.querySelectorAll('#timing-histogram .bucket')].reduce((n, b) => n + Number(b.dataset.count), 0); return t && t.textContent === 'refunds' && runs === 4 && document.querySelector('[data-tile=\"c-rate\"]').textContent === '4';")
            .await
            == json!(true)
    })
    .await;
    assert!(
        history,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    assert_eq!(
        js(
            &browser,
            "return document.querySelectorAll('svg.chart path.series').length;"
        )
        .await,
        json!(4),
        "two plots of two series each"
    );
    screenshot(&browser, "timing-type.png").await;

    // The scheduled message, with its due time and a cancel button.
    browser
        .goto(&format!("http://{addr}/#/queue/payments"))
        .await
        .unwrap();
    click(&browser, "button[data-tab=\"scheduled\"]").await;
    let id = scheduled.to_string();
    let shown = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('.scheduled-list details.msg')].map(d => d.querySelector('summary').innerText);")
            .await
            .as_array()
            .is_some_and(|rows| rows.len() == 1 && rows[0].as_str().unwrap().contains(&id))
    })
    .await;
    assert!(
        shown,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    screenshot(&browser, "queue-scheduled.png").await;
    click(&browser, "button[data-action=\"cancel-scheduled\"]").await;
    click(&browser, "#confirm-ok").await;
    let cancelled = eventually(WAIT, || async { s.int("ZCARD", &keys.delayed) == 0 }).await;
    assert!(cancelled, "delayed {}", s.int("ZCARD", &keys.delayed));
    // The audit record is written after the cancel itself: wait for it, bounded.
    let audited = eventually(WAIT, || async {
        http(addr, "GET", "/api/audit", &[], "").await.json()[0]["action"] == "cancel"
    })
    .await;
    let audit = http(addr, "GET", "/api/audit", &[], "").await.json();
    assert!(audited, "{audit}");
    assert_eq!(audit[0]["action"], "cancel", "{audit}");
    assert_eq!(audit[0]["who"], "bob");

    // The expired message: a dead letter counted under its reason.
    browser
        .goto(&format!("http://{addr}/#/dead/payments"))
        .await
        .unwrap();
    let counted = eventually(WAIT, || async {
        js(&browser, "const r = document.querySelector('[data-reason=\"expired\"]'); return r ? r.dataset.reasonCount : null;")
            .await
            == json!("1")
    })
    .await;
    assert!(
        counted,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    assert_eq!(seen.processed().len(), 10, "the expired one never ran");
    screenshot(&browser, "dead-letters-expired.png").await;
    browser.close().await.unwrap();
    host.shutdown().await.unwrap();
}
