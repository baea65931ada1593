//! The Workflows page in a real headless Chromium: an open batch's progress and pending
//! callbacks, then the same batch done with its dead member; a run parked on a signal.

mod common;

use std::sync::Arc;

use bus_conformance::workflows::{self, Done, Durable, Item, Log};
use bus_dashboard::DashboardOptions;
use bus_workflows::{RedisWorkflowStore, Workflows};
use common::browser::{click, js, screenshot, Driver};
use common::{eventually, setup, start_dashboard, WAIT};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_their_dead_members_callbacks_and_parked_runs_are_shown() {
    let s = setup().await;
    let workflows = Workflows::new(RedisWorkflowStore::for_transport(&s.transport));
    let batch = workflows
        .batch(&s.bus)
        .on_success(&Done { what: "ok".into() })
        .unwrap()
        .on_complete(&Done {
            what: "done".into(),
        })
        .unwrap()
        .open()
        .await
        .unwrap();
    let items: Vec<Item> = (0..4)
        .map(|n| Item {
            n,
            die: n == 2,
            fail: false,
        })
        .collect();
    batch.send_all(&items).await.unwrap();
    batch.close().await.unwrap();
    let id = batch.id().to_string();

    let addr = start_dashboard(&s.transport, DashboardOptions::default()).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser
        .goto(&format!("http://{addr}/#/workflows"))
        .await
        .unwrap();
    let open_row = format!(
        "const r = document.querySelector('#open-batches tr[data-batch=\"{id}\"]'); return r ? [...r.cells].map(c => c.textContent.trim()) : [];"
    );
    let listed = eventually(WAIT, || async {
        let cells = js(&browser, &open_row).await;
        cells[4] == "4"
            && cells[5] == "4"
            && cells[8]
                .as_str()
                .is_some_and(|c| c.contains("success · pending"))
    })
    .await;
    assert!(listed, "{}", js(&browser, &open_row).await);

    // Hosts process it: the batch is done, with one dead member and its complete callback.
    let log = Log::default();
    let host = workflows::start(Arc::new(s.transport.clone()), &workflows, &log).await;
    s.bus
        .send(&Durable {
            name: "w".into(),
            ms: 60_000,
            signal: Some("sig-paid".into()),
        })
        .await
        .unwrap();
    let parked = "const c = document.querySelector('#parked td[data-waits]'); return c ? c.textContent : '';";
    let shown = eventually(WAIT, || async {
        js(&browser, parked).await == json!("signal sig-paid")
    })
    .await;
    assert!(shown, "{}", js(&browser, parked).await);
    let done_row = open_row.replace("#open-batches", "#done-batches");
    let done = eventually(WAIT, || async {
        let cells = js(&browser, &done_row).await;
        cells[2] == "done (complete)" && cells[7] == "1"
    })
    .await;
    assert!(done, "{}", js(&browser, &done_row).await);
    screenshot(&browser, "workflows.png").await;

    click(
        &browser,
        &format!("#done-batches a[data-batch-link=\"{id}\"]"),
    )
    .await;
    let dead = "const r = document.querySelector('#dead-members tr[data-dead-member=\"2\"]'); return r ? r.innerText : '';";
    let detail = eventually(WAIT, || async {
        js(&browser, dead)
            .await
            .as_str()
            .is_some_and(|t| t.contains("rejected") && t.contains("item 2 rejected"))
    })
    .await;
    assert!(detail, "{}", js(&browser, dead).await);
    let complete = "const r = document.querySelector('#callbacks tr[data-callback-row=\"complete\"]'); return r ? r.cells[3].textContent : '';";
    assert_eq!(js(&browser, complete).await, json!("sent"));
    screenshot(&browser, "workflow-batch.png").await;
    host.shutdown().await.unwrap();
}
