//! One send with options (`Bus::send_with`, `publish_with`) and the send middleware, on the
//! in-memory transport: what a handler sees, what is stored, what is refused.

use bus_core::headers;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::transport::Source;
use bus_core::{
    Bus, BusConfig, CommandProcessor, Context, Headers, Host, MemoryTransport, OutgoingMessage,
    ProcessError, RedisCommand, RedisEvent, SendMiddleware, SendOptions,
};
use bus_test_redis::eventually;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "options-work")]
struct Work {
    n: u32,
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "options-happened")]
struct Happened;

/// Records each handled message's number and headers; the first one sends a follow-up.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(u32, Headers)>>>);

#[async_trait]
impl CommandProcessor<Work> for Recorder {
    async fn process(&self, work: Work, ctx: &Context) -> Result<(), ProcessError> {
        self.0.lock().unwrap().push((work.n, ctx.headers().clone()));
        if work.n == 1 {
            ctx.bus().send(&Work { n: 2 }).await?;
        }
        Ok(())
    }
}

impl Recorder {
    fn seen(&self) -> Vec<(u32, Headers)> {
        self.0.lock().unwrap().clone()
    }
}

/// Adds `tenant: acme` to every message.
#[derive(Debug)]
struct Tenant;

#[async_trait]
impl SendMiddleware for Tenant {
    async fn before_send(&self, message: &mut OutgoingMessage<'_>) -> bus_core::Result<()> {
        message.headers.insert("tenant".into(), "acme".into());
        Ok(())
    }
}

/// Refuses messages whose header `forbidden` is set.
#[derive(Debug)]
struct Guard;

#[async_trait]
impl SendMiddleware for Guard {
    async fn before_send(&self, message: &mut OutgoingMessage<'_>) -> bus_core::Result<()> {
        if message.headers.contains_key("forbidden") {
            return Err(bus_core::Error::Config(format!(
                "{} may not carry `forbidden`",
                message.message_type
            )));
        }
        Ok(())
    }
}

fn run(host: Host) -> (Bus, CancellationToken) {
    let bus = host.bus();
    let stop = CancellationToken::new();
    let signal = stop.clone();
    tokio::spawn(host.run(async move { signal.cancelled().await }));
    (bus, stop)
}

#[tokio::test]
async fn options_and_send_middleware_reach_the_handler_and_its_own_sends() {
    let transport = MemoryTransport::new();
    let recorder = Recorder::default();
    let host = Host::builder()
        .transport(transport.clone())
        .send_middleware(Tenant)
        .send_middleware(Guard)
        .command::<Work, _>(recorder.clone())
        .build()
        .unwrap();
    let (bus, stop) = run(host);

    let sent = bus
        .send_with(
            &Work { n: 1 },
            &SendOptions::new().header("origin", "test").trace_id("t-1"),
        )
        .await
        .unwrap();
    assert_eq!(sent.trace_id.as_deref(), Some("t-1"));
    assert!(eventually(Duration::from_secs(10), || recorder.seen().len() == 2).await);
    let seen = recorder.seen();
    let (first, second) = (&seen[0].1, &seen[1].1);
    assert_eq!(seen[0].0, 1);
    assert_eq!(first["origin"], "test");
    assert_eq!(first[headers::TRACE_ID], "t-1");
    assert_eq!(first["tenant"], "acme");
    // The handler's own send: the middleware ran on it, and it kept the trace id but not
    // the sender's other headers.
    assert_eq!(seen[1].0, 2);
    assert_eq!(second["tenant"], "acme");
    assert_eq!(second[headers::TRACE_ID], "t-1");
    assert!(!second.contains_key("origin"), "{second:?}");

    // A refused send stores nothing and says why.
    let refused = bus
        .send_with(&Work { n: 3 }, &SendOptions::new().header("forbidden", "1"))
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("may not carry"), "{refused}");
    let queue = Source::queue("options-work").unwrap();
    let stats = transport.stats(&queue);
    assert_eq!((stats.ready, stats.delayed), (0, 0), "{stats:?}");
    stop.cancel();
}

#[tokio::test]
async fn a_due_time_and_a_key_are_options_of_one_send() {
    let transport = MemoryTransport::new();
    let bus = Bus::new(transport.clone(), BusConfig::default());
    let queue = Source::queue("options-work").unwrap();

    let sent = bus
        .send_with(
            &Work { n: 1 },
            &SendOptions::new().delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert_eq!(sent.trace_id, None);
    let stats = transport.stats(&queue);
    assert_eq!((stats.ready, stats.delayed), (0, 1), "{stats:?}");

    bus.send_with(&Work { n: 2 }, &SendOptions::new().key("customer-7"))
        .await
        .unwrap();
    assert_eq!(transport.stats(&queue).ready, 1);

    // A key with a due time: a delayed keyed send (docs/concepts.md, "Per-key ordering").
    let both = SendOptions::new().key("k").delay(Duration::from_secs(3600));
    bus.send_with(&Work { n: 3 }, &both).await.unwrap();
    // Refused, with nothing stored: options events cannot take.
    for refused in [
        SendOptions::new().key("k"),
        SendOptions::new().dedup_key("k"),
    ] {
        let error = bus.publish_with(&Happened, &refused).await.unwrap_err();
        assert!(error.to_string().contains("not a partition key"), "{error}");
    }
    let stats = transport.stats(&queue);
    assert_eq!((stats.ready, stats.delayed), (1, 2), "{stats:?}");
}
