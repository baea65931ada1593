//! A message that kills every consumer: on BabelQueue's legacy layout a recovery leaves
//! the element's bytes (and so its `attempts`) unchanged, so only the out-of-band count of
//! recoveries stops the loop. Real host processes with every setting at its default
//! (`bq-host`: default `RedisConfig`, `Options`, `ProcessingSettings`), a handler that
//! aborts the process, and the real Python SDK reading the queue and the dead letter
//! afterwards.

mod common;

use std::time::Duration;

use bus_core::ProcessingSettings;
use bus_test_redis::{eventually, TestRedis};
use common::{host_process, lrange, run_py, size};
use serde_json::Value;

const START: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_message_that_aborts_every_host_is_dead_lettered_after_the_limit_legacy() {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let base = [
        "--url",
        url.as_str(),
        "--layout",
        "legacy",
        "--queue",
        "orders",
    ];
    let (published, _) = run_py(&[&["publish"][..], &base[..]].concat()).await;
    let id = published[0]["id"].clone();
    let defaults = ProcessingSettings::default();
    let (limit, lock) = (
        defaults.dead_letter_delivery_limit,
        defaults.message_lock_timeout,
    );
    // A recovery comes once the lock lapses (whole seconds: up to a second later).
    let recovered_within = lock + Duration::from_secs(20);

    for delivery in 1..=limit {
        let mut host = host_process(&["--url", &url, "--crash"]);
        assert_eq!(host.next(START).await.expect("host starts")["ready"], true);
        let crash = host
            .next(recovered_within)
            .await
            .unwrap_or_else(|| panic!("delivery {delivery} did not come"));
        assert_eq!(crash["crash"], id);
        assert_eq!(
            crash["delivery"], delivery,
            "a crash recovery did not count as a delivery"
        );
        let status = tokio::time::timeout(START, host.child.wait())
            .await
            .expect("the host aborts")
            .expect("waiting for the host");
        assert!(!status.success(), "the handler aborts the process");
    }

    // The next host recovers it once more and dead-letters it without running it.
    let mut host = host_process(&["--url", &url, "--crash"]);
    assert_eq!(host.next(START).await.expect("host starts")["ready"], true);
    let dead = eventually(recovered_within, || size(&redis, "orders.dlq") == 1).await;
    assert!(
        dead,
        "the crasher was not dead-lettered after {limit} deliveries"
    );
    assert!(
        host.child.try_wait().expect("host status").is_none(),
        "the host ran the crasher once more"
    );
    assert!(host.stop().await.is_empty(), "the host handled something");

    let record: Value =
        serde_json::from_slice(&lrange(&redis, "orders.dlq")[0]).expect("a JSON record");
    assert_eq!(record["meta"]["id"], id);
    let block = &record["dead_letter"];
    assert_eq!(block["reason"], "failed");
    assert_eq!(block["attempts"], limit);
    assert_eq!(record["attempts"], limit);
    assert_eq!(block["exception"], "DeliveryLimit");
    let error = block["error"].as_str().expect("an error text");
    assert!(
        error.contains(&format!("recovered {limit} times")),
        "the error does not say what happened: {error}"
    );
    for key in [
        "orders",
        "orders:processing",
        "orders:processing:deadlines",
        "orders:processing:recoveries",
    ] {
        let exists = redis.client().cmd(&["EXISTS", key]).expect("EXISTS");
        assert_eq!(exists.as_int(), Some(0), "{key} is left over");
    }

    // The SDK still reads the dead letter (its redrive lists it) and works the queue.
    let (items, _) = run_py(&[&["redrive", "--dlq", "orders.dlq"][..], &base[..]].concat()).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["message_id"], id);
    assert_eq!(items[0]["reason"], "failed");
    assert_eq!(items[0]["to"], "orders");
    let (next, _) = run_py(&[&["publish", "--start", "1"][..], &base[..]].concat()).await;
    let (handled, stderr) = run_py(&[&["consume", "--idle", "0.5"][..], &base[..]].concat()).await;
    assert_eq!(handled.len(), 1, "{stderr}");
    assert_eq!(handled[0]["id"], next[0]["id"]);
    assert_eq!(size(&redis, "orders.dlq"), 1);
}
