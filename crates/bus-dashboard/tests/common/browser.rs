//! A real headless Chromium driven over WebDriver (chromedriver), for the browser
//! tests: the driver on a free loopback port, scripts run in the page, clicks that
//! survive the live pages' redraws, screenshots.

use super::{eventually, WAIT};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// chromedriver on a free loopback port, killed on drop.
pub struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    pub async fn start() -> Driver {
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

    pub async fn browser(&self) -> Client {
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

/// Runs a script in the page (bounded) and returns its value.
pub async fn js(browser: &Client, script: &str) -> Value {
    tokio::time::timeout(WAIT, browser.execute(script, Vec::new()))
        .await
        .unwrap_or_else(|_| panic!("the page did not answer {script:?} in time"))
        .unwrap_or_else(|e| panic!("{script:?} failed: {e}"))
}

/// The cells of the overview's row of `queue`, as shown.
pub async fn row(browser: &Client, queue: &str) -> Vec<String> {
    let script = format!(
        "const r = document.querySelector('tr[data-queue=\"{queue}\"]');
         return r ? [...r.cells].map(c => c.textContent.trim()) : [];"
    );
    serde_json::from_value(js(browser, &script).await).unwrap()
}

/// Clicks the first element matching `css`, once it exists. The live pages redraw
/// themselves, so an element found may be replaced before the click lands: then it is
/// found again (bounded).
pub async fn click(browser: &Client, css: &str) {
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

pub fn screenshot_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp: the screenshots go beside it.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("dashboard-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub async fn screenshot(browser: &Client, name: &str) -> PathBuf {
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
