//! `bus metrics`: the queue counts as a Prometheus (OpenMetrics text) endpoint, read from
//! Redis on each scrape.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bus_core::timing::TypeTiming;
use bus_redis::RedisTransport;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;

use crate::snapshot::{QueueSnapshot, Reader};
use crate::{Error, Result};

/// The OpenMetrics text format's content type, as Prometheus asks for it.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The `messaging.system` label value of the bus's own queues (and their kind).
const SYSTEM: &str = "bus";

type Labels = Vec<(&'static str, String)>;

/// A gauge's name, help text and the count it reads.
type Count = (&'static str, &'static str, fn(&QueueSnapshot) -> u64);

/// Per-queue metrics without a host (`bus metrics`): every registered queue and
/// subscription's ready, in-flight, expired-lock, delayed and dead counts and the age of
/// its oldest ready message, in Prometheus's text format, read from Redis on each scrape.
///
/// A scrape costs a fixed handful of O(1) / O(log n) commands per queue (`LLEN`, `ZCARD`,
/// `ZCOUNT`, `LINDEX 0`, `HLEN`, ...), never a read of a list's contents, so it costs the
/// same with 10 or 10 million messages waiting. The metrics are listed in
/// `docs/operations.md` ("Metrics and dashboard").
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let config = bus_redis::RedisConfig::from_url("redis://127.0.0.1:6379")?;
/// let transport = bus_redis::RedisTransport::connect(&config).await?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
/// bus_dashboard::QueueMetrics::new(transport).serve(listener).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    reader: Reader,
    timeout: Duration,
}

/// How long a scrape may wait for Redis by default: a scrape never hangs on an
/// unreachable server (fred itself would wait for the reconnect).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl QueueMetrics {
    /// Metrics of the queues under the transport's key prefix, read through its connection.
    pub fn new(transport: RedisTransport) -> Self {
        Self::from_reader(Reader::new(transport, None))
    }

    /// Metrics of every queue of every kind the fleet serves (the bus's own and, say,
    /// BabelQueue's layouts), through its connection.
    pub fn for_fleet(fleet: bus_management::Fleet) -> Self {
        Self::from_reader(Reader::for_fleet(fleet, None))
    }

    pub(crate) fn from_reader(reader: Reader) -> Self {
        QueueMetrics {
            reader,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// How long a scrape may wait for Redis before it fails with 503 (10 s by default;
    /// keep it under Prometheus's `scrape_timeout`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Reads every queue's counts now and renders them in the OpenMetrics text format.
    pub async fn render(&self) -> Result<String> {
        let started = Instant::now();
        let read = async {
            let snapshots = self.reader.snapshot_all().await?;
            let timing = self.last_minute().await?;
            Ok::<_, Error>((snapshots, timing))
        };
        let (snapshots, timing) = tokio::time::timeout(self.timeout, read)
            .await
            .map_err(|_| Error::Timeout(self.timeout))??;
        let mut text = render(&snapshots, started.elapsed().as_secs_f64());
        render_timing(&mut text, &timing);
        Ok(text)
    }

    /// Every type's runs in the last complete minute (Redis's clock), all hosts added.
    async fn last_minute(&self) -> Result<BTreeMap<String, TypeTiming>> {
        let admin = self.reader.management().admin();
        let read = async {
            let minute = admin.redis_minute().await?.saturating_sub(1);
            admin.timing(minute, minute).await
        };
        let minutes = read.await.map_err(bus_management::Error::from)?;
        Ok(crate::timing::by_type(&minutes))
    }

    /// A router with `GET /metrics` (and `/` pointing at it), to serve or to nest.
    pub fn router(self) -> Router {
        self.metrics_only().route("/", get(index))
    }

    /// Just `GET /metrics`, for the dashboard to merge.
    pub(crate) fn metrics_only(self) -> Router {
        Router::new()
            .route("/metrics", get(scrape))
            .with_state(self)
    }

    /// Serves `GET /metrics` on `listener` until the task is dropped.
    pub async fn serve(self, listener: TcpListener) -> Result<()> {
        self.serve_with_shutdown(listener, std::future::pending())
            .await
    }

    /// Serves `GET /metrics` on `listener` until `shutdown` completes.
    pub async fn serve_with_shutdown(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await?;
        Ok(())
    }
}

async fn index() -> &'static str {
    "bus queue metrics: GET /metrics\n"
}

async fn scrape(State(metrics): State<QueueMetrics>) -> Response {
    match metrics.render().await {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        // Prometheus records the failed scrape (`up` 0); the text says why.
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot read the queues from Redis: {error}\n"),
        )
            .into_response(),
    }
}

fn labels(snapshot: &QueueSnapshot) -> Labels {
    let mut labels = vec![
        ("messaging_system", snapshot.system.clone()),
        ("messaging_destination_name", snapshot.destination.clone()),
    ];
    if let Some(subscription) = &snapshot.subscription {
        labels.push((
            "messaging_destination_subscription_name",
            subscription.clone(),
        ));
    }
    // Another kind's queue (`babel`, `laravel`): its kind tells two layouts' queues of
    // one name apart.
    if snapshot.kind != SYSTEM {
        labels.push(("queue_kind", snapshot.kind.clone()));
    }
    labels
}

/// The registry of one scrape: built fresh from the snapshots, so a removed queue's
/// series disappear with it.
fn render(snapshots: &[QueueSnapshot], scrape_seconds: f64) -> String {
    let mut registry = Registry::default();
    let counts: [Count; 8] = [
        (
            "bus_queue_ready_messages",
            "Messages waiting to be processed",
            |s| s.ready,
        ),
        (
            "bus_queue_keyed_messages",
            "Messages of an ordered queue waiting for their key (per-key ordering)",
            |s| s.keyed,
        ),
        (
            "bus_queue_in_flight_messages",
            "Messages reserved by consumers (running or prefetched)",
            |s| s.in_flight,
        ),
        (
            "bus_queue_expired_lock_messages",
            "Messages in flight whose lock deadline has passed (consumer gone or stuck)",
            |s| s.expired_locks,
        ),
        (
            "bus_queue_delayed_messages",
            "Delayed sends and retries waiting for their due time",
            |s| s.delayed,
        ),
        (
            "bus_queue_dead_letter_messages",
            "Messages in the dead-letter list",
            |s| s.dead,
        ),
        (
            "bus_queue_paused",
            "1 while the queue is paused (flow control: consumers take nothing)",
            |s| u64::from(s.paused),
        ),
        (
            "bus_queue_breaker_open",
            "1 while a fleet-wide circuit breaker holds the queue's consumers back (open, or its probe runs)",
            |s| u64::from(s.breaker_until_ms.is_some()),
        ),
    ];
    for (name, help, value) in counts {
        let family = Family::<Labels, Gauge>::default();
        for snapshot in snapshots {
            family
                .get_or_create(&labels(snapshot))
                .set(i64::try_from(value(snapshot)).unwrap_or(i64::MAX));
        }
        registry.register(name, help, family);
    }
    let age = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for snapshot in snapshots {
        let ms = snapshot.oldest_ready_age_ms.unwrap_or(0);
        age.get_or_create(&labels(snapshot)).set(ms as f64 / 1000.0);
    }
    registry.register_with_unit(
        "bus_queue_oldest_ready_age",
        "Age of the next ready message (since it was sent); 0 when none is ready",
        Unit::Seconds,
        age,
    );
    let duration = Gauge::<f64, AtomicU64>::default();
    duration.set(scrape_seconds);
    registry.register_with_unit(
        "bus_queue_metrics_scrape_duration",
        "Time this scrape spent reading Redis",
        Unit::Seconds,
        duration,
    );
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut text, &registry);
    text
}

/// A per-type gauge's name, help text and the count it reads.
type TypeCount = (&'static str, &'static str, fn(&TypeTiming) -> u64);

/// The per-type series of the last complete minute (docs/operations.md, "Per-type
/// timing"), appended to a scrape's text before its `# EOF`.
fn render_timing(text: &mut String, timing: &BTreeMap<String, TypeTiming>) {
    if timing.is_empty() {
        return;
    }
    let mut registry = Registry::default();
    let labels = |name: &str| -> Labels {
        vec![
            ("messaging_system", SYSTEM.to_owned()),
            ("bus_message_type", name.to_owned()),
        ]
    };
    let counts: [TypeCount; 2] = [
        (
            "bus_message_type_handled_messages",
            "Handler runs of the type that succeeded in the last complete minute, all hosts",
            |t| t.handled,
        ),
        (
            "bus_message_type_failed_messages",
            "Handler runs of the type that failed in the last complete minute, all hosts",
            |t| t.failed,
        ),
    ];
    for (name, help, value) in counts {
        let family = Family::<Labels, Gauge>::default();
        for (message_type, t) in timing {
            family
                .get_or_create(&labels(message_type))
                .set(i64::try_from(value(t)).unwrap_or(i64::MAX));
        }
        registry.register(name, help, family);
    }
    let mean = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    let quantiles = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (message_type, t) in timing {
        mean.get_or_create(&labels(message_type))
            .set(t.mean_us() as f64 / 1e6);
        for (q, label) in [(0.5, "0.5"), (0.95, "0.95"), (0.99, "0.99")] {
            let mut with_q = labels(message_type);
            with_q.push(("quantile", label.to_owned()));
            quantiles
                .get_or_create(&with_q)
                .set(t.quantile_us(q) as f64 / 1e6);
        }
    }
    registry.register_with_unit(
        "bus_message_type_duration_mean",
        "Mean handler duration of the type in the last complete minute",
        Unit::Seconds,
        mean,
    );
    registry.register_with_unit(
        "bus_message_type_duration_quantile",
        "Upper bound of the histogram bucket holding the quantile of the type's handler durations in the last complete minute",
        Unit::Seconds,
        quantiles,
    );
    let mut more = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut more, &registry);
    // One exposition: the queue text's `# EOF` goes after these series.
    if let Some(body) = text.strip_suffix("# EOF\n") {
        let body = body.to_owned();
        *text = body + more.as_str();
    } else {
        text.push_str(&more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(name: &str, subscription: Option<&str>) -> QueueSnapshot {
        QueueSnapshot {
            name: name.to_owned(),
            kind: "bus".to_owned(),
            system: "bus".to_owned(),
            destination: name.split('/').next().unwrap().to_owned(),
            subscription: subscription.map(str::to_owned),
            ready: 3,
            keyed: 0,
            in_flight: 2,
            expired_locks: 1,
            delayed: 4,
            dead: 5,
            oldest_ready_age_ms: Some(1500),
            taken_total: 0,
            stored: 0,
            at_ms: 0,
            paused: false,
            breaker_until_ms: None,
        }
    }

    #[test]
    fn every_count_is_a_labelled_gauge() {
        let text = render(
            &[
                snapshot("orders", None),
                snapshot("paid/mail", Some("mail")),
            ],
            0.25,
        );
        assert!(
            text.contains("# TYPE bus_queue_keyed_messages gauge"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE bus_queue_ready_messages gauge"),
            "{text}"
        );
        assert!(text.contains(
            "bus_queue_ready_messages{messaging_system=\"bus\",messaging_destination_name=\"orders\"} 3"
        ));
        assert!(text.contains(
            "bus_queue_dead_letter_messages{messaging_system=\"bus\",messaging_destination_name=\"paid\",messaging_destination_subscription_name=\"mail\"} 5"
        ));
        assert!(text.contains("bus_queue_expired_lock_messages{"));
        assert!(text.contains("# UNIT bus_queue_oldest_ready_age_seconds seconds"));
        assert!(text.contains(
            "bus_queue_oldest_ready_age_seconds{messaging_system=\"bus\",messaging_destination_name=\"orders\"} 1.5"
        ));
        assert!(text.contains(
            "bus_queue_breaker_open{messaging_system=\"bus\",messaging_destination_name=\"orders\"} 0"
        ));
        let mut tripped = snapshot("orders", None);
        tripped.breaker_until_ms = Some(1_764_000_000_000);
        assert!(render(&[tripped], 0.1).contains(
            "bus_queue_breaker_open{messaging_system=\"bus\",messaging_destination_name=\"orders\"} 1"
        ));
        assert!(text.contains("bus_queue_metrics_scrape_duration_seconds 0.25"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn each_type_of_the_last_minute_is_a_labelled_gauge_in_one_exposition() {
        let mut text = render(&[snapshot("orders", None)], 0.1);
        let mut timing = TypeTiming::default();
        timing.handled = 40;
        timing.failed = 2;
        timing.total_us = 42 * 3_000;
        timing.buckets[TypeTiming::bucket_of(3_000)] = 42;
        render_timing(&mut text, &[("order-placed".to_owned(), timing)].into());
        assert!(text.contains(
            "bus_message_type_handled_messages{messaging_system=\"bus\",bus_message_type=\"order-placed\"} 40"
        ), "{text}");
        assert!(text.contains(
            "bus_message_type_failed_messages{messaging_system=\"bus\",bus_message_type=\"order-placed\"} 2"
        ));
        assert!(text.contains(
            "bus_message_type_duration_mean_seconds{messaging_system=\"bus\",bus_message_type=\"order-placed\"} 0.003"
        ));
        assert!(text.contains(
            "bus_message_type_duration_quantile_seconds{messaging_system=\"bus\",bus_message_type=\"order-placed\",quantile=\"0.95\"} 0.005"
        ));
        assert!(text.contains("bus_queue_ready_messages{"));
        assert_eq!(text.matches("# EOF").count(), 1);
        assert!(text.ends_with("# EOF\n"));
    }
}
