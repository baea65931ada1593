//! The Search and Edit pages in a real headless Chromium: a
//! search that finds one message among 10,000, a bulk requeue of an error's matches after
//! a dry run, edit-and-retry ending in a message a real host handles, and the audit entry
//! of each. Screenshots go to `target/dashboard-screenshots/`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (scripts/test.sh installs them).

mod common;

use std::sync::Arc;

use bus_core::transport::Source;
use bus_dashboard::DashboardOptions;
use common::browser::{click, js, screenshot, Driver};
use common::{csrf_of, eventually, http, setup, start_dashboard, Payment, Seen, WAIT};
use serde_json::json;

fn app_text(v: serde_json::Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_finds_one_among_10_000_and_requeues_an_errors_matches_after_a_dry_run() {
    let s = setup().await;
    let payments = Source::queue("payments").unwrap();
    let keys = s.transport.keys(&payments);
    // Three dead letters ("card declined for payment n (gateway code 51)"), then 10,000
    // ready messages behind no host.
    let failing = s.failing_host().await;
    for n in 20_001..=20_003 {
        s.bus.send(&Payment { n }).await.unwrap();
    }
    let dead = eventually(WAIT, || async { s.int("LLEN", &keys.dead) == 3 }).await;
    failing.shutdown().await.unwrap();
    assert!(dead, "dead letters: {}", s.int("LLEN", &keys.dead));
    for chunk in (1..=10_000).collect::<Vec<u64>>().chunks(1000) {
        let batch: Vec<Payment> = chunk.iter().map(|&n| Payment { n }).collect();
        s.bus.send_batch(&batch).await.unwrap();
    }
    assert_eq!(s.int("LLEN", &keys.ready), 10_000);

    let addr = start_dashboard(&s.transport, DashboardOptions::default().operator("bob")).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{addr}/#/queue/payments"))
        .await
        .unwrap();
    click(&browser, "a[data-action=\"search\"]").await;
    let form = eventually(WAIT, || async {
        js(
            &browser,
            "return document.getElementById('search-body') !== null;",
        )
        .await
            == json!(true)
    })
    .await;
    assert!(form, "no search form");

    // One among 10,003: the body of payment 7777.
    js(
        &browser,
        "document.getElementById('search-body').value = '\"n\":7777}';",
    )
    .await;
    click(&browser, "#search-go").await;
    let one = eventually(WAIT, || async {
        js(
            &browser,
            "const c = document.getElementById('search-count'); return c ? c.dataset.matched : '';",
        )
        .await
            == json!("1")
    })
    .await;
    assert!(
        one,
        "{}",
        app_text(js(&browser, "return document.getElementById('app').innerText;").await)
    );
    let progress = app_text(
        js(
            &browser,
            "return document.getElementById('search-progress').textContent;",
        )
        .await,
    );
    assert!(
        progress.contains("10,003 of 10,003 scanned (100%)"),
        "{progress}"
    );
    let row = js(&browser, "return [...document.querySelectorAll('#search-results details.msg summary')].map(s => s.textContent);").await;
    assert!(row[0].as_str().unwrap().starts_with("ready"), "{row}");
    click(&browser, "#search-results details.msg summary").await;
    let body = app_text(
        js(
            &browser,
            "return document.querySelector('#search-results details.msg pre').textContent;",
        )
        .await,
    );
    assert!(body.contains("7777"), "{body}");
    screenshot(&browser, "search.png").await;

    // The dead letters of one error, by its text: a dry run counts them, then a requeue.
    js(&browser, "document.getElementById('search-body').value = ''; document.getElementById('search-error').value = 'gateway code 51';").await;
    click(&browser, "#search-go").await;
    let three = eventually(WAIT, || async {
        js(
            &browser,
            "const c = document.getElementById('search-count'); return c ? c.dataset.matched : '';",
        )
        .await
            == json!("3")
    })
    .await;
    assert!(
        three,
        "{}",
        app_text(js(&browser, "return document.getElementById('app').innerText;").await)
    );
    assert_eq!(s.int("LLEN", &keys.dead), 3, "a dry run changed something");
    screenshot(&browser, "search-dry-run.png").await;
    click(&browser, "button[data-action=\"search-requeue\"]").await;
    let asked = app_text(
        js(
            &browser,
            "return document.getElementById('confirm-title').textContent;",
        )
        .await,
    );
    assert_eq!(asked, "Requeue 3 matches?");
    click(&browser, "#confirm-ok").await;
    let requeued = eventually(WAIT, || async {
        s.int("LLEN", &keys.dead) == 0 && s.int("LLEN", &keys.ready) == 10_003
    })
    .await;
    assert!(
        requeued,
        "dead {}, ready {}",
        s.int("LLEN", &keys.dead),
        s.int("LLEN", &keys.ready)
    );
    let done = eventually(WAIT, || async {
        js(
            &browser,
            "return document.getElementById('search-progress').dataset.done || '';",
        )
        .await
            == json!("3")
    })
    .await;
    assert!(
        done,
        "{}",
        app_text(
            js(
                &browser,
                "return document.getElementById('search-progress').textContent;"
            )
            .await
        )
    );

    // The audit entry: who, through what, what, on what, how many, and the search.
    browser
        .goto(&format!("http://{addr}/#/audit"))
        .await
        .unwrap();
    let audited = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('#audit tr[data-audit]')].map(r => [...r.cells].slice(1, 6).map(c => c.textContent));")
            .await
            == json!([["bob", "dashboard from 127.0.0.1", "requeue", "payments", "3"]])
    })
    .await;
    assert!(
        audited,
        "{}",
        app_text(js(&browser, "return document.getElementById('app').innerText;").await)
    );
    let detail = app_text(
        js(
            &browser,
            "return document.querySelector('#audit tr[data-audit]').cells[6].textContent;",
        )
        .await,
    );
    assert!(detail.contains("error \"gateway code 51\""), "{detail}");
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_dead_letter_is_retried_and_handled_by_a_real_host() {
    let s = setup().await;
    let payments = Source::queue("payments").unwrap();
    let keys = s.transport.keys(&payments);
    let failing = s.failing_host().await;
    s.bus.send(&Payment { n: 1 }).await.unwrap();
    let dead = eventually(WAIT, || async { s.int("LLEN", &keys.dead) == 1 }).await;
    failing.shutdown().await.unwrap();
    assert!(dead);

    // Read-only: a bulk act and an edit are refused (403) with nothing changed.
    let read_only =
        start_dashboard(&s.transport, DashboardOptions::default().read_only(true)).await;
    let page = http(read_only, "GET", "/", &[], "").await;
    let csrf = csrf_of(&page.body);
    let headers = [
        ("content-type", "application/json"),
        ("x-csrf-token", csrf.as_str()),
    ];
    let act = json!({ "name": "payments", "error": "declined", "action": "requeue" }).to_string();
    let edit = json!({ "name": "payments", "id": "~1", "headers": {}, "body": "{}" }).to_string();
    for (path, body) in [("/api/search/act", &act), ("/api/dead-letters/edit", &edit)] {
        let response = http(read_only, "POST", path, &headers, body).await;
        assert_eq!(response.status, 403, "{path}: {}", response.body);
    }
    assert_eq!(
        s.int("LLEN", &keys.dead),
        1,
        "a read-only dashboard changed Redis"
    );

    let addr = start_dashboard(&s.transport, DashboardOptions::default().operator("carol")).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{addr}/#/dead/payments"))
        .await
        .unwrap();
    click(&browser, "[data-group] button[data-action=\"open-group\"]").await;
    click(&browser, "[data-letter] a[data-action=\"edit-one\"]").await;
    let opened = eventually(WAIT, || async {
        js(
            &browser,
            "const b = document.getElementById('edit-body'); return b ? b.value : '';",
        )
        .await
        .as_str()
        .is_some_and(|b| b.contains("\"n\": 1"))
    })
    .await;
    assert!(
        opened,
        "{}",
        app_text(js(&browser, "return document.getElementById('app').innerText;").await)
    );
    screenshot(&browser, "edit.png").await;

    // Bad JSON is refused by the server with nothing changed.
    js(
        &browser,
        "document.getElementById('edit-body').value = '{\"n\": 4';",
    )
    .await;
    click(&browser, "button[data-action=\"edit-requeue\"]").await;
    click(&browser, "#confirm-ok").await;
    let refused = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('.toast.bad')].map(t => t.textContent).join(' ');")
            .await
            .as_str()
            .is_some_and(|t| t.contains("not JSON"))
    })
    .await;
    assert!(refused, "no refusal shown");
    assert_eq!(s.int("LLEN", &keys.dead), 1);

    js(&browser, "document.getElementById('edit-body').value = '{\"n\": 42}'; document.getElementById('edit-headers').value = '{\"fixed-by\": \"carol\"}';").await;
    click(&browser, "button[data-action=\"edit-requeue\"]").await;
    click(&browser, "#confirm-ok").await;
    let requeued = eventually(WAIT, || async {
        s.int("LLEN", &keys.dead) == 0 && s.int("LLEN", &keys.ready) == 1
    })
    .await;
    assert!(requeued, "dead {}", s.int("LLEN", &keys.dead));

    // A real host handles the edited message: payment 42, once.
    let seen = Arc::new(Seen::default());
    let host = s.succeeding_host(seen.clone()).await;
    let handled = eventually(WAIT, || async { seen.processed().get(&42) == Some(&1) }).await;
    host.shutdown().await.unwrap();
    assert!(handled, "handled: {:?}", seen.processed());
    assert_eq!(seen.processed().len(), 1, "{:?}", seen.processed());

    // The original stays in the history; the edit is audited.
    let management = bus_management::Management::from_transport(s.transport.clone());
    let history = management.edits(&payments, 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].who, "carol");
    assert_eq!(
        history[0].original.as_ref().unwrap().body.get(),
        r#"{"n":1}"#
    );
    assert!(!history[0].errors.is_empty());
    browser
        .goto(&format!("http://{addr}/#/audit"))
        .await
        .unwrap();
    let audited = eventually(WAIT, || async {
        js(&browser, "return [...document.querySelectorAll('#audit tr[data-audit]')].map(r => [...r.cells].slice(1, 6).map(c => c.textContent));")
            .await
            == json!([["carol", "dashboard from 127.0.0.1", "edit", "payments", "1"]])
    })
    .await;
    assert!(
        audited,
        "{}",
        app_text(js(&browser, "return document.getElementById('app').innerText;").await)
    );
    browser.close().await.unwrap();
}
