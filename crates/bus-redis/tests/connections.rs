//! Connection strings for real: ACL users, database ids, wrong passwords, Redis Cluster.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bus_core::{
    CommandProcessor, Context, EventProcessor, EventSubscription, Host, ProcessError, RedisCommand,
    RedisEvent,
};
use bus_redis::{Error, RedisConfig, RedisTransport};
use bus_test_redis::{RedisCluster, RedisServer};
use common::{eventually, Running, Work};
use serde::{Deserialize, Serialize};

#[derive(Default)]
struct Seen(Mutex<Vec<String>>);

#[async_trait]
impl CommandProcessor<Work> for Arc<Seen> {
    async fn process(&self, work: Work, _: &Context) -> Result<(), ProcessError> {
        self.0.lock().unwrap().push(format!("work {}", work.n));
        Ok(())
    }
}

/// A server whose only usable account is the ACL user `app` with password `s3cret`.
fn acl_server() -> RedisServer {
    let server = RedisServer::start().unwrap();
    let mut admin = server.client();
    for command in [
        &[
            "ACL", "SETUSER", "app", "on", ">s3cret", "~*", "&*", "+@all",
        ][..],
        &["ACL", "SETUSER", "default", "off"],
    ] {
        let reply = admin.cmd(command).unwrap();
        assert!(reply.is_ok(), "{command:?}: {reply:?}");
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_a_database_id_connects_and_processes() {
    let server = acl_server();
    let url = format!("redis://app:s3cret@127.0.0.1:{}/3", server.port());
    let config = RedisConfig::from_url(&url).unwrap();
    assert!(!format!("{config:?}").contains("s3cret"), "{config:?}");
    let seen = Arc::new(Seen::default());
    let host = Host::builder()
        .transport(RedisTransport::connect(&config).await.unwrap())
        .command::<Work, _>(Arc::clone(&seen))
        .build()
        .unwrap();
    let running = Running::start(host);
    running.bus.send(&Work { n: 7 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            seen.0.lock().unwrap().len() == 1
        })
        .await
    );
    running.stop().await;
    // The keys went to database 3.
    let mut client = server.client();
    let auth = client.cmd(&["AUTH", "app", "s3cret"]).unwrap();
    assert!(auth.is_ok(), "{auth:?}");
    client.cmd(&["SELECT", "3"]).unwrap();
    let registry = client
        .cmd(&[
            "SMEMBERS",
            &bus_redis::keys::queue_registry(bus_redis::keys::DEFAULT_PREFIX),
        ])
        .unwrap();
    assert_eq!(registry.as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_wrong_password_is_a_clear_error() {
    let server = acl_server();
    let url = format!("redis://app:wrong@127.0.0.1:{}", server.port());
    let err = RedisTransport::connect(&RedisConfig::from_url(&url).unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("credentials"), "{text}");
    assert!(
        !text.contains("wrong"),
        "the password leaked into the error: {text}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_named_in_a_sentence() {
    // A port nothing listens on: bind one, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://app:secret@127.0.0.1:{port}");
    let err = RedisTransport::connect(&RedisConfig::from_url(&url).unwrap())
        .await
        .unwrap_err();
    let chain = bus_core::ErrorChain(&err).to_string();
    assert!(
        chain.starts_with(&format!("cannot connect to Redis at 127.0.0.1:{port}: ")),
        "{chain}"
    );
    assert!(chain.contains("refused"), "{chain}");
    for debug in ["Os {", "kind:", "code:", "secret"] {
        assert!(!chain.contains(debug), "{debug:?} in {chain}");
    }
}

#[test]
fn bad_connection_strings_are_refused_clearly() {
    let err = RedisConfig::from_url("http://127.0.0.1").unwrap_err();
    assert!(err.to_string().contains("invalid Redis URL"), "{err}");
    if !cfg!(feature = "tls") {
        let err = RedisConfig::from_url("rediss://127.0.0.1:6380").unwrap_err();
        assert!(err.to_string().contains("tls"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_key_prefix_is_refused() {
    let config = RedisConfig::from_url("redis://127.0.0.1:1")
        .unwrap()
        .prefix("a{b}");
    let err = RedisTransport::connect(&config).await.unwrap_err();
    assert!(err.to_string().contains("invalid key prefix"), "{err}");
}

#[derive(Debug, Serialize, Deserialize, RedisCommand)]
#[bus(queue = "second-queue")]
struct Other {
    n: u64,
}

#[derive(Debug, Serialize, Deserialize, RedisEvent)]
#[bus(topic = "cluster-topic")]
struct Happened {
    n: u64,
}

#[derive(EventSubscription)]
#[bus(event = Happened, name = "one")]
struct One;
#[derive(EventSubscription)]
#[bus(event = Happened, name = "two")]
struct Two;

#[async_trait]
impl CommandProcessor<Other> for Arc<Seen> {
    async fn process(&self, other: Other, _: &Context) -> Result<(), ProcessError> {
        self.0.lock().unwrap().push(format!("other {}", other.n));
        Ok(())
    }
}

macro_rules! subscriber {
    ($sub:ty, $name:literal) => {
        #[async_trait]
        impl EventProcessor<$sub> for Arc<Seen> {
            async fn process(&self, event: Happened, _: &Context) -> Result<(), ProcessError> {
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("{} {}", $name, event.n));
                Ok(())
            }
        }
    };
}
subscriber!(One, "one");
subscriber!(Two, "two");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_and_events_work_on_a_three_master_cluster() {
    let cluster = RedisCluster::start().unwrap();
    let config = RedisConfig::from_url(&cluster.url()).unwrap();
    let seen = Arc::new(Seen::default());
    let host = Host::builder()
        .transport(RedisTransport::connect(&config).await.unwrap())
        .command::<Work, _>(Arc::clone(&seen))
        .command::<Other, _>(Arc::clone(&seen))
        .event::<One, _>(Arc::clone(&seen))
        .event::<Two, _>(Arc::clone(&seen))
        .build()
        .unwrap();
    let running = Running::start(host);
    let works: Vec<Work> = (0..100).map(|n| Work { n }).collect();
    let others: Vec<Other> = (0..100).map(|n| Other { n }).collect();
    running.bus.send_batch(&works).await.unwrap();
    running.bus.send_batch(&others).await.unwrap();
    // Subscriptions register when their consumers start.
    let transport = RedisTransport::connect(&config).await.unwrap();
    let subs_key = bus_redis::keys::subscriptions("bus", "cluster-topic");
    assert!(
        eventually(Duration::from_secs(10), || async {
            let n: i64 = fred::prelude::SetsInterface::scard(transport.client(), &subs_key)
                .await
                .unwrap();
            n == 2
        })
        .await
    );
    running.bus.publish(&Happened { n: 1 }).await.unwrap();
    assert!(
        eventually(Duration::from_secs(20), || async {
            seen.0.lock().unwrap().len() == 202
        })
        .await,
        "{} handled",
        seen.0.lock().unwrap().len()
    );
    running.stop().await;
    let seen = seen.0.lock().unwrap();
    assert!(seen.contains(&"one 1".to_owned()) && seen.contains(&"two 1".to_owned()));
    // The two queues' tags hash to different slots, and so, here, to different masters.
    let slot = |tag: &str| {
        let mut c = bus_test_redis::SyncClient::connect(cluster.ports()[0]).unwrap();
        c.cmd(&["CLUSTER", "KEYSLOT", tag])
            .unwrap()
            .as_int()
            .unwrap()
    };
    assert_ne!(slot("work"), slot("second-queue"));
}
