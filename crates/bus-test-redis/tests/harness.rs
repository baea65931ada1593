//! Integration tests against a real redis-server (Debian's `redis-server` package).

use bus_test_redis::{info_field, RedisCluster, RedisServer, Resp, SyncClient, TestRedis};

#[test]
fn set_and_get_through_sync_client() {
    let server = RedisServer::start().unwrap();
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    let mut c = server.client();
    c.set("k", "v1").unwrap();
    assert_eq!(c.get("k").unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(c.get("missing").unwrap(), None);
    // Raw byte commands and error replies.
    let reply = c.cmd(&[&b"APPEND"[..], b"k", b"\x00\xff"]).unwrap();
    assert_eq!(reply, Resp::Integer(4));
    assert!(matches!(c.cmd(&["INCR", "k"]).unwrap(), Resp::Error(e) if e.starts_with("ERR")));
    // The defaults: no AOF, no RDB save points.
    let aof = c.cmd(&["CONFIG", "GET", "appendonly"]).unwrap();
    assert_eq!(aof.as_array().unwrap()[1].as_str(), Some("no"));
    let save = c.cmd(&["CONFIG", "GET", "save"]).unwrap();
    assert_eq!(save.as_array().unwrap()[1].as_str(), Some(""));
    // The URL form of connect reaches the same server.
    let mut by_url = SyncClient::connect(server.url()).unwrap();
    assert_eq!(by_url.get("k").unwrap().unwrap().len(), 4);
}

#[test]
fn builder_args_are_passed_to_redis() {
    let server = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("noeviction")
        .start()
        .unwrap();
    let reply = server
        .client()
        .cmd(&["CONFIG", "GET", "maxmemory-policy"])
        .unwrap();
    assert_eq!(reply.as_array().unwrap()[1].as_str(), Some("noeviction"));
}

#[test]
fn appendonly_data_survives_restart_on_the_same_port() {
    let mut server = RedisServer::builder().appendonly(true).start().unwrap();
    let port = server.port();
    let pid = server.pid().unwrap();
    server.client().set("durable", "yes").unwrap();
    server.restart().unwrap();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid().unwrap(), pid, "a new process after restart");
    assert_eq!(
        server.client().get("durable").unwrap().as_deref(),
        Some(&b"yes"[..])
    );
}

#[test]
fn without_appendonly_restart_loses_data() {
    let mut server = RedisServer::start().unwrap();
    server.client().set("volatile", "x").unwrap();
    server.restart().unwrap();
    assert_eq!(server.client().get("volatile").unwrap(), None);
}

#[test]
fn kill_then_restart_works() {
    let mut server = RedisServer::builder().appendonly(true).start().unwrap();
    let port = server.port();
    server.kill();
    assert_eq!(server.pid(), None);
    assert!(
        SyncClient::connect(port)
            .and_then(|mut c| c.cmd(&["PING"]))
            .is_err(),
        "server must be gone after kill()"
    );
    server.restart().unwrap();
    assert_eq!(server.port(), port);
    let mut c = server.client();
    assert_eq!(c.cmd(&["PING"]).unwrap(), Resp::Simple("PONG".into()));
    c.set("after-crash", "1").unwrap();
}

#[test]
fn drop_stops_the_server_and_removes_its_dir() {
    let server = RedisServer::start().unwrap();
    let (port, dir) = (server.port(), server.dir().to_owned());
    assert!(dir.join("redis.log").exists());
    drop(server);
    assert!(!dir.exists());
    assert!(SyncClient::connect(port)
        .and_then(|mut c| c.cmd(&["PING"]))
        .is_err());
}

#[test]
fn test_redis_namespaces_are_distinct_and_drop_cleans_only_its_own() {
    let server = RedisServer::start().unwrap();
    let mut a = TestRedis::with_url(server.url()).unwrap();
    let mut b = TestRedis::with_url(server.url()).unwrap();
    assert_ne!(a.namespace(), b.namespace());
    for t in [&mut a, &mut b] {
        let ns = t.namespace();
        assert!(ns.starts_with("t-") && ns.len() == 28, "{ns}");
        assert_eq!(ns, ns.to_lowercase());
        assert!(t.server_mut().is_none(), "with_url starts no process");
    }

    let mut c = server.client();
    c.set("outside", "keep").unwrap();
    for i in 0..1500 {
        c.set(&a.key(&format!("k{i}")), "a").unwrap();
    }
    c.set(&b.key("k"), "b").unwrap();
    assert_eq!(a.keys().len(), 1500);
    assert_eq!(b.keys(), vec![b.key("k")]);

    drop(a);
    assert_eq!(c.scan_match("t-*").unwrap(), vec![b.key("k")]);
    assert_eq!(c.get("outside").unwrap().as_deref(), Some(&b"keep"[..]));
    drop(b);
    assert!(c.scan_match("t-*").unwrap().is_empty());
    assert_eq!(c.get("outside").unwrap().as_deref(), Some(&b"keep"[..]));
}

#[test]
fn test_redis_drop_never_panics_when_the_server_is_gone() {
    let server = RedisServer::start().unwrap();
    let t = TestRedis::with_url(server.url()).unwrap();
    t.client().set(&t.key("x"), "1").unwrap();
    drop(server);
    drop(t);
    assert!(TestRedis::with_url("redis://127.0.0.1:1").is_err());
}

#[test]
fn test_redis_start_gives_a_private_server_or_the_env_url() {
    let mut t = TestRedis::start().unwrap();
    let env = std::env::var("BUS_TEST_REDIS_URL").unwrap_or_default();
    if env.trim().is_empty() {
        let port = t.server_mut().expect("a private server").port();
        assert_eq!(t.url(), format!("redis://127.0.0.1:{port}"));
    } else {
        assert!(t.server_mut().is_none());
        assert_eq!(t.url(), env.trim());
    }
    t.client().set(&t.key("x"), "1").unwrap();
    assert_eq!(t.keys(), vec![t.key("x")]);
}

#[test]
fn cluster_of_three_masters_is_ok_on_every_node() {
    let cluster = RedisCluster::start().unwrap();
    let [p1, p2, p3] = cluster.ports();
    assert_eq!(
        cluster.url(),
        format!("redis-cluster://127.0.0.1:{p1}?node=127.0.0.1:{p2}&node=127.0.0.1:{p3}")
    );
    for node in cluster.nodes() {
        let mut c = node.client();
        let info = c.cmd(&["CLUSTER", "INFO"]).unwrap();
        let info = info.as_str().unwrap();
        assert_eq!(info_field(info, "cluster_state"), Some("ok"), "{info}");
        assert_eq!(info_field(info, "cluster_size"), Some("3"), "{info}");
        assert_eq!(info_field(info, "cluster_slots_assigned"), Some("16384"));

        // CLUSTER SLOTS: every range is served by one of our three ports, and all three serve.
        let slots = c.cmd(&["CLUSTER", "SLOTS"]).unwrap();
        let mut masters: Vec<i64> = slots
            .as_array()
            .unwrap()
            .iter()
            .map(|range| {
                range.as_array().unwrap()[2].as_array().unwrap()[1]
                    .as_int()
                    .unwrap()
            })
            .collect();
        masters.sort();
        masters.dedup();
        let mut expected = vec![i64::from(p1), i64::from(p2), i64::from(p3)];
        expected.sort();
        assert_eq!(masters, expected);
    }
    // A key lands on exactly one master; the others redirect with MOVED.
    let replies: Vec<Resp> = cluster
        .nodes()
        .iter()
        .map(|n| n.client().cmd(&["SET", "some-key", "v"]).unwrap())
        .collect();
    assert_eq!(
        replies.iter().filter(|r| r.is_ok()).count(),
        1,
        "{replies:?}"
    );
    assert_eq!(
        replies
            .iter()
            .filter(|r| matches!(r, Resp::Error(e) if e.starts_with("MOVED")))
            .count(),
        2
    );
}
