//! Request/reply and effects that run once across processes, every setting at its
//! default: a `lifecycle-host` process answers requests made from this one, also when the
//! requester's connections die while the reply is pushed; a handler process SIGKILLed
//! after a `Context::once` step and before its ack does not make the redelivery run the
//! step again.

use bus_core::defaults;
use bus_core::transport::Replies;
use std::process::{Child, Command};
use std::time::Duration;

mod common;

use bus_chaos::{
    asked_key, charge_done_key, charged_key, charges_key, lifecycle_up_key, Ask, Charge,
};
use bus_core::transport::Source;
use bus_core::{Error, Message};
use bus_redis::{keys, RedisConfig, RedisTransport};
use bus_test_redis::{eventually, Proxy, RedisServer, SyncClient, TestRedis};
use common::{bus, kill};

/// A `lifecycle-host` process.
fn host(url: &str, prefix: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_lifecycle-host"))
        .env("REDIS_URL", url)
        .env("BUS_PREFIX", prefix)
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("start lifecycle-host")
}

async fn up(client: &mut SyncClient, prefix: &str, pid: u32) -> bool {
    eventually(Duration::from_secs(30), || {
        client
            .get(&lifecycle_up_key(prefix, pid))
            .unwrap()
            .is_some()
    })
    .await
}

/// The reply inboxes under `prefix`.
fn inboxes(client: &mut SyncClient, prefix: &str) -> Vec<String> {
    // keys::reply_inbox(prefix, "*"), the tag left open: `{` is no glob character.
    client.scan_match(&format!("{prefix}:{{:reply:*")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_across_processes_get_their_replies_through_a_reconnect() {
    let server = RedisServer::start().unwrap();
    let redis = TestRedis::with_url(server.url()).unwrap();
    let prefix = redis.namespace().to_owned();
    let mut client = redis.client();
    let mut responder = host(&server.url(), &prefix);
    assert!(
        up(&mut client, &prefix, responder.id()).await,
        "responder up"
    );

    // The requester reaches Redis through a proxy that can cut its connections.
    let proxy = Proxy::start(server.port()).unwrap();
    let requester = bus(&proxy.url(), &prefix).await;
    let timeout = Duration::from_secs(10);
    for n in 0..20 {
        let reply: u64 = requester
            .request(&Ask { n, delay_ms: 0 }, timeout)
            .await
            .unwrap();
        assert_eq!(reply, n * 2);
    }

    // Every connection of the requester goes dead (half-open) while the responder
    // works; the reply lands in the inbox meanwhile, and the requester, once it has new
    // connections, still finds it.
    let waiting = tokio::spawn({
        let requester = requester.clone();
        async move {
            let ask = Ask {
                n: 100,
                delay_ms: 500,
            };
            requester
                .request::<Ask, u64>(&ask, Duration::from_secs(60))
                .await
        }
    });
    assert!(
        eventually(Duration::from_secs(10), || {
            client.get(&asked_key(&prefix, 100)).unwrap().is_some()
        })
        .await
    );
    proxy.blackhole();
    let parked = eventually(Duration::from_secs(10), || {
        let found = inboxes(&mut client, &prefix);
        found.len() == 1 && client.len(&found[0]).unwrap() == 1
    })
    .await;
    assert!(
        parked,
        "the reply waits in the inbox while the requester is cut off"
    );
    assert_eq!(waiting.await.unwrap().unwrap(), 200);

    // No responder: the request times out. Its reply comes late, and is dropped.
    kill(&mut responder);
    let late = requester
        .request::<Ask, u64>(&Ask { n: 7, delay_ms: 0 }, Duration::from_millis(500))
        .await;
    assert!(
        matches!(late, Err(Error::RequestTimeout { .. })),
        "{late:?}"
    );
    let mut responder = host(&server.url(), &prefix);
    assert!(
        up(&mut client, &prefix, responder.id()).await,
        "responder up"
    );
    assert!(
        eventually(Duration::from_secs(120), || {
            client.get(&asked_key(&prefix, 7)).unwrap().is_some()
        })
        .await,
        "the timed-out request is handled later"
    );
    let reply: u64 = requester
        .request(&Ask { n: 8, delay_ms: 0 }, timeout)
        .await
        .unwrap();
    assert_eq!(
        reply, 16,
        "the late reply is not taken for the next request"
    );

    // Dropping the bus leaves no inbox behind.
    drop(requester);
    assert!(
        eventually(Duration::from_secs(10), || inboxes(&mut client, &prefix)
            .is_empty())
        .await,
        "inboxes left: {:?}",
        inboxes(&mut client, &prefix)
    );
    kill(&mut responder);
}

/// A requester that dies without deleting its inbox leaves at most a list with an
/// expiry: every reply push sets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_nobody_reads_expires() {
    let redis = TestRedis::start().unwrap();
    let prefix = redis.namespace().to_owned();
    let config = RedisConfig::from_url(&redis.url())
        .unwrap()
        .prefix(&*prefix);
    let transport = RedisTransport::connect(&config).await.unwrap();
    transport
        .reply("gone", "{}".into(), defaults::REPLY_KEEP)
        .await
        .unwrap();
    let mut client = redis.client();
    let key = keys::reply_inbox(&prefix, "gone");
    let ttl = client.int(&["PTTL", key.as_str()]).unwrap();
    assert!(
        ttl > 0 && ttl <= defaults::REPLY_KEEP.as_millis() as i64,
        "PTTL {ttl}"
    );
    let refused = transport
        .reply("a:b}", "{}".into(), defaults::REPLY_KEEP)
        .await;
    assert!(
        matches!(refused, Err(Error::InvalidName { .. })),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_done_before_a_crash_is_skipped_by_the_redelivery() {
    let redis = TestRedis::start().unwrap();
    let (url, prefix) = (redis.url(), redis.namespace().to_owned());
    let mut client = redis.client();
    let bus = bus(&url, &prefix).await;

    let mut first = host(&url, &prefix);
    let first_pid = first.id();
    assert!(up(&mut client, &prefix, first_pid).await, "first host up");
    let id = bus.send(&Charge { order: 1 }).await.unwrap();
    let charged = eventually(Duration::from_secs(30), || {
        client.get(&charged_key(&prefix, 1)).unwrap().is_some()
    })
    .await;
    assert!(charged, "the first delivery did its step");
    // The step is done and marked; the ack never comes.
    kill(&mut first);

    let mut second = host(&url, &prefix);
    assert!(
        up(&mut client, &prefix, second.id()).await,
        "second host up"
    );
    // Redelivered once the dead host's lock (60 s by default) expires.
    let done = eventually(Duration::from_secs(180), || {
        client.len(&charge_done_key(&prefix)).unwrap() == 1
    })
    .await;
    assert!(done, "the message was redelivered and handled");
    let line = client.list(&charge_done_key(&prefix)).unwrap().remove(0);
    let line = String::from_utf8(line).unwrap();
    let fields: Vec<&str> = line.split(' ').collect();
    assert_eq!(fields[0], "1");
    assert_eq!(
        fields[1], "1",
        "the skipped step returned the stored result"
    );
    assert_eq!(fields[2], "2", "the second delivery: {line}");
    assert_ne!(fields[3], first_pid.to_string());
    let charges = client.get(&charges_key(&prefix, 1)).unwrap();
    assert_eq!(charges.as_deref(), Some(&b"1"[..]), "the step ran once");

    // The mark expires by itself.
    let source = Source::queue(<Charge as Message>::NAME).unwrap();
    let mark = keys::step_mark(&prefix, &source, id.as_str(), "charge");
    let ttl = client.int(&["PTTL", mark.as_str()]).unwrap();
    assert!(
        ttl > 0 && ttl <= defaults::ONCE_KEEP.as_millis() as i64,
        "PTTL of {mark}: {ttl}"
    );
    kill(&mut second);
}
