//! A bus host joins a BabelQueue fleet: messages the real Python SDK publishes on one
//! queue under several URNs reach the Rust processor of each URN (routed by
//! `Message::TYPE`); an unknown URN is dead-lettered `unknown_urn` where the SDK's
//! redrive finds it. Both layouts, a real redis-server.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{Command, CommandProcessor, Context, Host, Message, MessageKind, ProcessError};
use bus_test_redis::{eventually, TestRedis};
use common::{options, run_py, size, transport};
use serde::{Deserialize, Serialize};

/// The body the Python script publishes (`data_for(i)` in tests/python/bq.py).
#[derive(Debug, Serialize, Deserialize)]
struct OrderData {
    i: u64,
}

macro_rules! urn_command {
    ($ty:ident, $urn:literal) => {
        #[derive(Debug, Serialize, Deserialize)]
        struct $ty(OrderData);
        impl Message for $ty {
            const NAME: &'static str = "orders";
            const TYPE: &'static str = $urn;
            const KIND: MessageKind = MessageKind::Command;
        }
        impl Command for $ty {}
    };
}
urn_command!(Created, "urn:babel:orders:created");
urn_command!(Paid, "urn:babel:orders:paid");

#[derive(Default)]
struct Seen(Mutex<Vec<(&'static str, u64, String)>>);

#[async_trait]
impl CommandProcessor<Created> for Arc<Seen> {
    async fn process(&self, m: Created, ctx: &Context) -> Result<(), ProcessError> {
        let id = ctx.message_id().to_string();
        self.0.lock().unwrap().push(("created", m.0.i, id));
        Ok(())
    }
}

#[async_trait]
impl CommandProcessor<Paid> for Arc<Seen> {
    async fn process(&self, m: Paid, ctx: &Context) -> Result<(), ProcessError> {
        let id = ctx.message_id().to_string();
        self.0.lock().unwrap().push(("paid", m.0.i, id));
        Ok(())
    }
}

async fn host_routes_by_urn(layout: &str) {
    let redis = TestRedis::start().expect("redis-server");
    let url = redis.url();
    let base = [
        "--url",
        url.as_str(),
        "--layout",
        layout,
        "--queue",
        "orders",
    ];
    let publish = |urn: &'static str, start: &'static str| {
        let mut args = vec!["publish", "--urn", urn, "--count", "100", "--start", start];
        args.extend(base);
        args
    };
    let (created, _) = run_py(&publish("urn:babel:orders:created", "0")).await;
    let (paid, _) = run_py(&publish("urn:babel:orders:paid", "100")).await;
    let (shipped, _) = run_py(&{
        let mut args = vec![
            "publish",
            "--urn",
            "urn:babel:orders:shipped",
            "--start",
            "200",
        ];
        args.extend(base);
        args
    })
    .await;
    let options = options(layout);
    let seen = Arc::new(Seen::default());
    let running = Host::builder()
        .transport(transport(&url, options).await)
        .command::<Created, _>(Arc::clone(&seen))
        .command::<Paid, _>(Arc::clone(&seen))
        .build()
        .unwrap()
        .start()
        .await
        .unwrap();
    let dlq = if layout == "laravel" {
        "queues:orders.dlq"
    } else {
        "orders.dlq"
    };
    let done = eventually(Duration::from_secs(30), || {
        seen.0.lock().unwrap().len() == 200 && size(&redis, dlq) == 1
    })
    .await;
    running.shutdown().await.unwrap();
    let seen = seen.0.lock().unwrap();
    assert!(done, "{} handled, {} dead", seen.len(), size(&redis, dlq));
    // Each message once, by the processor of its URN, with the SDK's meta.id.
    let ids: HashSet<&str> = seen.iter().map(|(_, _, id)| id.as_str()).collect();
    assert_eq!(ids.len(), 200);
    for (kind, published) in [("created", &created), ("paid", &paid)] {
        for p in published {
            let (i, id) = (p["data"]["i"].as_u64().unwrap(), p["id"].as_str().unwrap());
            assert!(seen.contains(&(kind, i, id.to_owned())), "{kind} {i} {id}");
        }
    }
    // The unknown URN is dead-lettered as BabelQueue names it, where its redrive looks.
    let record: serde_json::Value = {
        let raw = redis.client().cmd(&["LINDEX", dlq, "0"]).unwrap();
        serde_json::from_slice(raw.as_bytes().unwrap()).unwrap()
    };
    let record = match record.get("__bq_frame") {
        Some(_) => serde_json::from_str(record["body"].as_str().unwrap()).unwrap(),
        None => record,
    };
    assert_eq!(record["meta"]["id"], shipped[0]["id"]);
    assert_eq!(record["dead_letter"]["reason"], "unknown_urn");
}

bus_test_redis::per_layout!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    host_routes_by_urn => a_host_routes_a_queue_by_urn
);
