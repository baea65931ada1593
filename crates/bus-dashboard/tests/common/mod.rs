//! Shared test plumbing: a real redis-server per test, the transport over its namespace,
//! hosts with failing and succeeding handlers, the dashboard on a free loopback port, and
//! a tiny HTTP/1.1 client (one request per connection) for the server's responses.

#![allow(dead_code)]

pub mod browser;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{
    Bus, BusConfig, CommandProcessor, Context, Host, ProcessError, ProcessingSettings,
    RedisCommand, RunningHost,
};
use bus_dashboard::{Dashboard, DashboardOptions};
use bus_redis::{RedisConfig, RedisTransport};
use bus_test_redis::TestRedis;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub use bus_test_redis::eventually_async as eventually;

/// Every wait in these tests: generous for a loaded 2-core machine, still bounded.
pub const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "payments")]
pub struct Payment {
    pub n: u64,
}

pub struct Setup {
    pub redis: TestRedis,
    pub config: RedisConfig,
    pub transport: RedisTransport,
    pub bus: Bus,
}

pub async fn setup() -> Setup {
    let redis = TestRedis::start().expect("redis-server (Debian's redis-server package)");
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(redis.namespace());
    let transport = RedisTransport::connect(&config).await.unwrap();
    let bus = Bus::new(transport.clone(), BusConfig::default());
    Setup {
        redis,
        config,
        transport,
        bus,
    }
}

impl Setup {
    /// An integer reply of a one-key command (`LLEN`, `ZCARD`, ...), read with the
    /// harness's own client: the test's view of Redis, independent of the code under test.
    pub fn int(&self, cmd: &str, key: &str) -> i64 {
        self.redis
            .client()
            .cmd(&[cmd, key])
            .unwrap()
            .as_int()
            .unwrap()
    }

    /// A host whose `Payment` handler always refuses (dead-letters at once, reason
    /// `rejected`) with an error that names the payment.
    pub async fn failing_host(&self) -> RunningHost {
        Host::builder()
            .transport(self.transport.clone())
            .command::<Payment, _>(Refuse)
            .build()
            .unwrap()
            .start()
            .await
            .unwrap()
    }

    /// A host whose `Payment` handler succeeds and records what it saw.
    pub async fn succeeding_host(&self, seen: Arc<Seen>) -> RunningHost {
        Host::builder()
            .transport(self.transport.clone())
            .command::<Payment, _>(seen)
            .build()
            .unwrap()
            .start()
            .await
            .unwrap()
    }
}

struct Refuse;

#[async_trait]
impl CommandProcessor<Payment> for Refuse {
    async fn process(&self, payment: Payment, _: &Context) -> Result<(), ProcessError> {
        Err(ProcessError::dead_letter(format!(
            "card declined for payment {} (gateway code 51)",
            payment.n
        )))
    }

    fn settings(&self) -> ProcessingSettings {
        ProcessingSettings::default().dead_letter_delivery_limit(1)
    }
}

/// What a succeeding handler processed: payment number → times.
#[derive(Debug, Default)]
pub struct Seen(Mutex<BTreeMap<u64, u32>>);

impl Seen {
    pub fn processed(&self) -> BTreeMap<u64, u32> {
        self.0.lock().unwrap().clone()
    }
}

#[async_trait]
impl CommandProcessor<Payment> for Arc<Seen> {
    async fn process(&self, payment: Payment, _: &Context) -> Result<(), ProcessError> {
        *self.0.lock().unwrap().entry(payment.n).or_default() += 1;
        Ok(())
    }
}

/// The dashboard on a free loopback port, served by a task that ends with the test.
pub async fn start_dashboard(transport: &RedisTransport, options: DashboardOptions) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dashboard = Dashboard::new(transport.clone(), options);
    tokio::spawn(async move {
        if let Err(error) = dashboard.serve(listener).await {
            panic!("dashboard stopped: {error}");
        }
    });
    addr
}

/// The dashboard of a whole fleet (the bus's queues and other kinds') on a free loopback
/// port, served by a task that ends with the test.
pub async fn start_fleet_dashboard(
    fleet: bus_management::Fleet,
    options: DashboardOptions,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dashboard = Dashboard::for_fleet(fleet, options);
    tokio::spawn(async move {
        if let Err(error) = dashboard.serve(listener).await {
            panic!("dashboard stopped: {error}");
        }
    });
    addr
}

/// A response: status, headers (names lowercased), body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request (`Connection: close`), bounded in time. `headers` are extra
/// header lines; `Host` defaults to the address itself.
pub async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            request.push_str(&format!("Host: {addr}\r\n"));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        parse(&String::from_utf8_lossy(&raw))
    };
    tokio::time::timeout(WAIT, exchange)
        .await
        .unwrap_or_else(|_| panic!("{method} {path} got no answer in {WAIT:?}"))
}

fn parse(raw: &str) -> Response {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {raw:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// The CSRF token the page carries (as the browser's script reads it).
pub fn csrf_of(page: &str) -> String {
    let marker = r#"name="csrf-token" content=""#;
    let start = page.find(marker).expect("the page carries a CSRF token") + marker.len();
    page[start..start + 64].to_owned()
}
