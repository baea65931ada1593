//! The dashboard in a real headless Chromium, driven over WebDriver (chromedriver): the
//! overview shows what Redis holds; a dead-letter group is opened and requeued; the
//! dead count drops and a running host processes the messages. Screenshots of the
//! overview and the dead-letter page go to `target/dashboard-screenshots/`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (scripts/test.sh installs them).

mod common;

use bus_core::transport::Source;
use bus_core::SagaStore;
use bus_dashboard::DashboardOptions;
use bus_redis_saga::RedisSagaStore;
use common::browser::{click, js, row, screenshot, Driver};
use common::{eventually, setup, start_dashboard, Payment, Seen, WAIT};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Waits until the server's sampler has recorded `value` as the newest `field` of the
/// payments queue (what the plots draw).
async fn sampled(addr: SocketAddr, field: &str, value: u64) -> bool {
    eventually(WAIT, || async {
        let overview = common::http(addr, "GET", "/api/overview", &[], "")
            .await
            .json();
        overview["queues"]
            .as_array()
            .and_then(|queues| queues.iter().find(|q| q["name"] == "payments"))
            .and_then(|q| q["history"].as_array()?.last().cloned())
            .is_some_and(|point| point[field] == value)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_shows_redis_and_a_dead_letter_group_is_requeued_and_processed() {
    let s = setup().await;
    let payments = Source::queue("payments").unwrap();
    let keys = s.transport.keys(&payments);

    // The dashboard samples from the start, so its plots show the seeding.
    let namespace = s.redis.namespace().to_owned();
    let options = DashboardOptions::default()
        .sample_interval(Duration::from_millis(250))
        .refresh_interval(Duration::from_millis(300))
        .saga_prefix(namespace.as_str());
    let addr = start_dashboard(&s.transport, options).await;

    // Seed: 4 dead letters from a host whose handler refuses payments 1-4, then 3 ready
    // and 1 scheduled with no host running.
    let failing = s.failing_host().await;
    for n in 1..=4 {
        s.bus.send(&Payment { n }).await.unwrap();
        let dead = eventually(WAIT, || async { s.int("LLEN", &keys.dead) == n as i64 }).await;
        assert!(dead, "dead letters: {}", s.int("LLEN", &keys.dead));
        // One step per sample, so the plot shows the seeding.
        assert!(
            sampled(addr, "dead", n).await,
            "the server never sampled {n} dead"
        );
    }
    failing.shutdown().await.unwrap();
    for n in 10..=12 {
        s.bus.send(&Payment { n }).await.unwrap();
        assert!(
            sampled(addr, "ready", n - 9).await,
            "the server never sampled {} ready",
            n - 9
        );
    }
    s.bus
        .send_delayed(&Payment { n: 20 }, Duration::from_secs(3600))
        .await
        .unwrap();

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser.goto(&format!("http://{addr}/")).await.unwrap();

    // The overview's row shows what Redis holds: name, ready, in flight, expired,
    // delayed, dead.
    let expected = || {
        vec![
            s.int("LLEN", &keys.ready).to_string(),
            s.int("ZCARD", &keys.inflight).to_string(),
            "0".to_owned(),
            s.int("ZCARD", &keys.delayed).to_string(),
            s.int("LLEN", &keys.dead).to_string(),
        ]
    };
    assert_eq!(expected(), ["3", "0", "0", "1", "4"]);
    let shown = eventually(WAIT, || async {
        let cells = row(&browser, "payments").await;
        cells.len() == 9 && cells[1..6] == expected()[..]
    })
    .await;
    assert!(shown, "overview row {:?}", row(&browser, "payments").await);
    let tiles: Vec<String> = serde_json::from_value(
        js(
            &browser,
            "return [...document.querySelectorAll('[data-tile]')].map(t => t.textContent);",
        )
        .await,
    )
    .unwrap();
    assert_eq!(tiles[..5], ["3", "0", "0", "1", "4"]);
    // Let the server's sampler draw a few points before the picture.
    let plotted = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelectorAll('.chart path.series').length;",
        )
        .await
        .as_u64()
            >= Some(6)
    })
    .await;
    assert!(plotted, "no plot lines on the overview");
    let overview_png = screenshot(&browser, "overview.png").await;

    // The queue page: the next ready messages in processing order, then the scheduled one.
    browser
        .goto(&format!("http://{addr}/#/queue/payments"))
        .await
        .unwrap();
    let listed = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelectorAll('details.msg').length;",
        )
        .await
            == json!(3)
    })
    .await;
    assert!(
        listed,
        "ready messages shown: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    click(&browser, "details.msg summary").await;
    let body = js(
        &browser,
        "return document.querySelector('details.msg[open] pre').textContent;",
    )
    .await;
    assert!(
        body.as_str().unwrap().contains("\"n\": 10"),
        "first ready body {body}"
    );
    screenshot(&browser, "queue.png").await;
    click(&browser, "button[data-tab=\"scheduled\"]").await;
    let scheduled = eventually(WAIT, || async {
        js(&browser, "const m = document.querySelectorAll('details.msg'); return m.length === 1 && m[0].textContent.includes('(in 5');").await == json!(true)
    })
    .await;
    assert!(
        scheduled,
        "scheduled shown: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    browser.goto(&format!("http://{addr}/#/")).await.unwrap();

    // The dead-letter page: one group (same reason, numbers masked), opened.
    click(&browser, "a[data-dead-link=\"payments\"]").await;
    let grouped = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('[data-group]')].map(g => g.querySelector('[data-group-count]').textContent);").await
            == json!(["4"])
    })
    .await;
    assert!(
        grouped,
        "groups shown: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    click(&browser, "[data-group] button[data-action=\"open-group\"]").await;
    let opened = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelectorAll('[data-letter]').length;",
        )
        .await
            == json!(4)
    })
    .await;
    assert!(opened, "the group did not open");
    // One letter's details: its error history is there.
    click(&browser, "[data-letter] summary").await;
    let history = js(
        &browser,
        "return document.querySelector('[data-letter][open] .errors').innerText;",
    )
    .await;
    assert!(
        history
            .as_str()
            .unwrap()
            .contains("card declined for payment"),
        "{history}"
    );
    let dead_png = screenshot(&browser, "dead-letters.png").await;

    // A host that succeeds runs now; requeue the group, confirming in the dialog.
    let seen = Arc::new(Seen::default());
    let host = s.succeeding_host(Arc::clone(&seen)).await;
    click(
        &browser,
        "[data-group] button[data-action=\"requeue-group\"]",
    )
    .await;
    let asked = eventually(WAIT, || async {
        js(&browser, "return document.getElementById('confirm').open;").await == json!(true)
    })
    .await;
    assert!(asked, "no confirmation asked");
    assert_eq!(s.int("LLEN", &keys.dead), 4, "requeued before confirmation");
    screenshot(&browser, "confirm.png").await;
    click(&browser, "#confirm-ok").await;

    let drained = eventually(WAIT, || async {
        let text = js(
            &browser,
            "const t = document.getElementById('dead-total'); return t ? t.textContent : '';",
        )
        .await;
        text.as_str().unwrap_or("").starts_with("0 dead letters") && s.int("LLEN", &keys.dead) == 0
    })
    .await;
    assert!(drained, "dead letters left: {}", s.int("LLEN", &keys.dead));
    let processed = eventually(WAIT, || async {
        let seen = seen.processed();
        (1..=4).all(|n| seen.contains_key(&n)) && (10..=12).all(|n| seen.contains_key(&n))
    })
    .await;
    assert!(processed, "processed: {:?}", seen.processed());

    // Back on the overview: no dead letters, nothing ready.
    browser.goto(&format!("http://{addr}/#/")).await.unwrap();
    let clean = eventually(WAIT, || async {
        let cells = row(&browser, "payments").await;
        cells.len() == 9 && cells[1] == "0" && cells[5] == "0"
    })
    .await;
    assert!(clean, "overview row {:?}", row(&browser, "payments").await);
    host.shutdown().await.unwrap();

    // Sagas: listed, shown with their state, deleted after confirmation.
    let store = RedisSagaStore::new(s.transport.client().clone()).prefix(namespace.as_str());
    store
        .create(
            "checkout",
            "c-1001",
            br#"{"step":"awaiting-payment","items":3}"#.to_vec().into(),
            Duration::from_secs(3600),
        )
        .await
        .unwrap();
    browser
        .goto(&format!("http://{addr}/#/sagas"))
        .await
        .unwrap();
    let listed = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelectorAll('tr[data-saga]').length;",
        )
        .await
            == json!(1)
    })
    .await;
    assert!(
        listed,
        "sagas listed: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    screenshot(&browser, "sagas.png").await;
    click(&browser, "tr[data-saga] a").await;
    let state = eventually(WAIT, || async {
        js(
            &browser,
            "const p = document.querySelector('pre'); return p ? p.textContent : '';",
        )
        .await
        .as_str()
        .is_some_and(|t| t.contains("awaiting-payment"))
    })
    .await;
    assert!(
        state,
        "saga page: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    screenshot(&browser, "saga.png").await;
    click(&browser, "button[data-action=\"delete-saga\"]").await;
    click(&browser, "#confirm-ok").await;
    let gone = eventually(WAIT, || async {
        s.int("EXISTS", &store.key("checkout", "c-1001")) == 0
    })
    .await;
    assert!(gone, "the saga was not deleted");
    browser.close().await.unwrap();
    assert!(overview_png.exists() && dead_png.exists());
}

/// BabelQueue queues of both layouts, written by the crate's own client (a dead letter by
/// its consumer), appear on the overview and in `/metrics` beside a native queue; the
/// BabelQueue dead letter is requeued from the dashboard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babelqueue_queues_show_beside_native_ones_and_a_dead_letter_is_requeued() {
    use bus_babelqueue::{BabelQueue, DeadLetterBlock, Headers, Layout, Options, Reason};
    use bus_management::{Fleet, Management};

    let s = setup().await;
    let payments = Source::queue("payments").unwrap();
    let keys = s.transport.keys(&payments);
    for n in 1..=2 {
        s.bus.send(&Payment { n }).await.unwrap();
    }
    // BabelQueue keys carry no namespace of ours: names of the test's own.
    let ns = s.redis.namespace().to_owned();
    let (legacy, laravel) = (format!("{ns}-orders"), format!("{ns}-jobs"));
    let urn = "urn:babel:orders:created";
    let bq = BabelQueue::with_client(s.transport.client().clone(), Options::legacy());
    for order in 1..=2 {
        bq.publish(&legacy, urn, &json!({ "order": order }), &Headers::new())
            .await
            .unwrap();
    }
    let consumer = bq.consumer(&legacy).await.unwrap();
    let taken = consumer.reserve(1).await.unwrap();
    let block = DeadLetterBlock::new(
        Reason::Failed,
        &legacy,
        i64::from(taken[0].delivery_count()),
        Some("card declined for order 1".into()),
        Some("RuntimeError".into()),
    );
    assert!(consumer.dead_letter(&taken[0], &block).await.unwrap());
    let lq = BabelQueue::with_client(s.transport.client().clone(), Options::laravel());
    for job in 1..=3 {
        lq.publish(&laravel, urn, &json!({ "job": job }), &Headers::new())
            .await
            .unwrap();
    }

    let admin = bus_babelqueue::Admin::new(s.transport.client().clone());
    let fleet = Fleet::new(Management::from_transport(s.transport.clone()))
        .with(Arc::new(admin.layout(Layout::Legacy)))
        .with(Arc::new(admin.layout(Layout::laravel())));
    let options = DashboardOptions::default()
        .sample_interval(Duration::from_millis(250))
        .refresh_interval(Duration::from_millis(300));
    let addr = common::start_fleet_dashboard(fleet, options).await;
    let (babel_q, laravel_q) = (format!("babel:{legacy}"), format!("laravel:{laravel}"));

    // `/metrics` of the same server: the BabelQueue queues beside the native one.
    let metrics = common::http(addr, "GET", "/metrics", &[], "").await;
    assert_eq!(metrics.status, 200, "{}", metrics.body);
    for series in [
        "bus_queue_ready_messages{messaging_system=\"bus\",messaging_destination_name=\"payments\"} 2".to_owned(),
        format!("bus_queue_ready_messages{{messaging_system=\"babelqueue\",messaging_destination_name=\"{legacy}\",queue_kind=\"babel\"}} 1"),
        format!("bus_queue_dead_letter_messages{{messaging_system=\"babelqueue\",messaging_destination_name=\"{legacy}\",queue_kind=\"babel\"}} 1"),
        format!("bus_queue_ready_messages{{messaging_system=\"babelqueue\",messaging_destination_name=\"{laravel}\",queue_kind=\"laravel\"}} 3"),
    ] {
        assert!(metrics.body.contains(&series), "no {series} in {}", metrics.body);
    }

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser.goto(&format!("http://{addr}/")).await.unwrap();
    // Overview rows: name, ready, in flight, expired, delayed, dead (as Redis holds them).
    let shown = eventually(WAIT, || async {
        let native = row(&browser, "payments").await;
        let babel = row(&browser, &babel_q).await;
        let lara = row(&browser, &laravel_q).await;
        native.len() == 9
            && native[1..6] == ["2", "0", "0", "0", "0"]
            && babel.len() == 9
            && babel[1..6] == ["1", "0", "0", "0", "1"]
            && lara.len() == 9
            && lara[1] == "3"
    })
    .await;
    assert!(
        shown,
        "overview rows {:?} {:?} {:?}",
        row(&browser, "payments").await,
        row(&browser, &babel_q).await,
        row(&browser, &laravel_q).await
    );
    let kind = js(
        &browser,
        &format!("return document.querySelector('tr[data-queue=\"{babel_q}\"] [data-kind]').textContent;"),
    )
    .await;
    assert_eq!(kind, json!("BabelQueue"));
    screenshot(&browser, "babelqueue-overview.png").await;

    // Its queue page: the next message, typed by its URN.
    browser
        .goto(&format!(
            "http://{addr}/#/queue/{}",
            babel_q.replace(':', "%3A")
        ))
        .await
        .unwrap();
    let listed = eventually(WAIT, || async {
        js(&browser, "const m = document.querySelectorAll('details.msg'); return m.length === 1 && m[0].textContent.includes('urn:babel:orders:created');").await
            == json!(true)
    })
    .await;
    assert!(
        listed,
        "queue page: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );

    // Its dead letter: grouped with its error, requeued after confirming.
    browser.goto(&format!("http://{addr}/#/")).await.unwrap();
    click(&browser, &format!("a[data-dead-link=\"{babel_q}\"]")).await;
    let grouped = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('[data-group]')].map(g => g.querySelector('.group-error').textContent);").await
            == json!(["RuntimeError: card declined for order 1"])
    })
    .await;
    assert!(
        grouped,
        "groups shown: {}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    screenshot(&browser, "babelqueue-dead-letters.png").await;
    click(
        &browser,
        "[data-group] button[data-action=\"requeue-group\"]",
    )
    .await;
    let asked = eventually(WAIT, || async {
        js(&browser, "return document.getElementById('confirm').open;").await == json!(true)
    })
    .await;
    assert!(asked, "no confirmation asked");
    assert_eq!(
        s.int("LLEN", &format!("{legacy}.dlq")),
        1,
        "requeued before confirmation"
    );
    click(&browser, "#confirm-ok").await;
    let requeued = eventually(WAIT, || async {
        let text = js(
            &browser,
            "const t = document.getElementById('dead-total'); return t ? t.textContent : '';",
        )
        .await;
        text.as_str().unwrap_or("").starts_with("0 dead letters")
            && s.int("LLEN", &format!("{legacy}.dlq")) == 0
            && s.int("LLEN", &legacy) == 2
    })
    .await;
    assert!(
        requeued,
        "dead {} ready {}",
        s.int("LLEN", &format!("{legacy}.dlq")),
        s.int("LLEN", &legacy)
    );
    // Back on its queue, with attempts reset as BabelQueue's redrive does.
    let reply = s.redis.client().cmd(&["LINDEX", &legacy, "-1"]).unwrap();
    let back: Value = serde_json::from_slice(reply.as_bytes().unwrap()).unwrap();
    assert_eq!(
        (back["data"]["order"].as_u64(), back["attempts"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(back.get("dead_letter").is_none(), "{back}");
    assert_eq!(
        s.int("LLEN", &keys.ready),
        2,
        "the native queue is untouched"
    );
    browser.close().await.unwrap();
}

/// A message with an attachment: its view names it (name, type, size) with a download
/// link, and the link serves the Redis provider's bytes as a download.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_view_shows_its_attachment_with_a_download_link() {
    let s = setup().await;
    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let provider = bus_attachments::RedisProvider::new(
        s.transport.client().clone(),
        s.transport.config().key_prefix(),
    );
    // Text, so that the test's HTTP reader (text) compares it byte for byte.
    let text: String = "%PDF-1.7 invoice 42\n".repeat(15_000);
    let body = futures::stream::iter([Ok(bytes::Bytes::from(text.clone()))]);
    bus_attachments::send_with_attachment(
        &s.bus,
        &provider,
        &Payment { n: 1 },
        bus_attachments::AttachmentMeta::new("invoice 42.pdf", "application/pdf"),
        Box::pin(body),
        &bus_core::SendOptions::new(),
    )
    .await
    .unwrap();

    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{addr}/#/queue/payments"))
        .await
        .unwrap();
    let listed = eventually(WAIT, || async {
        js(
            &browser,
            "return document.querySelectorAll('details.msg').length;",
        )
        .await
            == json!(1)
    })
    .await;
    assert!(
        listed,
        "{}",
        js(&browser, "return document.getElementById('app').innerText;").await
    );
    click(&browser, "details.msg summary").await;
    let line = js(
        &browser,
        "const a = document.querySelector('details.msg[open] a[data-attachment-download]'); \
         return a && [a.parentElement.textContent, a.getAttribute('href'), a.getAttribute('download')];",
    )
    .await;
    let line: Vec<String> =
        serde_json::from_value(line.clone()).unwrap_or_else(|_| panic!("{line}"));
    assert_eq!(
        line[0],
        "invoice 42.pdf (application/pdf, 293.0 KiB) download"
    );
    assert_eq!(line[2], "invoice 42.pdf");
    screenshot(&browser, "attachment.png").await;
    let download = common::http(addr, "GET", &line[1], &[], "").await;
    assert_eq!(download.status, 200);
    let header = |name: &str| {
        download
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        header("content-type").as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(
        header("content-disposition").as_deref(),
        Some("attachment; filename=\"invoice 42.pdf\"")
    );
    assert!(
        download.body == text,
        "{} bytes downloaded",
        download.body.len()
    );
    // A deleted (or unknown) attachment: a clear 404.
    let missing = common::http(
        addr,
        "GET",
        "/api/attachment?scope=payments&id=nope",
        &[],
        "",
    )
    .await;
    assert_eq!(missing.status, 404);
}
