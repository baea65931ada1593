//! The scripts as a protocol (docs/wire-format.md): called the way a foreign client calls
//! them, EVAL of `lua/*.lua` with raw KEYS and ARGV, a lease index in any spelling but the
//! exact decimal is a stale receipt that changes nothing, and a call of the wrong shape (a
//! client of another protocol version) is refused before any write. And the protocol
//! version recorded in Redis, checked on connect.

use bus_core::transport::Source;
use bus_redis::keys::{self, QueueKeys};
use bus_redis::{Error, RedisConfig, RedisTransport, PROTOCOL};
use bus_test_redis::{RedisServer, Resp, SyncClient, TestRedis};
use std::collections::BTreeMap;

const COMMON: &str = include_str!("../lua/common.lua");
const ADMIN_COMMON: &str = include_str!("../lua/admin_common.lua");
const FLOW: &str = include_str!("../lua/flow.lua");
const KEYED: &str = include_str!("../lua/keyed.lua");
const SCRIPTS: &[(&str, &str)] = &[
    ("reserve", include_str!("../lua/reserve.lua")),
    ("reserve_alone", include_str!("../lua/reserve_alone.lua")),
    ("ack", include_str!("../lua/ack.lua")),
    ("renew", include_str!("../lua/renew.lua")),
    ("retry", include_str!("../lua/retry.lua")),
    ("dead_letter", include_str!("../lua/dead_letter.lua")),
    ("release", include_str!("../lua/release.lua")),
    ("recover", include_str!("../lua/recover.lua")),
    ("absolve", include_str!("../lua/absolve.lua")),
    ("breaker_trip", include_str!("../lua/breaker_trip.lua")),
    ("breaker_hold", include_str!("../lua/breaker_hold.lua")),
    ("send_at", include_str!("../lua/send_at.lua")),
    ("send_keyed", include_str!("../lua/send_keyed.lua")),
    ("send_keyed_at", include_str!("../lua/send_keyed_at.lua")),
    ("send_once", include_str!("../lua/send_once.lua")),
    (
        "send_once_batch",
        include_str!("../lua/send_once_batch.lua"),
    ),
    ("send_tick", include_str!("../lua/send_tick.lua")),
    ("cancel", include_str!("../lua/cancel.lua")),
    ("reschedule", include_str!("../lua/reschedule.lua")),
    ("read_scheduled", include_str!("../lua/read_scheduled.lua")),
    ("publish", include_str!("../lua/publish.lua")),
    ("publish_at", include_str!("../lua/publish_at.lua")),
    ("reply", include_str!("../lua/reply.lua")),
    (
        "singleton_acquire",
        include_str!("../lua/singleton_acquire.lua"),
    ),
    (
        "singleton_renew",
        include_str!("../lua/singleton_renew.lua"),
    ),
    (
        "singleton_release",
        include_str!("../lua/singleton_release.lua"),
    ),
    (
        "admin_dead_envelopes",
        include_str!("../lua/admin_dead_envelopes.lua"),
    ),
    (
        "admin_delete_dead",
        include_str!("../lua/admin_delete_dead.lua"),
    ),
    (
        "admin_in_flight",
        include_str!("../lua/admin_in_flight.lua"),
    ),
    ("admin_move", include_str!("../lua/admin_move.lua")),
    ("admin_purge", include_str!("../lua/admin_purge.lua")),
    ("admin_requeue", include_str!("../lua/admin_requeue.lua")),
    ("admin_stats", include_str!("../lua/admin_stats.lua")),
    (
        "admin_key_backlogs",
        include_str!("../lua/admin_key_backlogs.lua"),
    ),
    (
        "admin_unsubscribe",
        include_str!("../lua/admin_unsubscribe.lua"),
    ),
];

/// The script's text as docs/wire-format.md "Loading a script" builds it: the whole of
/// each prelude file the docs' table lists for it (the bus's own list, checked against
/// the table by tests/scripts.rs), then its file.
fn text(name: &str) -> String {
    let body = SCRIPTS.iter().find(|(n, _)| *n == name).unwrap().1;
    let script = bus_redis::raw::catalog()
        .into_iter()
        .find(|s| s.name() == name)
        .unwrap();
    let shebang = if script.allow_oom() {
        "#!lua flags=allow-oom\n"
    } else {
        ""
    };
    let preludes: String = script
        .preludes()
        .iter()
        .map(|prelude| match *prelude {
            "common" => COMMON,
            "keyed" => KEYED,
            "flow" => FLOW,
            "admin_common" => ADMIN_COMMON,
            other => panic!("an unknown prelude {other}"),
        })
        .collect();
    format!("{shebang}{preludes}{body}")
}

/// The consumer id this test's calls record as the holder of their locks.
const HOLDER: &str = "test-holder";

/// One queue driven by hand, as a foreign client drives it.
struct Queue {
    client: SyncClient,
    k: QueueKeys,
    subs: String,
    singleton: String,
    inbox: String,
    orphans: String,
}

impl Queue {
    fn new(redis: &TestRedis, name: &str) -> Queue {
        Queue {
            client: redis.client(),
            k: QueueKeys::new(redis.namespace(), &Source::queue(name).unwrap()),
            subs: keys::subscriptions(redis.namespace(), name),
            singleton: keys::singleton(redis.namespace(), name),
            inbox: keys::reply_inbox(redis.namespace(), name),
            orphans: QueueKeys::new(redis.namespace(), &Source::queue(name).unwrap())
                .attachment_orphans(),
        }
    }

    /// A queue ordered per key, at most `per_key` messages of a key in flight.
    fn ordered(redis: &TestRedis, name: &str, per_key: u32) -> Queue {
        let mut q = Queue::new(redis, name);
        let flow = q.k.flow.clone();
        q.cmd(&["HSET", &flow, "per_key", &per_key.to_string()]);
        q
    }

    /// The KEYS of `script`, in docs/wire-format.md's order.
    fn keys(&self, script: &str) -> Vec<String> {
        let k = &self.k;
        let dedup = k.dedup("shape");
        let schedule = k.schedule("shape");
        let list: Vec<&String> = match script {
            "reserve" => vec![
                &k.ready,
                &k.msgs,
                &k.deliveries,
                &k.inflight,
                &k.delayed,
                &k.seq,
                &k.dead_info,
                &k.suspects,
                &k.leases,
                &k.leased,
                &k.flow,
                &k.flow_starts,
                &k.kheads,
                &k.kbusy,
                &k.kq,
                &k.kdue,
                &k.kwait,
                &k.kstarts,
                &k.holders,
                &k.kready,
            ],
            "reserve_alone" => vec![
                &k.suspects,
                &k.msgs,
                &k.deliveries,
                &k.inflight,
                &k.isolated,
                &k.leased,
                &k.flow,
                &k.flow_starts,
                &k.holders,
            ],
            "ack" => vec![
                &k.inflight,
                &k.msgs,
                &k.deliveries,
                &k.errors,
                &k.isolated,
                &k.leases,
                &k.leased,
                &k.kof,
                &k.kbusy,
                &k.kheads,
                &k.kq,
                &k.ready,
                &k.holders,
            ],
            "renew" => vec![&k.inflight, &k.deliveries, &k.leases, &k.seen, &k.since],
            "retry" => vec![
                &k.inflight,
                &k.deliveries,
                &k.errors,
                &k.ready,
                &k.delayed,
                &k.isolated,
                &k.msgs,
                &k.leases,
                &k.leased,
                &k.holders,
                &k.kof,
            ],
            "dead_letter" => vec![
                &k.inflight,
                &k.deliveries,
                &k.errors,
                &k.dead,
                &k.dead_info,
                &k.isolated,
                &k.msgs,
                &k.leases,
                &k.leased,
                &k.flow,
                &k.kof,
                &k.kbusy,
                &k.kheads,
                &k.kq,
                &k.ready,
                &k.holders,
            ],
            "release" => vec![
                &k.inflight,
                &k.deliveries,
                &k.ready,
                &k.isolated,
                &k.suspects,
                &k.leases,
                &k.leased,
                &k.holders,
                &k.msgs,
                &k.kof,
            ],
            "recover" => vec![
                &k.inflight,
                &k.deliveries,
                &k.errors,
                &k.suspects,
                &k.dead,
                &k.dead_info,
                &k.isolated,
                &k.msgs,
                &k.leases,
                &k.leased,
                &k.flow,
                &k.kof,
                &k.kbusy,
                &k.kheads,
                &k.kq,
                &k.ready,
                &k.holders,
                &k.seen,
                &k.since,
            ],
            "absolve" => vec![&k.suspects, &k.ready],
            "breaker_trip" | "breaker_hold" => vec![&k.flow],
            "send_at" => vec![&k.delayed, &k.msgs, &k.ready],
            "send_keyed" => vec![
                &k.ready, &k.flow, &k.kheads, &k.kbusy, &k.kq, &k.delayed, &k.msgs, &k.kdue,
            ],
            "send_keyed_at" => vec![&k.delayed, &k.msgs, &k.ready, &k.flow, &k.kdue],
            "send_once" => vec![&dedup, &k.ready, &k.delayed, &k.msgs],
            "send_once_batch" => vec![&k.ready, &k.delayed, &k.msgs, &dedup],
            "send_tick" => vec![&schedule, &k.ready],
            "cancel" => vec![&k.delayed, &k.msgs, &k.deliveries, &k.errors, &k.kdue],
            "reschedule" => vec![&k.delayed, &k.ready],
            "read_scheduled" => vec![&k.delayed, &k.msgs],
            "publish" => vec![&self.subs, &k.ready],
            "publish_at" => vec![&self.subs, &k.delayed, &k.msgs, &k.ready],
            "singleton_acquire" | "singleton_renew" | "singleton_release" => {
                vec![&self.singleton]
            }
            "reply" => vec![&self.inbox],
            "admin_dead_envelopes" => vec![&k.dead, &k.msgs],
            "admin_delete_dead" => vec![
                &k.dead,
                &k.msgs,
                &k.dead_info,
                &k.errors,
                &k.deliveries,
                &k.kof,
                &k.kbusy,
                &k.kheads,
                &k.kq,
                &k.ready,
                &self.orphans,
            ],
            "admin_in_flight" => vec![&k.inflight, &k.msgs, &k.deliveries, &k.leases],
            "admin_move" => vec![
                &k.dead,
                &k.msgs,
                &k.dead_info,
                &k.errors,
                &k.deliveries,
                &k.ready,
                &k.kof,
                &k.kbusy,
                &k.kheads,
                &k.kq,
                &k.ready,
            ],
            "admin_purge" => vec![
                &k.ready,
                &k.delayed,
                &k.msgs,
                &k.deliveries,
                &k.errors,
                &k.inflight,
                &k.dead_info,
                &k.suspects,
                &k.flow,
                &k.kheads,
                &k.kbusy,
                &k.kq,
                &k.kdue,
                &k.kwait,
                &k.kof,
                &k.kready,
            ],
            "admin_requeue" => vec![&k.dead, &k.msgs, &k.dead_info, &k.deliveries, &k.ready],
            "admin_key_backlogs" => vec![&k.kheads, &k.kbusy, &k.kq, &k.kwait, &k.kready],
            "admin_stats" => vec![
                &k.ready,
                &k.inflight,
                &k.delayed,
                &k.dead,
                &k.msgs,
                &k.suspects,
                &k.leases,
                &k.leased,
                &k.flow,
            ],
            "admin_unsubscribe" => {
                // The counted keys first, then every other key of the queue, as
                // `Admin::unsubscribe` sends them: the script's count follows
                // `QueueKeys::all`, so a key added there must be added to its shape.
                let counted = [
                    &k.ready,
                    &k.inflight,
                    &k.delayed,
                    &k.dead,
                    &k.leases,
                    &k.leased,
                ];
                let rest: Vec<String> = k
                    .all()
                    .into_iter()
                    .filter(|key| !counted.iter().any(|c| c.as_str() == *key))
                    .map(str::to_owned)
                    .collect();
                return std::iter::once(&self.subs)
                    .chain(counted)
                    .cloned()
                    .chain(rest)
                    .chain([k.kq.clone(), k.kstarts.clone()])
                    .collect();
            }
            other => panic!("no script {other}"),
        };
        list.into_iter().cloned().collect()
    }

    fn eval<A: AsRef<[u8]>>(&mut self, script: &str, keys: &[String], argv: &[A]) -> Resp {
        let mut args: Vec<Vec<u8>> = vec![
            b"EVAL".to_vec(),
            text(script).into_bytes(),
            keys.len().to_string().into_bytes(),
        ];
        args.extend(keys.iter().map(|k| k.as_bytes().to_vec()));
        args.extend(argv.iter().map(|a| a.as_ref().to_vec()));
        self.client.cmd(&args).unwrap()
    }

    fn call(&mut self, script: &str, argv: &[&str]) -> Resp {
        let keys = self.keys(script);
        self.eval(script, &keys, argv)
    }

    /// `ack` of lease groups `(token, bits)` and no stored receipt.
    fn ack_bits(&mut self, groups: &[(&str, &[u8])]) -> Resp {
        let keys = self.keys("ack");
        let mut argv: Vec<&[u8]> = Vec::new();
        let l = groups.len().to_string();
        argv.extend([&b"0"[..], l.as_bytes()]);
        for (token, bits) in groups {
            argv.extend([token.as_bytes(), bits]);
        }
        self.eval("ack", &keys, &argv)
    }

    fn cmd(&mut self, args: &[&str]) -> Resp {
        self.client.cmd(args).unwrap()
    }

    /// Reserves up to `max` (lock `lock_ms`): the lease token (if any) and the stored
    /// messages' receipts `(id, count)`.
    fn reserve(&mut self, max: u32, lock_ms: u64) -> (Option<String>, Vec<(String, String)>) {
        let reply = self.call(
            "reserve",
            &[&max.to_string(), &lock_ms.to_string(), HOLDER, "1000"],
        );
        let items = reply.as_array().unwrap_or_else(|| panic!("{reply:?}"));
        let token = items[2].as_str().map(str::to_owned);
        let stored = items[4..]
            .chunks(4)
            .map(|q| {
                let count = q[2].as_int().unwrap().to_string();
                (q[1].as_str().unwrap().to_owned(), count)
            })
            .collect();
        (token, stored)
    }

    /// A reserve whose messages are all leased (fresh envelopes, keyed messages): the
    /// lease's token and the number of its messages.
    fn reserve_leased(&mut self, max: u32, lock_ms: u64) -> (String, usize) {
        let reply = self.call(
            "reserve",
            &[&max.to_string(), &lock_ms.to_string(), HOLDER, "1000"],
        );
        let items = reply.as_array().unwrap_or_else(|| panic!("{reply:?}"));
        assert_eq!(items.len(), 4, "only leased messages: {reply:?}");
        let token = items[2]
            .as_str()
            .unwrap_or_else(|| panic!("a lease: {reply:?}"));
        (token.to_owned(), items[3].as_array().unwrap().len())
    }

    /// Acks messages `indices` of lease `token`; returns how many it acked.
    fn ack_leased(&mut self, token: &str, indices: &[usize]) -> i64 {
        self.ack_bits(&[(token, &bits(indices))]).as_int().unwrap()
    }

    /// A list's elements, as text.
    fn list(&mut self, key: &str) -> Vec<String> {
        let reply = self.cmd(&["LRANGE", key, "0", "-1"]);
        let items = reply.as_array().unwrap_or_else(|| panic!("{reply:?}"));
        items
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect()
    }

    fn push(&mut self, elements: &[&str]) {
        let ready = self.k.ready.clone();
        let mut args = vec!["RPUSH", ready.as_str()];
        args.extend_from_slice(elements);
        self.cmd(&args);
    }

    /// Every key of this queue (its leases' lists and sets included), serialised with
    /// DUMP: equal snapshots mean nothing was written.
    fn snapshot(&mut self) -> BTreeMap<String, Vec<u8>> {
        let pattern = format!("{}*", self.k.ready.trim_end_matches("ready"));
        let mut keys = self.client.scan_match(&pattern).unwrap();
        keys.push(self.subs.clone());
        keys.push(self.inbox.clone());
        keys.into_iter()
            .filter_map(|key| {
                let dump = self.cmd(&["DUMP", &key]);
                dump.as_bytes().map(|b| (key, b.to_vec()))
            })
            .collect()
    }

    /// [`Queue::snapshot`] without the callers' presence (`seen`, `since`), which a renew
    /// records whatever its receipts say: what the queue holds of its messages.
    fn messages_snapshot(&mut self) -> BTreeMap<String, Vec<u8>> {
        let mut snapshot = self.snapshot();
        snapshot.remove(&self.k.seen);
        snapshot.remove(&self.k.since);
        snapshot
    }
}

/// A lease group's bits for `indices`: bit i, the high bit of each byte first.
fn bits(indices: &[usize]) -> Vec<u8> {
    let mut bits = vec![0u8; indices.iter().max().map_or(0, |i| i / 8 + 1)];
    for i in indices {
        bits[i / 8] |= 0x80 >> (i % 8);
    }
    bits
}

fn envelope(n: u32) -> String {
    format!(r#"{{"v":1,"id":"m{n}","type":"jobs","sent":1,"body":{{"n":{n}}}}}"#)
}

/// Spellings of a lease index that reserve never hands out; each names no message.
const SPELLINGS: &[&str] = &[
    "01", "1.0", "+1", " 1", "1 ", "-0", "00", "-1", "1e0", "0x1", "", "3", "999", "1000",
];

#[test]
fn a_lease_index_in_another_spelling_is_a_stale_receipt_that_changes_nothing() {
    let redis = TestRedis::start().unwrap();
    for (case, spelling) in SPELLINGS.iter().enumerate() {
        for script in ["retry", "dead_letter", "release"] {
            let mut q = Queue::new(&redis, &format!("q{case}-{script}"));
            q.push(&[&envelope(0), &envelope(1), &envelope(2)]);
            let (token, _) = q.reserve(10, 60_000);
            let token = token.unwrap();
            let before = q.snapshot();
            let reply = match script {
                "retry" => q.call("retry", &[&token, spelling, "0", "boom"]),
                "dead_letter" => q.call("dead_letter", &[&token, spelling, "rejected", "boom"]),
                _ => q.call("release", &[&token, spelling]),
            };
            assert_eq!(
                reply,
                Resp::Integer(0),
                "{script} with index {spelling:?}: a stale receipt answers 0"
            );
            assert_eq!(
                q.snapshot(),
                before,
                "{script} with index {spelling:?} changed the queue"
            );
        }
    }
}

/// Bits of `ack` that name no message of a lease of three: each index from 3 on, in the
/// lease's last byte or past it.
const STALE_BITS: &[&[u8]] = &[
    &[0b0001_0000],
    &[0b0000_0001],
    &[0b0001_1111],
    &[0, 0b1000_0000],
    &[0, 0, 0, 0xff],
    &[0],
    &[],
];

/// Acks `stale` alone on a lease of three (stale: it answers 0 and changes nothing), then
/// `stale` beside indices 0 and 2 (those two are acked).
fn ack_stale_then_beside_valid(q: &mut Queue, token: &str, stale: &[u8]) {
    let before = q.snapshot();
    assert_eq!(q.ack_bits(&[(token, stale)]), Resp::Integer(0), "{stale:?}");
    assert_eq!(q.snapshot(), before, "bits {stale:?} changed the queue");
    let mut mixed = stale.to_vec();
    mixed.resize(mixed.len().max(1), 0);
    mixed[0] |= 0b1010_0000;
    assert_eq!(
        q.ack_bits(&[(token, &mixed)]),
        Resp::Integer(2),
        "0, 2 and {stale:?}"
    );
}

#[test]
fn an_ack_bit_past_the_lease_is_a_stale_receipt_that_changes_nothing() {
    let redis = TestRedis::start().unwrap();
    for (case, stale) in STALE_BITS.iter().enumerate() {
        let mut q = Queue::new(&redis, &format!("q{case}"));
        q.push(&[&envelope(0), &envelope(1), &envelope(2)]);
        let (token, _) = q.reserve(10, 60_000);
        let token = token.unwrap();
        // Beside valid bits, only the stale ones are: the lease keeps message 1 until it
        // is acked itself.
        ack_stale_then_beside_valid(&mut q, &token, stale);
        let (lease, done) = q.k.lease(&token);
        assert_eq!(
            q.cmd(&["LLEN", &lease]),
            Resp::Integer(3),
            "acking 0, 2 and {stale:?} completed the lease: message 1 was never acked"
        );
        assert_eq!(q.cmd(&["BITCOUNT", &done]), Resp::Integer(2));
        assert_eq!(q.cmd(&["GET", &q.k.leased.clone()]).as_str(), Some("1"));
        assert_eq!(q.ack_leased(&token, &[1]), 1);
        let left: Vec<String> = q.snapshot().into_keys().collect();
        assert_eq!(left, [q.k.seq.clone()], "after acking all three");
    }
}

/// The same on a lease of keyed messages: a stale bit settles nothing and frees no key;
/// the valid ones beside it do.
#[test]
fn a_keyed_lease_bit_past_the_lease_is_stale_and_frees_no_key() {
    let redis = TestRedis::start().unwrap();
    for (case, stale) in STALE_BITS.iter().enumerate() {
        let mut q = Queue::ordered(&redis, &format!("k{case}"), 1);
        let k = q.k.clone();
        for key in ["a", "b", "c"] {
            q.call("send_keyed", &[key, &envelope(0), &envelope(1)]);
        }
        let (token, n) = q.reserve_leased(10, 60_000);
        assert_eq!(n, 3, "one head of each key");
        ack_stale_then_beside_valid(&mut q, &token, stale);
        // a's and c's second messages became heads; b still holds its slot with its first.
        assert_eq!(q.cmd(&["LLEN", &k.kheads]), Resp::Integer(4));
        assert_eq!(q.cmd(&["LLEN", &k.key_queue("b")]), Resp::Integer(1));
        assert_eq!(q.ack_leased(&token, &[1]), 1);
        assert_eq!(
            q.cmd(&["LLEN", &k.kheads]),
            Resp::Integer(6),
            "b's second too"
        );
    }
}

/// A keyed message acked twice, in one call or in two, gives its key's slot back once:
/// its key's next message becomes a head once, and the second ack settles nothing.
#[test]
fn a_keyed_message_acked_twice_frees_its_slot_once() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::ordered(&redis, "twice", 1);
    let k = q.k.clone();
    for key in ["a", "b"] {
        q.call(
            "send_keyed",
            &[key, &envelope(0), &envelope(1), &envelope(2)],
        );
    }
    let (token, n) = q.reserve_leased(10, 60_000);
    assert_eq!(n, 2, "one head of each key");
    // Index 0 twice in one call, in two groups of its lease (the lease's first call: no
    // `done` yet).
    assert_eq!(
        q.ack_bits(&[(&token, &bits(&[0])), (&token, &bits(&[0]))]),
        Resp::Integer(1)
    );
    assert_eq!(
        q.cmd(&["LLEN", &k.kheads]),
        Resp::Integer(2),
        "one new head"
    );
    assert_eq!(q.cmd(&["LLEN", &k.key_queue("a")]), Resp::Integer(1));
    // Again in a later call (`done` exists now): stale, nothing moves.
    let before = q.snapshot();
    assert_eq!(q.ack_leased(&token, &[0]), 0);
    assert_eq!(
        q.snapshot(),
        before,
        "a second ack of index 0 changed the queue"
    );
    // b's first, acked with a's again: only b's slot passes on.
    assert_eq!(q.ack_leased(&token, &[0, 1]), 1);
    assert_eq!(
        q.cmd(&["LLEN", &k.kheads]),
        Resp::Integer(4),
        "b's second too"
    );
    assert_eq!(q.cmd(&["LLEN", &k.key_queue("a")]), Resp::Integer(1));
    assert_eq!(q.cmd(&["LLEN", &k.key_queue("b")]), Resp::Integer(1));
}

/// A lease that a protocol-9 consumer left keeps its `done` as a set of indices: protocol
/// 10's scripts read it as it is, and rewrite it as bits when they write to it.
#[test]
fn a_done_set_that_protocol_9_left_is_read_and_rewritten_as_bits() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "legacy");
    q.push(&[&envelope(0), &envelope(1), &envelope(2), &envelope(3)]);
    let (token, _) = q.reserve(10, 60_000);
    let token = token.unwrap();
    let (_, done) = q.k.lease(&token);
    let leased = q.k.leased.clone();
    // What protocol 9's ack of index 0 left.
    q.cmd(&["SADD", &done, "0"]);
    q.cmd(&["DECRBY", &leased, "1"]);
    let in_flight = |q: &mut Queue| {
        let reply = q.call("admin_in_flight", &["10"]);
        let fields = reply.as_array().unwrap().to_vec();
        fields
            .chunks(4)
            .map(|m| m[0].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let first: u64 = token[2..].parse().unwrap();
    let id = |i: u64| format!("~{}", first + i);
    assert_eq!(in_flight(&mut q), [id(1), id(2), id(3)], "read as a set");
    // A retry of index 1 (in a minute) writes: the set becomes bits 0 and 1.
    assert_eq!(
        q.call("retry", &[&token, "1", "60000", "boom"]),
        Resp::Integer(1)
    );
    assert_eq!(q.cmd(&["TYPE", &done]).as_str(), Some("string"));
    assert_eq!(q.cmd(&["GET", &done]).as_bytes(), Some(&[0b1100_0000][..]));
    assert_eq!(in_flight(&mut q), [id(2), id(3)], "read as bits");
    // An ack too: index 0 again is stale.
    q.cmd(&["DEL", &done]);
    q.cmd(&["SADD", &done, "0", "1"]);
    assert_eq!(q.ack_leased(&token, &[0, 2]), 1);
    assert_eq!(q.cmd(&["GET", &done]).as_bytes(), Some(&[0b1110_0000][..]));
    assert_eq!(q.ack_leased(&token, &[3]), 1);
    assert_eq!(
        q.cmd(&["EXISTS", &done]),
        Resp::Integer(0),
        "the lease is done"
    );
    assert_eq!(q.cmd(&["EXISTS", &leased]), Resp::Integer(0));

    // Recovery stores the messages the set does not name, and no other.
    q.push(&[&envelope(4), &envelope(5), &envelope(6)]);
    let (token, _) = q.reserve(10, 0);
    let token = token.unwrap();
    let (_, done) = q.k.lease(&token);
    q.cmd(&["SADD", &done, "1"]);
    q.cmd(&["DECRBY", &leased, "1"]);
    assert_eq!(
        q.call("recover", &["5", "100", "lost", HOLDER, "0"]),
        Resp::Integer(2)
    );
    let first: u64 = token[2..].parse().unwrap();
    let suspects = q.k.suspects.clone();
    assert_eq!(
        q.list(&suspects),
        [format!("~{first}"), format!("~{}", first + 2)]
    );
}

/// `Admin::presence` reads a lease's `done` in either form: a leased message whose index
/// it names has left the lease (here acked: gone), one it does not name is still held.
#[tokio::test]
async fn presence_reads_a_done_of_either_protocol() {
    use bus_core::transport::Receipt;
    use bus_redis::admin::{Admin, Presence};
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "presence");
    q.push(&[&envelope(0), &envelope(1)]);
    let (token, _) = q.reserve(10, 60_000);
    let token = token.unwrap();
    let (_, done) = q.k.lease(&token);
    let transport = RedisTransport::connect(&config(&redis.url(), redis.namespace()))
        .await
        .unwrap();
    let admin = Admin::new(transport);
    let source = Source::queue("presence").unwrap();
    let of = |index| Receipt::leased(token.clone().into_bytes().into(), index);
    // Where messages 0 and 1 of the lease are.
    let both = || async {
        (
            admin.presence(&source, &of(0)).await.unwrap(),
            admin.presence(&source, &of(1)).await.unwrap(),
        )
    };
    // Protocol 9's set, naming index 0.
    q.cmd(&["SADD", &done, "0"]);
    assert_eq!(both().await, (Presence::Gone, Presence::Held));
    // Protocol 10's bits, naming index 1.
    q.cmd(&["DEL", &done]);
    assert_eq!(q.ack_leased(&token, &[1]), 1);
    assert_eq!(both().await, (Presence::Held, Presence::Gone));
}

#[test]
fn a_stored_receipt_with_its_count_in_another_spelling_changes_nothing() {
    let redis = TestRedis::start().unwrap();
    for (case, spelling) in ["01", "1.0", "+1", " 1", "-1", "2"].iter().enumerate() {
        let mut q = Queue::new(&redis, &format!("s{case}"));
        // A foreign element is stored on reserve: its receipt is (storage id, count 1).
        q.push(&["not an envelope"]);
        let (_, stored) = q.reserve(10, 60_000);
        let id = stored[0].0.clone();
        let before = q.messages_snapshot();
        for (script, argv) in [
            ("ack", vec!["1", "0", &id, spelling]),
            ("renew", vec!["60000", HOLDER, "0", "1", &id, spelling]),
            ("retry", vec![&id, spelling, "0", "boom"]),
            ("dead_letter", vec![&id, spelling, "rejected", "boom"]),
            ("release", vec![&id, spelling]),
        ] {
            let reply = q.call(script, &argv);
            let expected = if script == "renew" {
                Resp::Array(Some(vec![Resp::Integer(0)]))
            } else {
                Resp::Integer(0)
            };
            assert_eq!(reply, expected, "{script} with count {spelling:?}");
            assert_eq!(
                q.messages_snapshot(),
                before,
                "{script} with count {spelling:?}"
            );
        }
    }
}

/// A queue with something in every structure: a lease of fresh envelopes and a stored
/// message in flight, ready elements, a delayed message, a dead letter, a subscription.
fn busy_queue(redis: &TestRedis, name: &str) -> (Queue, String, String) {
    let mut q = Queue::new(redis, name);
    q.cmd(&["SADD", &q.subs.clone(), "name"]);
    q.push(&[&envelope(0), &envelope(1), "dead one", "stored one"]);
    let (token, stored) = q.reserve(10, 60_000);
    let dead = &stored[0];
    assert_eq!(
        q.call("dead_letter", &[&dead.0, &dead.1, "rejected", "no"]),
        Resp::Integer(1)
    );
    q.push(&[&envelope(3), &envelope(4)]);
    let due = (u64::MAX / 4).to_string();
    assert_eq!(
        q.call("send_at", &[&due, "later", &envelope(5)]),
        Resp::Integer(1)
    );
    (q, token.unwrap(), stored[1].0.clone())
}

/// A well-formed ARGV of each script against [`busy_queue`]: with the wrong KEYS, a
/// script that ran it would write.
fn good_argv(script: &str, token: &str, id: &str, dead: &str) -> Vec<String> {
    let argv: Vec<&str> = match script {
        "reserve" => vec!["10", "0", HOLDER, "10"],
        "reserve_alone" => vec!["60000", HOLDER],
        // (Bits "@": index 1.)
        "ack" => vec!["1", "1", id, "1", token, "@"],
        "renew" => vec!["60000", HOLDER, "0", "1", id, "1", token],
        "retry" => vec![token, "0", "0", "boom"],
        "dead_letter" => vec![token, "0", "rejected", "boom"],
        "release" => vec![token, "0", id, "1"],
        "recover" => vec!["3", "100", "lost", HOLDER, "0"],
        "absolve" => vec![token, "0", id, "1"],
        "breaker_trip" | "breaker_hold" => vec!["5000"],
        "send_at" => vec!["0", "now", "{}"],
        "send_keyed" => vec!["k", "{}"],
        "send_keyed_at" => vec!["0", "k", "keyed-later", "{}"],
        "send_once" => vec!["60000", "", "once", "{}"],
        "send_once_batch" => vec!["1", "60000", "", "", "once", "{}"],
        "send_tick" => vec!["60000", "", "{}"],
        "cancel" | "read_scheduled" => vec!["later"],
        "reschedule" => vec!["later", "0"],
        "publish" => vec!["1", "name", "{}"],
        "publish_at" => vec!["1", "name", "0", "announced", "{}"],
        "singleton_acquire" | "singleton_renew" => vec!["holder", "15000"],
        "singleton_release" => vec!["holder"],
        "reply" => vec!["{}", "60000"],
        "admin_dead_envelopes" => vec![dead],
        "admin_delete_dead" => vec![dead],
        "admin_in_flight" => vec!["10"],
        "admin_move" | "admin_requeue" => vec!["all", "10"],
        "admin_purge" => vec!["10", "10", "10"],
        "admin_stats" => vec![],
        "admin_key_backlogs" => vec!["1000", "20"],
        "admin_unsubscribe" => vec!["name", "1"],
        other => panic!("no script {other}"),
    };
    argv.into_iter().map(str::to_owned).collect()
}

/// ARGV of the wrong shape for each script: counts, integers, lease groups that do not fit,
/// and the ARGV of the protocol-1 scripts (ack's `id, count` pairs, renew's).
fn bad_argvs(script: &str, token: &str, id: &str) -> Vec<Vec<String>> {
    let argvs: Vec<Vec<&str>> = match script {
        "reserve" => vec![
            vec!["10"],
            vec!["10", "60000", HOLDER],
            vec!["ten", "60000", HOLDER, "10"],
            vec!["10", "1.5", HOLDER, "10"],
            vec!["10", "60000", HOLDER, "all"],
        ],
        "reserve_alone" => vec![vec![], vec!["60000"], vec!["soon", HOLDER]],
        "ack" => vec![
            vec![id, "1"],
            vec![],
            vec!["1", id, "1"],
            vec!["2", "0", id, "1"],
            vec!["0", "1", token],
            vec!["0", "2", token, "@"],
            vec!["0", "x", token, "@"],
            // Protocol 9's lease group (token, k, highest, k indices).
            vec!["0", token, "1", "0", "0"],
            vec!["1", id, "1", token, "2", "1", "0", "1"],
        ],
        "renew" => vec![
            vec!["60000", id, "1"],
            vec!["60000", "2", id, "1"],
            vec!["60000", HOLDER, "0", "2", id, "1"],
            vec!["60000", HOLDER, "soon", "0"],
            vec!["60000"],
        ],
        "retry" => vec![vec![token, "0", "soon", "e"], vec![token, "0"]],
        "dead_letter" => vec![vec![token, "0", "rejected"], vec![]],
        "release" => vec![vec![token]],
        "recover" => vec![
            vec!["3", "100"],
            vec!["3", "100", "e"],
            vec!["three", "100", "e", HOLDER, "0"],
            vec!["3", "100", "e", HOLDER, "soon"],
        ],
        "absolve" => vec![vec![token]],
        "breaker_trip" | "breaker_hold" => vec![vec![], vec!["soon"], vec!["5000", "more"]],
        "send_at" => vec![vec!["0", "now"], vec!["soon", "now", "{}"], vec![]],
        "send_keyed" => vec![vec!["k"], vec!["", "{}"], vec![]],
        "send_keyed_at" => vec![
            vec!["0", "k", "keyed-later"],
            vec!["soon", "k", "keyed-later", "{}"],
            vec!["0", "", "keyed-later", "{}"],
            vec!["0"],
        ],
        "cancel" => vec![vec![], vec!["later", "again"]],
        "reschedule" => vec![vec!["later"], vec!["later", "soon"]],
        "read_scheduled" => vec![vec![]],
        "singleton_acquire" | "singleton_renew" => vec![
            vec!["holder"],
            vec!["holder", "soon"],
            vec!["holder", "15000", "more"],
        ],
        "singleton_release" => vec![vec![], vec!["holder", "15000"]],
        "reply" => vec![vec!["{}"], vec!["{}", "soon"], vec!["{}", "60000", "more"]],
        "send_once" => vec![
            vec!["60000", "", "once"],
            vec!["soon", "", "once", "{}"],
            vec!["60000", "later", "once", "{}"],
            vec!["0", "", "once", "{}"],
        ],
        "send_once_batch" => vec![
            vec!["1", "60000", "", "", "once"],
            vec!["1", "60000", "", "", "once", "{}", "more"],
            vec!["2", "60000", "", "", "once", "{}"],
            vec!["0", "60000", "", "", "once", "{}"],
            vec!["one", "60000", "", "", "once", "{}"],
            vec!["1", "soon", "", "", "once", "{}"],
            vec!["1", "0", "", "", "once", "{}"],
            vec!["1", "60000", "later", "", "once", "{}"],
            vec!["1", "60000", "", "k", "once", "{}"],
            vec![],
        ],
        "send_tick" => vec![
            vec!["60000", ""],
            vec!["soon", "", "{}"],
            vec!["60000", "yes", "{}"],
            vec!["60000", "", "{}", "more"],
        ],
        "publish" => vec![vec!["x", "name", "{}"], vec!["2", "name"], vec![]],
        "publish_at" => vec![
            vec!["1", "name"],
            vec!["x", "name", "0"],
            vec!["1", "name", "soon", "announced", "{}"],
            vec!["1", "name", "0", "announced"],
        ],
        "admin_in_flight" => vec![vec![], vec!["x"]],
        "admin_move" | "admin_requeue" => vec![vec!["some"], vec!["all", "x"], vec![]],
        "admin_purge" => vec![
            vec!["10", "10"],
            vec!["10", "x", "10"],
            vec!["10", "10", "x"],
        ],
        "admin_stats" => vec![vec!["x"]],
        "admin_key_backlogs" => vec![vec!["1000"], vec!["x", "20"], vec!["1000", "20", "1"]],
        "admin_unsubscribe" => vec![vec!["name", "yes"], vec!["name"]],
        _ => vec![],
    };
    argvs
        .into_iter()
        .map(|a| a.into_iter().map(str::to_owned).collect())
        .collect()
}

#[test]
fn a_call_of_the_wrong_shape_is_refused_before_any_write() {
    let redis = TestRedis::start().unwrap();
    for (script, _) in SCRIPTS {
        let (mut q, token, id) = busy_queue(&redis, &format!("shape-{script}"));
        let dead = q.cmd(&["LINDEX", &q.k.dead.clone(), "0"]);
        let dead = dead.as_str().unwrap().to_owned();
        let keys = q.keys(script);
        let good = good_argv(script, &token, &id, &dead);
        let good: Vec<&str> = good.iter().map(String::as_str).collect();
        let mut calls: Vec<(Vec<String>, Vec<String>)> = vec![
            (
                keys[..keys.len() - 1].to_vec(),
                good.iter().map(|a| (*a).to_owned()).collect(),
            ),
            (
                [keys.clone(), vec![q.k.errors.clone()]].concat(),
                good.iter().map(|a| (*a).to_owned()).collect(),
            ),
        ];
        if *script == "publish" {
            // KEYS: the subs and at most one ready list per name.
            calls[0].0 = vec![];
        }
        if *script == "admin_delete_dead" {
            // The orphans list is optional (a move across slots leaves it out).
            calls[0].0 = keys[..keys.len() - 2].to_vec();
        }
        calls.extend(
            bad_argvs(script, &token, &id)
                .into_iter()
                .map(|a| (keys.clone(), a)),
        );
        for (keys, argv) in calls {
            let before = q.snapshot();
            let argv_ref: Vec<&str> = argv.iter().map(String::as_str).collect();
            let reply = q.eval(script, &keys, &argv_ref);
            let wanted = format!("ERR bus: {script} expects");
            match &reply {
                Resp::Error(text) => assert!(
                    text.starts_with(&wanted)
                        && text.contains("(docs/wire-format.md, \"The calls\")"),
                    "{script} with {} KEYS, ARGV {argv:?}: {text}",
                    keys.len()
                ),
                other => panic!(
                    "{script} with {} KEYS, ARGV {argv:?} was not refused: {other:?}",
                    keys.len()
                ),
            }
            assert_eq!(
                q.snapshot(),
                before,
                "{script} with {} KEYS, ARGV {argv:?} wrote before refusing",
                keys.len()
            );
        }
        // The well-formed call still runs.
        let reply = q.call(script, &good);
        assert!(!matches!(reply, Resp::Error(_)), "{script}: {reply:?}");
    }
}

#[test]
fn an_old_clients_recover_call_changes_nothing() {
    // Protocol 1's recover.lua took 7 KEYS (no msgs, leases, leased). Called with them, the
    // lease layout's recover took an expired message out of `inflight` and then failed on
    // KEYS[8]: the message was left only in `msgs`, never delivered again.
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "old");
    q.push(&["stored one", &envelope(1)]);
    // Lock 0: both the stored message and the lease have expired at once.
    let (token, stored) = q.reserve(10, 0);
    assert!(token.is_some() && stored.len() == 1);
    let before = q.snapshot();
    let old_keys = q.keys("recover")[..7].to_vec();
    let reply = q.eval("recover", &old_keys, &["3", "100", "lost"]);
    assert!(
        matches!(&reply, Resp::Error(e) if e.contains("recover expects 19 KEYS, got 7")),
        "{reply:?}"
    );
    assert_eq!(q.snapshot(), before, "the refused call wrote");
    // Protocol 3's took 10 (no ordering keys): refused too, so that it never recovers a
    // keyed message without its key; protocol 4's took 16 and 3 ARGV (no holders): refused,
    // so that it never takes a live holder's messages for a crash's.
    for (n, argv) in [(10, 3), (16, 3), (19, 3)] {
        let old_keys = q.keys("recover")[..n].to_vec();
        let old_argv = ["3", "100", "lost", HOLDER, "0"];
        let reply = q.eval("recover", &old_keys, &old_argv[..argv]);
        assert!(
            matches!(&reply, Resp::Error(e) if e.contains("recover expects")),
            "{reply:?}"
        );
        assert_eq!(q.snapshot(), before, "the refused call wrote");
    }
    // Today's call recovers both.
    assert_eq!(
        q.call("recover", &["3", "100", "lost", HOLDER, "0"]),
        Resp::Integer(2)
    );
    assert_eq!(q.cmd(&["LLEN", &q.k.suspects.clone()]), Resp::Integer(2));
}

fn config(url: &str, prefix: &str) -> RedisConfig {
    RedisConfig::from_url(url).unwrap().prefix(prefix)
}

#[tokio::test]
async fn connecting_records_the_protocol_version_once() {
    let redis = TestRedis::start().unwrap();
    let key = keys::protocol(redis.namespace());
    let mut client = redis.client();
    assert!(client.get(&key).unwrap().is_none());
    let transport = RedisTransport::connect(&config(&redis.url(), redis.namespace()))
        .await
        .unwrap();
    assert_eq!(client.get(&key).unwrap().as_deref(), Some(&b"10"[..]));
    assert_eq!(PROTOCOL, 10);
    // A second client finds it and agrees.
    RedisTransport::connect(&config(&redis.url(), redis.namespace()))
        .await
        .unwrap();
    transport.close().await.unwrap();
}

#[tokio::test]
async fn another_protocol_version_is_refused_at_connect_and_nothing_is_written() {
    let redis = TestRedis::start().unwrap();
    let key = keys::protocol(redis.namespace());
    let mut client = redis.client();
    for found in ["11", "1", "two"] {
        client.set(&key, found).unwrap();
        let before = redis.keys();
        let error = RedisTransport::connect(&config(&redis.url(), redis.namespace()))
            .await
            .expect_err("connected to a Redis of another protocol");
        assert!(
            matches!(&error, Error::ProtocolMismatch { found: f, speaks: 10, .. } if f == found),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!("bus protocol {found} under {key}"))
                && text.contains("this build speaks protocol 10")
                && text.contains("docs/operations.md \"Upgrades\""),
            "{text}"
        );
        assert_eq!(redis.keys(), before);
        assert_eq!(client.get(&key).unwrap().as_deref(), Some(found.as_bytes()));
    }
}

#[tokio::test]
async fn an_older_protocols_prefix_is_upgraded_and_its_clients_are_then_refused() {
    // Protocols 3 to 7 only added keys and arguments to the same layout, protocol 8's
    // reserve drains what protocol 7 left ready, protocol 9 only gave two admin scripts a
    // key, and protocol 10 reads the `done` sets of older leases: the first client of this
    // build records its version, so that older consumers are refused from then on by their
    // own check (docs/wire-format.md, "Versioning").
    for old in ["2", "3", "4", "5", "6", "7", "8", "9"] {
        let redis = TestRedis::start().unwrap();
        let key = keys::protocol(redis.namespace());
        let mut client = redis.client();
        client.set(&key, old).unwrap();
        RedisTransport::connect(&config(&redis.url(), redis.namespace()))
            .await
            .unwrap();
        assert_eq!(
            client.get(&key).unwrap().as_deref(),
            Some(&b"10"[..]),
            "{old}"
        );
    }
}

#[tokio::test]
async fn a_full_redis_does_not_stop_a_client_from_connecting() {
    // A consumer started to drain a full Redis must start even though the version cannot
    // be recorded there.
    let server = RedisServer::start().unwrap();
    let mut client = server.client();
    for (name, value) in [("maxmemory-policy", "noeviction"), ("maxmemory", "1")] {
        assert!(client.cmd(&["CONFIG", "SET", name, value]).unwrap().is_ok());
    }
    let refused = client.cmd(&["SET", "probe", "x"]).unwrap();
    assert!(
        matches!(&refused, Resp::Error(e) if e.starts_with("OOM")),
        "{refused:?}"
    );
    let transport = RedisTransport::connect(&config(&server.url(), "full")).await;
    assert!(transport.is_ok(), "{:?}", transport.err());
    assert!(client.get(&keys::protocol("full")).unwrap().is_none());
}

/// `absolve`: a live holder's receipts take their messages from `suspects` back to the
/// head of `ready`; an index in another spelling, or a message no longer waiting there,
/// changes nothing.
#[test]
fn absolve_returns_only_the_holders_suspects_to_the_ready_list() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "absolve");
    q.push(&[&envelope(0), &envelope(1), &envelope(2)]);
    // A lease whose lock is already over when recovery runs (lock 0 ms).
    let (token, _) = q.reserve(10, 0);
    let token = token.unwrap();
    assert_eq!(
        q.call("recover", &["5", "100", "lost", HOLDER, "0"]),
        Resp::Integer(3)
    );
    let suspects = q.k.suspects.clone();
    let ready = q.k.ready.clone();
    let before = q.snapshot();
    for spelling in SPELLINGS {
        assert_eq!(q.call("absolve", &[&token, spelling]), Resp::Integer(0));
        assert_eq!(q.snapshot(), before, "absolve with index {spelling:?}");
    }
    // Messages 2 and 0 (the lease's first id is its token's number).
    assert_eq!(
        q.call("absolve", &[&token, "0", &token, "2"]),
        Resp::Integer(2)
    );
    let first: u64 = token[2..].parse().unwrap();
    let (id0, id1, id2) = (
        format!("~{first}"),
        format!("~{}", first + 1),
        format!("~{}", first + 2),
    );
    assert_eq!(q.list(&ready), [id0.clone(), id2.clone()], "in order");
    assert_eq!(q.list(&suspects), [id1]);
    // Absolved again: no longer a suspect, nothing moves.
    assert_eq!(q.call("absolve", &[&token, "0"]), Resp::Integer(0));
    assert_eq!(q.list(&ready), [id0, id2]);
}

/// The reply of a reserve held back by flow control: `[wait_ms, why]`.
fn held_back(reply: &Resp) -> Option<(i64, i64)> {
    match reply.as_array()? {
        [wait, why] => Some((wait.as_int()?, why.as_int()?)),
        _ => None,
    }
}

#[test]
fn flow_control_holds_a_reserve_back_says_why_and_writes_nothing() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "flow");
    let envelopes: Vec<String> = (0..4).map(envelope).collect();
    q.push(&envelopes.iter().map(String::as_str).collect::<Vec<_>>());
    let flow = q.k.flow.clone();
    // No setting: no flow key is ever written by a reserve.
    assert!(q.reserve(1, 60_000).0.is_some());
    assert_eq!(q.cmd(&["EXISTS", &flow]), Resp::Integer(0));
    assert_eq!(
        q.cmd(&["EXISTS", &q.k.flow_starts.clone()]),
        Resp::Integer(0)
    );

    // Paused: 2, for reserve and reserve_alone alike, and nothing changes.
    q.cmd(&["HSET", &flow, "paused", "1"]);
    let before = q.snapshot();
    assert_eq!(
        held_back(&q.call("reserve", &["10", "60000", HOLDER, "1000"])),
        Some((-1, 2))
    );
    let alone = q.call("reserve_alone", &["60000", HOLDER]);
    assert_eq!(alone.as_array().map(|a| a[0].as_int()), Some(Some(2)));
    assert_eq!(q.snapshot(), before, "a held-back reserve wrote");

    // Concurrency 2 with one in flight: one more, then 3.
    q.cmd(&["HDEL", &flow, "paused"]);
    q.cmd(&["HSET", &flow, "concurrency", "2"]);
    let (token, stored) = q.reserve(10, 60_000);
    assert!(token.is_some() && stored.is_empty());
    assert_eq!(q.cmd(&["GET", &q.k.leased.clone()]).as_str(), Some("2"));
    assert_eq!(
        held_back(&q.call("reserve", &["10", "60000", HOLDER, "1000"])),
        Some((-1, 3))
    );

    // A rate of 1 per minute: one start, then 4 with the wait until the window frees one.
    q.cmd(&["HDEL", &flow, "concurrency"]);
    q.cmd(&["HSET", &flow, "rate", "1", "per_ms", "60000"]);
    assert!(q.reserve(10, 60_000).0.is_some());
    let (wait, why) = held_back(&q.call("reserve", &["10", "60000", HOLDER, "1000"])).unwrap();
    assert_eq!(why, 4);
    // (The window counts a start 50 ms longer than its length: flow.lua's rate_window.)
    assert!((59_000..=60_051).contains(&wait), "{wait}");
    assert_eq!(q.cmd(&["LLEN", &q.k.ready.clone()]), Resp::Integer(1));
}

/// `pending` of a reserve's reply, and how many messages it holds.
fn pending_and_taken(reply: &Resp) -> (i64, usize) {
    let items = reply.as_array().unwrap();
    let leased = items
        .get(3)
        .and_then(Resp::as_array)
        .map_or(0, <[Resp]>::len);
    (
        items[1].as_int().unwrap(),
        leased + items.len().saturating_sub(4) / 4,
    )
}

#[test]
fn a_fleet_breaker_holds_reserves_back_then_marks_one_probe_as_a_foreign_client_sees_it() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "breaker");
    let envelopes: Vec<String> = (0..4).map(envelope).collect();
    q.push(&envelopes.iter().map(String::as_str).collect::<Vec<_>>());
    let flow = q.k.flow.clone();
    // Tripped for a minute: 5 with the wait, for reserve and reserve_alone, writing nothing.
    let until = q.call("breaker_trip", &["60000"]).as_int().unwrap();
    let before = q.snapshot();
    let (wait, why) = held_back(&q.call("reserve", &["10", "60000", HOLDER, "1000"])).unwrap();
    assert_eq!(why, 5);
    assert!((59_000..=60_000).contains(&wait), "{wait}");
    let alone = q.call("reserve_alone", &["60000", HOLDER]);
    assert_eq!(alone.as_array().map(|a| a[0].as_int()), Some(Some(5)));
    assert_eq!(q.snapshot(), before, "a held-back reserve wrote");
    // A shorter trip never shortens it.
    assert_eq!(q.call("breaker_trip", &["10"]).as_int(), Some(until));

    // The cool-down over (moved back by hand): one message of ten asked, marked 6, and
    // its slot held for the reserving call's lock.
    q.cmd(&["HSET", &flow, "breaker_until", "1"]);
    let (pending, taken) = pending_and_taken(&q.call("reserve", &["10", "30000", HOLDER, "1000"]));
    assert_eq!((pending, taken), (6, 1));
    let probe: i64 = q
        .cmd(&["HGET", &flow, "breaker_probe"])
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let now = bus_core::transport::now_ms() as i64;
    assert!((now + 29_000..=now + 30_000).contains(&probe), "{probe}");
    let (wait, why) = held_back(&q.call("reserve", &["10", "60000", HOLDER, "1000"])).unwrap();
    assert_eq!(why, 5, "a second probe while one runs");
    assert!((29_000..=30_000).contains(&wait), "{wait}");

    // Its host holds the slot while the probe runs: one more lock timeout from now.
    q.cmd(&["HSET", &flow, "breaker_probe", "1"]);
    assert_eq!(q.call("breaker_hold", &["45000"]).as_int(), Some(1));
    let (wait, why) = held_back(&q.call("reserve", &["10", "60000", HOLDER, "1000"])).unwrap();
    assert_eq!(why, 5);
    assert!((44_000..=45_000).contains(&wait), "{wait}");

    // A trip (the probe failed) frees the slot and opens it for its own cool-down only.
    q.call("breaker_trip", &["0"]);
    assert_eq!(
        q.cmd(&["HEXISTS", &flow, "breaker_probe"]),
        Resp::Integer(0)
    );
    let (pending, taken) = pending_and_taken(&q.call("reserve", &["10", "30000", HOLDER, "1000"]));
    assert_eq!((pending, taken), (6, 1), "no probe after a cool-down of 0");

    // Closed by one command: everything flows; holding a slot then changes nothing.
    q.cmd(&[
        "HDEL",
        &flow,
        "breaker_until",
        "breaker_probe",
        "breaker_cool_ms",
    ]);
    assert_eq!(q.call("breaker_hold", &["45000"]).as_int(), Some(0));
    assert_eq!(q.cmd(&["EXISTS", &flow]), Resp::Integer(0));
    let (pending, taken) = pending_and_taken(&q.call("reserve", &["10", "30000", HOLDER, "1000"]));
    assert_eq!((pending, taken), (0, 2));
}

#[test]
fn a_singleton_lease_is_taken_kept_and_given_up_only_by_its_holder() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "solo");
    let key = q.singleton.clone();
    assert_eq!(
        q.call("singleton_acquire", &["a", "15000"]),
        Resp::Integer(1)
    );
    let ttl = q.cmd(&["PTTL", &key]).as_int().unwrap();
    assert!((14_000..=15_000).contains(&ttl), "ttl {ttl}");
    // Another holder neither takes, renews nor releases it.
    assert_eq!(
        q.call("singleton_acquire", &["b", "15000"]),
        Resp::Integer(0)
    );
    assert_eq!(q.call("singleton_renew", &["b", "15000"]), Resp::Integer(0));
    assert_eq!(q.call("singleton_release", &["b"]), Resp::Integer(0));
    assert_eq!(q.cmd(&["GET", &key]), Resp::Bulk(Some(b"a".to_vec())));
    // Its holder renews it, and takes it again while it holds it.
    q.cmd(&["PEXPIRE", &key, "1000"]);
    assert_eq!(q.call("singleton_renew", &["a", "15000"]), Resp::Integer(1));
    assert!(q.cmd(&["PTTL", &key]).as_int().unwrap() > 14_000);
    assert_eq!(
        q.call("singleton_acquire", &["a", "15000"]),
        Resp::Integer(1)
    );
    // Given up by its holder, anyone takes it; expired, its old holder cannot renew it.
    assert_eq!(q.call("singleton_release", &["a"]), Resp::Integer(1));
    assert_eq!(q.call("singleton_renew", &["a", "15000"]), Resp::Integer(0));
    assert_eq!(
        q.call("singleton_acquire", &["b", "15000"]),
        Resp::Integer(1)
    );
    assert_eq!(q.cmd(&["GET", &key]), Resp::Bulk(Some(b"b".to_vec())));
}

/// A delayed keyed send on an ordered queue, as a foreign client makes it: recorded in
/// `kdue`; once due, promotion puts it in its key's list behind the key's earlier
/// messages (not on `ready`), and cancel or purge forget its key with it.
#[test]
fn a_delayed_keyed_send_joins_its_keys_list_when_promoted() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "keyed-later");
    let (flow, kdue, list) = (q.k.flow.clone(), q.k.kdue.clone(), q.k.key_queue("k"));
    q.cmd(&["HSET", &flow, "per_key", "1"]);
    let (first, later) = (envelope(1), envelope(2));
    assert_eq!(q.call("send_keyed", &["k", &first]), Resp::Integer(1));
    assert_eq!(
        q.call("send_keyed_at", &["0", "k", "due-now", &later]),
        Resp::Integer(1)
    );
    assert_eq!(q.cmd(&["HGET", &kdue, "due-now"]).as_str(), Some("k"));
    // The first holds the key; the delayed one, promoted, waits behind it in the list.
    let (token, n) = q.reserve_leased(10, 60_000);
    assert_eq!(n, 1, "one keyed message at a time");
    assert_eq!(
        q.cmd(&["LRANGE", &list, "0", "-1"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        q.cmd(&["LINDEX", &list, "0"]).as_bytes(),
        Some(later.as_bytes())
    );
    assert_eq!(q.cmd(&["HLEN", &kdue]), Resp::Integer(0));
    assert_eq!(q.cmd(&["HGET", &flow, "keyed"]).as_str(), Some("1"));
    // Acked, the key moves on to the promoted message.
    assert_eq!(q.ack_leased(&token, &[0]), 1);
    assert_eq!(q.reserve_leased(10, 60_000).1, 1);
    // Cancelled and purged delayed keyed sends leave no field in `kdue`.
    let far = (u64::MAX / 4).to_string();
    q.call("send_keyed_at", &[&far, "k", "cancelled", &envelope(3)]);
    q.call("send_keyed_at", &[&far, "k", "purged", &envelope(4)]);
    assert_eq!(q.cmd(&["HLEN", &kdue]), Resp::Integer(2));
    assert_eq!(q.call("cancel", &["cancelled"]), Resp::Integer(1));
    q.call("admin_purge", &["0", "10", "-1"]);
    assert_eq!(q.cmd(&["HLEN", &kdue]), Resp::Integer(0));
    // On a queue not ordered it is a plain delayed send: promoted onto `ready`.
    q.cmd(&["HSET", &flow, "per_key", "0"]);
    q.call("send_keyed_at", &["0", "k", "plain", &envelope(5)]);
    assert_eq!(q.cmd(&["HLEN", &kdue]), Resp::Integer(0));
}

/// `send_once` in its keyed form (9 KEYS, the key as ARGV[5]) on an ordered queue makes
/// the message its idle key's head; each form refuses the other's ARGV before any write.
#[test]
fn a_keyed_send_once_joins_its_keys_list_and_each_form_has_its_shape() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "once-keyed");
    let k = q.k.clone();
    q.cmd(&["HSET", &k.flow, "per_key", "1"]);
    let dedup = k.dedup("d");
    let keyed: Vec<String> = [
        &dedup, &k.ready, &k.delayed, &k.msgs, &k.flow, &k.kheads, &k.kbusy, &k.kq, &k.kdue,
    ]
    .into_iter()
    .cloned()
    .collect();
    let body = envelope(1);
    let before = q.snapshot();
    for (keys, argv) in [
        (&keyed, vec!["60000", "", "m1", body.as_str()]),
        (&keyed, vec!["60000", "", "m1", body.as_str(), ""]),
        (
            &keyed[..4].to_vec(),
            vec!["60000", "", "m1", body.as_str(), "k"],
        ),
        (
            &keyed[..8].to_vec(),
            vec!["60000", "", "m1", body.as_str(), "k"],
        ),
    ] {
        let reply = q.eval("send_once", keys, &argv);
        assert!(
            matches!(&reply, Resp::Error(e) if e.contains("send_once expects")),
            "{} KEYS, {argv:?}: {reply:?}",
            keys.len()
        );
        assert_eq!(q.snapshot(), before, "a refused call wrote");
    }
    let argv = ["60000", "", "m1", body.as_str(), "k"];
    assert_eq!(q.eval("send_once", &keyed, &argv), Resp::Integer(1));
    assert_eq!(q.eval("send_once", &keyed, &argv).as_str(), Some("m1"));
    assert_eq!(q.cmd(&["LLEN", &k.key_queue("k")]), Resp::Integer(0));
    assert_eq!(q.cmd(&["HGET", &k.flow, "keyed"]).as_str(), Some("1"));
    assert_eq!(
        q.cmd(&["LRANGE", &k.kheads, "0", "-1"])
            .as_array()
            .map(|a| a.len()),
        Some(2)
    );
    assert_eq!(q.cmd(&["LINDEX", &k.kheads, "0"]).as_str(), Some("k"));
    assert_eq!(
        q.cmd(&["HGET", &k.kbusy, "k"]).as_str(),
        Some("1"),
        "a head holds a slot"
    );
}

/// The per-key rate as a foreign consumer meets it through `reserve`: the key's second
/// start within its window is refused, the key is parked in `kwait` (listed among the
/// backlogs) and the wait hint says when its window frees a start.
#[test]
fn a_key_over_its_rate_is_parked_with_a_wait_hint() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "key-rate");
    let k = q.k.clone();
    q.cmd(&[
        "HSET",
        &k.flow,
        "per_key",
        "1",
        "key_rate",
        "1",
        "key_per_ms",
        "60000",
    ]);
    q.call("send_keyed", &["k", &envelope(1), &envelope(2)]);
    let (token, n) = q.reserve_leased(10, 60_000);
    assert_eq!(n, 1);
    assert_eq!(q.ack_leased(&token, &[0]), 1);
    let reply = q.call("reserve", &["10", "60000", HOLDER, "1000"]);
    let items = reply.as_array().unwrap();
    assert_eq!(items.len(), 4, "nothing taken: {reply:?}");
    let wait = items[0].as_int().unwrap();
    assert!((59_000..=60_050).contains(&wait), "wait hint {wait}");
    assert!(q.cmd(&["ZSCORE", &k.kwait, "k"]).as_str().is_some());
    assert_eq!(q.cmd(&["LLEN", &k.kheads]), Resp::Integer(0));
    assert_eq!(
        q.cmd(&["HGET", &k.kbusy, "k"]),
        Resp::Bulk(None),
        "a parked head holds no slot"
    );
    let backlogs = q.call("admin_key_backlogs", &["1000", "20"]);
    let rows = backlogs.as_array().unwrap();
    assert_eq!(rows[1].as_str(), Some("k"), "{backlogs:?}");
    assert_eq!(rows[2], Resp::Integer(1), "one waiting");
    // The rate removed, the next reserve returns the key to its turn.
    q.cmd(&["HDEL", &k.flow, "key_rate", "key_per_ms"]);
    assert_eq!(q.reserve_leased(10, 60_000).1, 1);
    assert_eq!(q.cmd(&["ZCARD", &k.kwait]), Resp::Integer(0));
}

/// `send_once_batch`: per message, its deduplication key's check, the key and the store;
/// a key taken by an earlier message of the call holds for the later ones; the delayed
/// form stores under the ids, the keyed form (8 fixed KEYS, the key as ARGV[4]) joins the
/// key's list on an ordered queue; a bad id is refused before any write.
#[test]
fn a_batched_send_once_stores_each_key_once_in_each_form() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "once-batch");
    let k = q.k.clone();
    let keys = |fixed: &[&String], dedup: &[&str]| -> Vec<String> {
        let mut all: Vec<String> = fixed.iter().map(|key| (*key).clone()).collect();
        all.extend(dedup.iter().map(|d| k.dedup(d)));
        all
    };
    let plain = [&k.ready, &k.delayed, &k.msgs];
    let (e1, e2, e3) = (envelope(1), envelope(2), envelope(3));
    let argv = ["3", "60000", "", "", "m1", &e1, "m2", &e2, "m3", &e3];
    let abc = keys(&plain, &["a", "b", "a"]);
    let reply = q.eval("send_once_batch", &abc, &argv);
    let answers: Vec<Resp> = reply
        .as_array()
        .unwrap_or_else(|| panic!("{reply:?}"))
        .to_vec();
    assert_eq!(answers[..2], [Resp::Integer(1), Resp::Integer(1)]);
    assert_eq!(answers[2].as_str(), Some("m1"), "the batch's own first");
    assert_eq!(q.cmd(&["LLEN", &k.ready]), Resp::Integer(2));
    assert_eq!(q.cmd(&["GET", &k.dedup("a")]).as_str(), Some("m1"));
    let reply = q.eval("send_once_batch", &abc, &argv);
    let firsts: Vec<Option<&str>> = reply.as_array().unwrap().iter().map(Resp::as_str).collect();
    assert_eq!(firsts, [Some("m1"), Some("m2"), Some("m1")], "all held");
    assert_eq!(q.cmd(&["LLEN", &k.ready]), Resp::Integer(2), "nothing more");

    // Delayed: a bad id is refused before any write, then the batch is stored by id.
    let later = keys(&plain, &["l", "l"]);
    let before = q.snapshot();
    let bad = ["2", "60000", "0", "", "l1", &e1, "~2", &e2];
    assert!(matches!(
        q.eval("send_once_batch", &later, &bad),
        Resp::Error(_)
    ));
    assert_eq!(q.snapshot(), before, "a refused call wrote");
    let argv = ["2", "60000", "0", "", "l1", &e1, "l2", &e2];
    let reply = q.eval("send_once_batch", &later, &argv);
    let answers = reply.as_array().unwrap();
    assert_eq!(answers[0], Resp::Integer(1));
    assert_eq!(answers[1].as_str(), Some("l1"));
    assert_eq!(q.cmd(&["ZCARD", &k.delayed]), Resp::Integer(1));
    assert_eq!(q.cmd(&["HEXISTS", &k.msgs, "l2"]), Resp::Integer(0));

    // Keyed, on a queue ordered per key: the idle key's head; the plain form's KEYS with
    // a key, or the keyed form's without one, are refused.
    q.cmd(&["HSET", &k.flow, "per_key", "1"]);
    let fixed = [
        &k.ready, &k.delayed, &k.msgs, &k.flow, &k.kheads, &k.kbusy, &k.kq, &k.kdue,
    ];
    let keyed = keys(&fixed, &["k1", "k1"]);
    let argv = ["2", "60000", "", "k", "k1", &e1, "k2", &e2];
    let before = q.snapshot();
    let unkeyed = ["2", "60000", "", "", "k1", &e1, "k2", &e2];
    for (keys, argv) in [(&keyed, &unkeyed), (&keys(&plain, &["k1", "k1"]), &argv)] {
        let reply = q.eval("send_once_batch", keys, argv);
        assert!(
            matches!(&reply, Resp::Error(e) if e.contains("send_once_batch expects")),
            "{reply:?}"
        );
        assert_eq!(q.snapshot(), before, "a refused call wrote");
    }
    let reply = q.eval("send_once_batch", &keyed, &argv);
    let answers = reply.as_array().unwrap();
    assert_eq!(answers[0], Resp::Integer(1));
    assert_eq!(answers[1].as_str(), Some("k1"));
    assert_eq!(q.cmd(&["LLEN", &k.key_queue("k")]), Resp::Integer(0));
    assert_eq!(q.cmd(&["LINDEX", &k.kheads, "0"]).as_str(), Some("k"));
    assert_eq!(q.cmd(&["HGET", &k.flow, "keyed"]).as_str(), Some("1"));
    assert_eq!(
        q.cmd(&["LLEN", &k.ready]),
        Resp::Integer(3),
        "m1, m2 and l1, promoted first"
    );
}

/// A retry of a keyed message (leased by reserve) stores it with its key in `kof`, keeping
/// its key's slot; purging the retry (here delayed, the keys' lists left) gives the slot
/// back, as its ack would, so the key's next message runs.
#[test]
fn a_purged_keyed_retry_gives_its_key_back() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::ordered(&redis, "purge-keyed", 1);
    let k = q.k.clone();
    q.call("send_keyed", &["k", &envelope(1), &envelope(2)]);
    let (token, n) = q.reserve_leased(10, 60_000);
    assert_eq!(n, 1);
    assert_eq!(
        q.call("retry", &[&token, "0", "3600000", "boom"]),
        Resp::Integer(1)
    );
    // Stored as message 0 of its lease: `~<first>`.
    let id = format!("~{}", &token[2..]);
    assert_eq!(q.cmd(&["HGET", &k.kof, &id]).as_str(), Some("k"));
    assert_eq!(q.cmd(&["ZCARD", &k.delayed]), Resp::Integer(1));
    let (token, stored) = q.reserve(10, 60_000);
    assert!(
        token.is_none() && stored.is_empty(),
        "the retry holds its key: {token:?} {stored:?}"
    );
    q.call("admin_purge", &["0", "10", "-1"]);
    assert_eq!(q.cmd(&["HEXISTS", &k.kof, &id]), Resp::Integer(0));
    assert_eq!(
        q.reserve_leased(10, 60_000).1,
        1,
        "the key's next message runs"
    );
}

/// A keyed message leased by reserve holds its key's slot through every way out of its
/// lease but an ack: released, it is stored (no delivery counted) with its key in `kof`
/// and served again before the key's next message; its lease expired and recovered, it is
/// stored the same way as a crash suspect. Only its ack or dead letter frees the key.
#[test]
fn a_leased_keyed_message_keeps_its_slot_through_release_and_recovery() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::ordered(&redis, "keyed-lease", 1);
    let k = q.k.clone();
    q.call(
        "send_keyed",
        &["k", &envelope(1), &envelope(2), &envelope(3)],
    );
    let (token, n) = q.reserve_leased(10, 60_000);
    assert_eq!(n, 1, "one message of the key at a time");
    let lease_keys = format!("{}:{token}:keys", k.leases);
    assert_eq!(q.cmd(&["LINDEX", &lease_keys, "0"]).as_str(), Some("k"));
    assert_eq!(q.cmd(&["HGET", &k.kbusy, "k"]).as_str(), Some("1"));

    // Released: stored under ~<first>, its key in `kof`, first on `ready`, slot kept.
    assert_eq!(q.call("release", &[&token, "0"]), Resp::Integer(1));
    let id = format!("~{}", &token[2..]);
    assert_eq!(q.cmd(&["HGET", &k.kof, &id]).as_str(), Some("k"));
    assert_eq!(
        q.cmd(&["LINDEX", &k.ready, "0"]).as_str(),
        Some(id.as_str())
    );
    assert_eq!(q.cmd(&["HGET", &k.kbusy, "k"]).as_str(), Some("1"));
    assert_eq!(
        q.cmd(&["EXISTS", &lease_keys]),
        Resp::Integer(0),
        "gone with its lease"
    );
    let (leased, stored) = q.reserve(10, 60_000);
    assert_eq!(leased, None, "the key's next message waits: {stored:?}");
    assert_eq!(
        stored,
        vec![(id.clone(), "1".to_owned())],
        "served again, first delivery"
    );
    assert_eq!(q.call("ack", &["1", "0", &id, "1"]), Resp::Integer(1));
    assert_eq!(
        q.cmd(&["HGET", &k.kbusy, "k"]).as_str(),
        Some("1"),
        "acked: its slot passes to the key's next message"
    );
    assert_eq!(q.cmd(&["LINDEX", &k.kheads, "0"]).as_str(), Some("k"));
    assert_eq!(q.cmd(&["HLEN", &k.kof]), Resp::Integer(0));

    // Its lease expired under a holder that is gone: recovered as a stored suspect that
    // still holds the key.
    let (token, n) = q.reserve_leased(10, 1);
    assert_eq!(n, 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while q.call("recover", &["3", "100", "lost", "recoverer", "0"]) != Resp::Integer(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never expired"
        );
    }
    let id = format!("~{}", &token[2..]);
    assert_eq!(q.cmd(&["HGET", &k.kof, &id]).as_str(), Some("k"));
    assert_eq!(
        q.cmd(&["LINDEX", &k.suspects, "0"]).as_str(),
        Some(id.as_str())
    );
    assert_eq!(q.cmd(&["HGET", &k.kbusy, "k"]).as_str(), Some("1"));
    assert_eq!(q.cmd(&["EXISTS", &lease_keys]), Resp::Integer(0));
    // Run alone and dead-lettered, it frees the key as a stored keyed message does.
    let alone = q.call("reserve_alone", &["60000", HOLDER]);
    let alone = alone.as_array().unwrap();
    assert_eq!(alone[1].as_str(), Some(id.as_str()), "{alone:?}");
    let count = alone[2].as_int().unwrap().to_string();
    assert_eq!(
        q.cmd(&["LLEN", &k.key_queue("k")]),
        Resp::Integer(1),
        "the third waits"
    );
    assert_eq!(
        q.call("dead_letter", &[&id, &count, "handler", "boom"]),
        Resp::Integer(1)
    );
    assert_eq!(q.cmd(&["LLEN", &k.key_queue("k")]), Resp::Integer(0));
    assert_eq!(
        q.cmd(&["HGET", &k.kbusy, "k"]).as_str(),
        Some("1"),
        "the third's"
    );
    assert_eq!(q.reserve_leased(10, 60_000).1, 1, "the third runs");
}

/// An ack gives a leased keyed message's slot back once, however often its receipt comes:
/// twice in one call, or again in a later one.
#[test]
fn a_leased_keyed_message_gives_its_slot_back_once() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::ordered(&redis, "keyed-twice", 2);
    let k = q.k.clone();
    q.call(
        "send_keyed",
        &["k", &envelope(1), &envelope(2), &envelope(3)],
    );
    let (token, n) = q.reserve_leased(10, 60_000);
    assert_eq!(n, 2, "two of the key at a time");
    assert_eq!(q.cmd(&["HGET", &k.kbusy, "k"]).as_str(), Some("2"));
    assert_eq!(q.ack_leased(&token, &[0, 0]), 1);
    // The freed slot passed to the third message, once.
    assert_eq!(q.cmd(&["HGET", &k.kbusy, "k"]).as_str(), Some("2"));
    assert_eq!(q.cmd(&["LLEN", &k.kheads]), Resp::Integer(2));
    assert_eq!(q.ack_leased(&token, &[0]), 0);
    assert_eq!(q.cmd(&["HGET", &k.kbusy, "k"]).as_str(), Some("2"));
    assert_eq!(q.cmd(&["LLEN", &k.kheads]), Resp::Integer(2));
    assert_eq!(q.ack_leased(&token, &[1]), 1);
    assert_eq!(
        q.cmd(&["HGET", &k.kbusy, "k"]).as_str(),
        Some("1"),
        "the third's"
    );
}

/// What protocol 7 left: a key ready in the sorted set `kready`, its messages in its list.
/// Protocol 8's reserve drains it: the key's first message becomes a head and is served,
/// and the rest follow in order as their slots pass on.
#[test]
fn the_keys_protocol_7_left_ready_are_served_in_order() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::ordered(&redis, "from-7", 1);
    let k = q.k.clone();
    let (first, second) = (envelope(1), envelope(2));
    q.cmd(&["RPUSH", &k.key_queue("k"), &first, &second]);
    q.cmd(&["ZADD", &k.kready, "1", "k"]);
    let reply = q.call("reserve", &["10", "60000", HOLDER, "10"]);
    let items = reply.as_array().unwrap();
    let token = items[2].as_str().unwrap().to_owned();
    let leased: Vec<Option<&str>> = items[3]
        .as_array()
        .unwrap()
        .iter()
        .map(Resp::as_str)
        .collect();
    assert_eq!(leased, [Some(first.as_str())], "{reply:?}");
    assert_eq!(q.cmd(&["EXISTS", &k.kready]), Resp::Integer(0), "drained");
    assert_eq!(q.ack_leased(&token, &[0]), 1);
    let reply = q.call("reserve", &["10", "60000", HOLDER, "10"]);
    let items = reply.as_array().unwrap();
    let leased: Vec<Option<&str>> = items[3]
        .as_array()
        .unwrap()
        .iter()
        .map(Resp::as_str)
        .collect();
    assert_eq!(leased, [Some(second.as_str())], "{reply:?}");
}

/// What protocol 7 left ready is seen by the operator's key backlogs and deleted by a purge
/// (protocol 9): else the next reserve would drain the key back into heads, and purged
/// messages would run.
#[test]
fn the_keys_protocol_7_left_ready_are_seen_and_purged() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::ordered(&redis, "purged-7", 1);
    let k = q.k.clone();
    q.cmd(&["RPUSH", &k.key_queue("k"), &envelope(1), &envelope(2)]);
    q.cmd(&["ZADD", &k.kready, "1", "k"]);
    q.cmd(&["HSET", &k.flow, "keyed", "2"]);
    // The operator sees the key's backlog before the purge (protocol 9 too).
    let backlogs = q.call("admin_key_backlogs", &["1000", "20"]);
    let rows: Vec<Option<String>> = backlogs
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_owned)
                .or(v.as_int().map(|n| n.to_string()))
        })
        .collect();
    let expected = [Some("1"), Some("k"), Some("2"), Some("0")].map(|v| v.map(str::to_owned));
    assert_eq!(rows, expected, "{backlogs:?}");
    let reply = q.call("admin_purge", &["10", "10", "10"]);
    let counts: Vec<Option<i64>> = reply.as_array().unwrap().iter().map(Resp::as_int).collect();
    // ready, delayed, keyed purged, heads popped, every key's list gone.
    assert_eq!(
        counts,
        [Some(0), Some(0), Some(2), Some(0), Some(1)],
        "{reply:?}"
    );
    assert_eq!(q.cmd(&["EXISTS", &k.key_queue("k")]), Resp::Integer(0));
    assert_eq!(q.cmd(&["EXISTS", &k.kready]), Resp::Integer(0));
    assert_eq!(q.cmd(&["HEXISTS", &k.flow, "keyed"]), Resp::Integer(0));
    let (token, stored) = q.reserve(10, 60_000);
    assert_eq!(
        (token, stored),
        (None, vec![]),
        "a purged message was served"
    );
}

/// A key's waiting list that is garbage (not a list, written by hand) does not fail the ack
/// that frees the key's slot: that slot is freed and passed to none, and the other keys of
/// the call move on.
#[test]
fn an_ack_frees_a_garbage_keys_slot_and_moves_the_other_keys_on() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::ordered(&redis, "keyed-garbage", 1);
    let k = q.k.clone();
    q.call("send_keyed", &["a", &envelope(1), &envelope(2)]);
    q.call("send_keyed", &["b", &envelope(3)]);
    let (token, n) = q.reserve_leased(10, 60_000);
    assert_eq!(n, 2, "a's and b's heads");
    q.cmd(&["SET", &k.key_queue("b"), "not a list"]);
    assert_eq!(q.ack_leased(&token, &[0, 1]), 2);
    assert_eq!(q.cmd(&["HEXISTS", &k.kbusy, "b"]), Resp::Integer(0));
    assert_eq!(q.cmd(&["HGET", &k.kbusy, "a"]).as_str(), Some("1"));
    assert_eq!(q.reserve_leased(10, 60_000).1, 1, "a's second runs");
}

/// An ordered queue's messages waiting for their key count as held: unsubscribing without
/// force refuses; with force, every key of the queue goes, the per-key lists and rate
/// windows of the keys still listed (not in `QueueKeys::all`) with the rest.
#[test]
fn unsubscribing_an_ordered_queue_counts_and_deletes_its_keys_lists() {
    let redis = TestRedis::start().unwrap();
    let mut q = Queue::new(&redis, "unsub-keyed");
    let k = q.k.clone();
    q.cmd(&["SADD", &q.subs.clone(), "unsub-keyed"]);
    q.cmd(&[
        "HSET",
        &k.flow,
        "per_key",
        "1",
        "key_rate",
        "1",
        "key_per_ms",
        "60000",
    ]);
    q.call("send_keyed", &["a", &envelope(1), &envelope(2)]);
    q.call("send_keyed", &["b", &envelope(3), &envelope(4)]);
    q.call("send_keyed", &["c", &envelope(5)]);
    let (token, n) = q.reserve_leased(10, 60_000);
    assert_eq!(n, 3, "one message of each key");
    assert_eq!(q.ack_leased(&token, &[0, 1, 2]), 3);
    // a's and b's second messages are heads; a reserve parks them, over their rate.
    let reply = q.call("reserve", &["10", "60000", HOLDER, "1000"]);
    assert_eq!(
        reply.as_array().unwrap().len(),
        4,
        "nothing taken: {reply:?}"
    );
    // Left: a and b wait for their rate windows (kwait), one message each.
    let refused = q.call("admin_unsubscribe", &["unsub-keyed", "0"]);
    let counts = refused.as_array().unwrap();
    assert_eq!(counts[0], Resp::Integer(0), "refused: {refused:?}");
    // (`ready` may also hold a wake-up element, counted with the waiting messages.)
    assert!(counts[1].as_int().unwrap() >= 2, "{refused:?}");
    assert_eq!(q.cmd(&["LLEN", &k.key_queue("a")]), Resp::Integer(1));
    q.call("admin_unsubscribe", &["unsub-keyed", "1"]);
    let prefix = k.ready.strip_suffix(":ready").unwrap().to_owned();
    // Only the window of key c is left (its messages all ran, so no list names it): it
    // expires by itself at the end of its window.
    let left = q.cmd(&["KEYS", &format!("{prefix}:*")]);
    let window = format!("{}:c", k.kstarts);
    assert_eq!(
        left,
        Resp::Array(Some(vec![Resp::Bulk(Some(window.clone().into_bytes()))])),
        "every other key of the queue is deleted"
    );
    let ttl = q.cmd(&["PTTL", &window]).as_int().unwrap();
    assert!(ttl > 0 && ttl <= 2 * 60_000, "the window expires: {ttl}");
}
