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
use common::{eventually, setup, start_dashboard, Payment, Seen, WAIT};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    async fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver package; scripts/test.sh installs it)");
        let driver = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let up = eventually(WAIT, || async {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        })
        .await;
        assert!(up, "chromedriver did not listen on {addr}");
        driver
    }

    async fn browser(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--window-size=1440,1000",
                    "--hide-scrollbars",
                    "--force-device-scale-factor=1",
                ]
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = tokio::time::timeout(
            WAIT,
            ClientBuilder::new(connector)
                .capabilities(caps)
                .connect(&self.url),
        )
        .await
        .expect("Chromium did not start in time")
        .expect("a WebDriver session with headless Chromium");
        client
            .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
                Some(WAIT),
                Some(WAIT),
                Some(Duration::ZERO),
            ))
            .await
            .unwrap();
        client
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // A browser outlives a killed chromedriver: end the browsers it started (its
        // children, by process id) first, as closing the session would have.
        for pid in children(self.child.id()) {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ids of the processes whose parent is `parent` (from `/proc/<pid>/stat`).
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                // `pid (comm) state ppid ...`: comm may hold spaces, so read after ')'.
                .and_then(|stat| {
                    stat.rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()
                })
                == Some(parent)
        })
        .collect()
}

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

/// Runs a script in the page (bounded) and returns its value.
async fn js(browser: &Client, script: &str) -> Value {
    tokio::time::timeout(WAIT, browser.execute(script, Vec::new()))
        .await
        .unwrap_or_else(|_| panic!("the page did not answer {script:?} in time"))
        .unwrap_or_else(|e| panic!("{script:?} failed: {e}"))
}

/// The cells of the overview's row of `queue`, as shown.
async fn row(browser: &Client, queue: &str) -> Vec<String> {
    let script = format!(
        "const r = document.querySelector('tr[data-queue=\"{queue}\"]');
         return r ? [...r.cells].map(c => c.textContent.trim()) : [];"
    );
    serde_json::from_value(js(browser, &script).await).unwrap()
}

/// Clicks the first element matching `css`, once it exists. The live pages redraw
/// themselves, so an element found may be replaced before the click lands: then it is
/// found again (bounded).
async fn click(browser: &Client, css: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let element = tokio::time::timeout(WAIT, browser.wait().for_element(Locator::Css(css)))
            .await
            .unwrap_or_else(|_| panic!("no {css} in time"))
            .unwrap_or_else(|e| panic!("no {css}: {e}"));
        match element.click().await {
            Ok(()) => return,
            Err(e) if e.to_string().contains("stale element") => {
                assert!(tokio::time::Instant::now() < deadline, "click {css}: {e}");
            }
            Err(e) => panic!("click {css}: {e}"),
        }
    }
}

fn screenshot_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp: the screenshots go beside it.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(browser: &Client, name: &str) -> PathBuf {
    let png = tokio::time::timeout(WAIT, browser.screenshot())
        .await
        .expect("screenshot in time")
        .unwrap();
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let path = screenshot_dir().join(name);
    std::fs::write(&path, png).unwrap();
    println!("screenshot: {}", path.display());
    path
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
