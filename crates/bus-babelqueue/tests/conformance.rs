//! The transport conformance suite (`bus_conformance`) on `BabelTransport`, on both
//! layouts. What BabelQueue cannot do is skipped or scaled by the capabilities the
//! transport declares (`Transport::capabilities`: no topics, delays in whole seconds on
//! Laravel and none on legacy, no error history), and each skip names its capability.

use std::sync::Arc;

use async_trait::async_trait;
use bus_babelqueue::{unframe, BabelQueue, BabelTransport, Layout, Options};
use bus_conformance::{self as conformance, Probe, SeenDeadLetter};
use bus_core::transport::{Capabilities, Source};
use bus_core::Transport;
use bus_redis::RedisConfig;
use bus_test_redis::TestRedis;
use serde_json::Value;

/// Reads what the adapter stored with plain Redis commands, as BabelQueue's SDKs see it;
/// a `dead_letter` block's reason is named the bus's way (BabelQueue says `failed` for
/// every handler failure; the adapter's `exception` tells them apart).
struct Babel {
    bq: BabelQueue,
    redis: Arc<TestRedis>,
}

fn bus_reason(block: &Value) -> String {
    let text = |k: &str| block[k].as_str().unwrap_or_default().to_owned();
    match (text("reason").as_str(), text("exception").as_str()) {
        ("poison", _) | ("failed", "UndecodableData") => "undecodable".into(),
        ("unknown_urn", _) => "unknown_type".into(),
        ("failed", "Rejected") => "rejected".into(),
        ("failed", "HandlerError" | "DeliveryLimit") => "delivery_limit".into(),
        (reason, exception) => format!("{reason}/{exception}"),
    }
}

#[async_trait]
impl Probe for Babel {
    async fn dead_letters(&self, source: &Source) -> Vec<SeenDeadLetter> {
        let Source::Queue(queue) = source else {
            return Vec::new();
        };
        let dlq = self.bq.keys(queue).dlq;
        let reply = self
            .redis
            .client()
            .cmd(&["LRANGE", dlq.as_str(), "0", "-1"])
            .expect("LRANGE");
        let records = reply.as_array().unwrap_or_default();
        records
            .iter()
            .map(|record| {
                let (body, _) = unframe(record.as_bytes().unwrap_or_default());
                let record: Value = serde_json::from_slice(&body).expect("a JSON record");
                let block = &record["dead_letter"];
                SeenDeadLetter {
                    reason: bus_reason(block),
                    errors: block["error"]
                        .as_str()
                        .map(str::to_owned)
                        .into_iter()
                        .collect(),
                }
            })
            .collect()
    }

    async fn counts(&self, source: &Source) -> [usize; 4] {
        let Source::Queue(queue) = source else {
            return [0; 4];
        };
        let keys = self.bq.keys(queue);
        let laravel = matches!(self.bq.options().layout, Layout::Laravel { .. });
        let mut client = self.redis.client();
        let mut size = |cmd: &str, key: &str| {
            let n = client.cmd(&[cmd, key]).expect("size").as_int().unwrap_or(0);
            usize::try_from(n).unwrap_or(0)
        };
        let ready = size("LLEN", &keys.ready);
        let (in_flight, delayed) = if laravel {
            (size("ZCARD", &keys.in_flight), size("ZCARD", &keys.timers))
        } else {
            // Legacy has no delayed set (`timers` holds the deadlines of in-flight ones).
            (size("LLEN", &keys.in_flight), 0)
        };
        [ready, in_flight, delayed, size("LLEN", &keys.dlq)]
    }
}

fn options(layout: &str) -> Options {
    match layout {
        "laravel" => Options::laravel(),
        _ => Options::legacy(),
    }
}

async fn setup(layout: &str) -> (Arc<dyn Transport>, Babel) {
    let redis = Arc::new(TestRedis::start().expect("redis-server"));
    let config = RedisConfig::from_url(&redis.url()).expect("Redis URL");
    let transport = BabelTransport::connect(&config, options(layout))
        .await
        .expect("connecting");
    let probe = Babel {
        bq: transport.babel_queue().clone(),
        redis,
    };
    (Arc::new(transport), probe)
}

macro_rules! suite {
    ($layout:ident: [$($plain:ident),*], [$($probed:ident),*]) => {
        mod $layout {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $plain() {
                    let (transport, _probe) = setup(stringify!($layout)).await;
                    conformance::$plain(transport).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $probed() {
                    let (transport, probe) = setup(stringify!($layout)).await;
                    conformance::$probed(transport, &probe).await;
                }
            )*
        }
    };
}

macro_rules! both_layouts {
    ($plain:tt, $probed:tt) => {
        suite!(legacy: $plain, $probed);
        suite!(laravel: $plain, $probed);
    };
}

both_layouts!(
    [
        retries_start_on_time,
        delayed_sends_start_on_time,
        blocking_work_in_spawn_blocking_keeps_its_locks
    ],
    [
        a_panicking_body_decoder_dead_letters_the_message,
        failures_end_in_one_dead_letter_with_their_history,
        oversized_messages_are_refused_at_send,
        shutdown_releases_prefetched_messages,
        concurrency_stays_within_max_concurrent_calls,
        an_event_reaches_each_subscription_once,
        shutdown_is_prompt_when_idle_and_bounded_by_the_grace
    ]
);

/// What the suite skips, it skips because the transport says so: the declaration itself.
#[tokio::test]
async fn the_declared_capabilities_are_what_babelqueue_lacks() {
    let (legacy, _) = setup("legacy").await;
    let (laravel, _) = setup("laravel").await;
    let seconds = Some(std::time::Duration::from_secs(1));
    let common = Capabilities::ALL.topics(false).error_history(false);
    assert_eq!(
        legacy.capabilities(),
        common.delayed_sends(None).retry_delays(None)
    );
    assert_eq!(
        laravel.capabilities(),
        common.delayed_sends(seconds).retry_delays(seconds)
    );
}
