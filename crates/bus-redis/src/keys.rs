//! Every Redis key name of the transport, built in one place (see docs/redis-layout.md).

use bus_core::transport::Source;
use fred::types::Key;

use crate::scripts::{self, LuaScript};

/// The element a delayed message pushes onto an empty ready list to wake idle
/// consumers; reserve skips it (docs/redis-layout.md).
pub const WAKE: &str = "~wake";

/// The default key prefix (namespace).
pub const DEFAULT_PREFIX: &str = "bus";

/// The keys of one queue (a command queue, or one subscription of a topic). All share
/// one hash tag: the queue's name, or the topic's for a subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueKeys {
    /// List of ready elements: fresh envelopes, ids of stored messages, and the wake-up
    /// marker [`WAKE`].
    pub ready: String,
    /// Hash: id → envelope.
    pub msgs: String,
    /// Hash: id → delivery count.
    pub deliveries: String,
    /// Sorted set: id → lock deadline (ms).
    pub inflight: String,
    /// Sorted set: id → due time (ms).
    pub delayed: String,
    /// Hash: id → JSON array of recent errors.
    pub errors: String,
    /// List of dead-lettered ids.
    pub dead: String,
    /// Hash: id → JSON `{reason, at_ms}` of a dead letter.
    pub dead_info: String,
    /// Counter of the storage ids (`~n`) that reserve gives fresh envelopes.
    pub seq: String,
    /// List of recovered message ids, delivered one at a time, each alone.
    pub suspects: String,
    /// Set of the recovered ids reserved alone right now.
    pub isolated: String,
    /// Sorted set: lease token → lock deadline (ms), one per reserved batch of fresh
    /// envelopes. Lease `t` is the list `<leases>:<t>` (its envelopes, in order) with
    /// the set `<leases>:<t>:done` (indices that left it): see [`QueueKeys::lease`].
    pub leases: String,
    /// Counter of the messages held in leases (in flight besides `inflight`'s ids).
    pub leased: String,
    /// Hash: the queue's flow control: `paused`, `concurrency`, `rate`, `per_ms`,
    /// `per_key`, `on_dead`, `keyed` and the fleet circuit breaker's `breaker_until`,
    /// `breaker_probe`; absent when none is set. Read by every reserve.
    pub flow: String,
    /// Sorted set: the rate limit's sliding window, one member per start (score: its
    /// time in ms); only written while a rate limit is set.
    pub flow_starts: String,
    /// List (per-key ordering): key, envelope, key, envelope, ...: the messages of keys
    /// with a free slot that may start (each holding its key's slot), oldest first, so
    /// that keys take turns; reserve pops them as it pops `ready`.
    pub kheads: String,
    /// Sorted set: the keys protocol 7 left ready to start, drained into `kheads` by
    /// reserve (protocol 8 writes it no more).
    pub kready: String,
    /// Hash: key → how many of its messages are in flight (ordered queues).
    pub kbusy: String,
    /// Hash: storage id of a reserved keyed message → its key.
    pub kof: String,
    /// The prefix of the keys' waiting lists: key `k` waits in `<kq>:<k>` (see
    /// [`QueueKeys::key_queue`]). Not itself a key.
    pub kq: String,
    /// Hash: id of a delayed keyed send (ordered queues) → its key; promotion moves it
    /// into its key's list instead of `ready`.
    pub kdue: String,
    /// Sorted set (per-key rate limit): key → when its window frees a start (ms); the
    /// keys over their rate, their next message back in their list until then.
    pub kwait: String,
    /// The prefix of the keys' rate windows: key `k`'s starts in `<kstarts>:<k>` (a
    /// sorted set, expiring by itself). Not itself a key.
    pub kstarts: String,
    /// Hash: lock (a lease's token, or a stored message's id) → the id of the consumer
    /// that holds it, so that recovery can tell a live holder from a gone one.
    pub holders: String,
    /// Sorted set: consumer id → its last recover or renew call (ms, Redis's clock).
    pub seen: String,
    /// Hash: consumer id → when its current presence began (ms): its first call after an
    /// absence.
    pub since: String,
}

impl QueueKeys {
    /// The keys of `source` under `prefix`.
    pub fn new(prefix: &str, source: &Source) -> Self {
        let base = match source {
            Source::Queue(queue) => format!("{prefix}:{{{queue}}}"),
            Source::Subscription { topic, name } => format!("{prefix}:{{{topic}}}:s:{name}"),
        };
        Self::from_base(&base)
    }

    /// The keys of shard `shard` of the partitioned command queue `queue`: the queue base
    /// `<prefix>:{<queue>:<shard>}`, a hash tag of its own (docs/redis-layout.md,
    /// "Partitioned queues").
    pub fn shard(prefix: &str, queue: &str, shard: u16) -> Self {
        Self::from_base(&format!("{prefix}:{{{queue}:{shard}}}"))
    }

    /// Only the ready list of a shard: what a send needs. Equal to
    /// `QueueKeys::shard(prefix, queue, shard).ready`.
    pub fn shard_ready_of(prefix: &str, queue: &str, shard: u16) -> String {
        format!("{prefix}:{{{queue}:{shard}}}:ready")
    }

    fn from_base(base: &str) -> Self {
        let key = |suffix: &str| format!("{base}:{suffix}");
        QueueKeys {
            ready: key("ready"),
            msgs: key("msgs"),
            deliveries: key("deliveries"),
            inflight: key("inflight"),
            delayed: key("delayed"),
            errors: key("errors"),
            dead: key("dead"),
            dead_info: key("dead-info"),
            seq: key("seq"),
            suspects: key("suspects"),
            isolated: key("isolated"),
            leases: key("leases"),
            leased: key("leased"),
            flow: key("flow"),
            flow_starts: key("flow-starts"),
            kheads: key("kheads"),
            kready: key("kready"),
            kbusy: key("kbusy"),
            kof: key("kof"),
            kq: key("kq"),
            kdue: key("kdue"),
            kwait: key("kwait"),
            kstarts: key("kstarts"),
            holders: key("holders"),
            seen: key("seen"),
            since: key("since"),
        }
    }

    /// The list in which the messages of ordering key `key` wait.
    pub fn key_queue(&self, key: &str) -> String {
        format!("{}:{key}", self.kq)
    }

    /// The list of lease `token` (its envelopes in reservation order) and the set of its
    /// indices that left it (acked, retried, dead-lettered or released).
    pub fn lease(&self, token: &str) -> (String, String) {
        let list = format!("{}:{token}", self.leases);
        let done = format!("{list}:done");
        (list, done)
    }

    /// The deduplication key `key` of this queue (a string: the id of the message stored
    /// with it, expiring with the window): `<queue base>:dedup:<key>`, under the queue's
    /// hash tag. Not one of [`QueueKeys::all`]: it expires by itself.
    pub fn dedup(&self, key: &str) -> String {
        let base = self.ready.strip_suffix(":ready").unwrap_or(&self.ready);
        format!("{base}:dedup:{key}")
    }

    /// The last tick of the recurring schedule `name` sending to this queue (a string:
    /// ms since the Unix epoch): `<queue base>:schedule:<name>`, under the queue's hash
    /// tag (docs/redis-layout.md, "Recurring messages (cron)"). Not one of
    /// [`QueueKeys::all`]: a purge keeps it.
    pub fn schedule(&self, name: &str) -> String {
        let base = self.ready.strip_suffix(":ready").unwrap_or(&self.ready);
        format!("{base}:schedule:{name}")
    }

    /// The queue's edit history (a capped stream: each dead letter edited and requeued
    /// from the dashboard, its original and who edited it): `<queue base>:edited`.
    /// Operator-only, written by `admin_edit_requeue.lua`; no consumer reads it.
    pub fn edited(&self) -> String {
        let base = self.ready.strip_suffix(":ready").unwrap_or(&self.ready);
        format!("{base}:edited")
    }

    /// Only the ready list of `source`: what a send needs, built with one allocation
    /// instead of every key of the queue. Equal to `QueueKeys::new(prefix, source).ready`.
    pub fn ready_of(prefix: &str, source: &Source) -> String {
        let (topic, name) = match source {
            Source::Queue(queue) => return Self::queue_ready_of(prefix, queue),
            Source::Subscription { topic, name } => (topic, name),
        };
        let mut key = String::with_capacity(prefix.len() + topic.len() + name.len() + 12);
        key.push_str(prefix);
        key.push_str(":{");
        key.push_str(topic);
        key.push_str("}:s:");
        key.push_str(name);
        key.push_str(":ready");
        key
    }

    /// The ready list of the queue `queue` (a name already checked): [`Self::ready_of`]
    /// without a [`Source`] made for it.
    pub fn queue_ready_of(prefix: &str, queue: &str) -> String {
        let mut key = String::with_capacity(prefix.len() + queue.len() + 9);
        key.push_str(prefix);
        key.push_str(":{");
        key.push_str(queue);
        key.push_str("}:ready");
        key
    }

    /// The key a script's shape names `name` (`ready`, `dead-info`, ...: the suffix after
    /// the queue base); `None` for a name that is no key of a queue's own.
    pub fn named(&self, name: &str) -> Option<&str> {
        let key = match name {
            "ready" => &self.ready,
            "msgs" => &self.msgs,
            "deliveries" => &self.deliveries,
            "inflight" => &self.inflight,
            "delayed" => &self.delayed,
            "errors" => &self.errors,
            "dead" => &self.dead,
            "dead-info" => &self.dead_info,
            "seq" => &self.seq,
            "suspects" => &self.suspects,
            "isolated" => &self.isolated,
            "leases" => &self.leases,
            "leased" => &self.leased,
            "flow" => &self.flow,
            "flow-starts" => &self.flow_starts,
            "kheads" => &self.kheads,
            "kready" => &self.kready,
            "kbusy" => &self.kbusy,
            "kof" => &self.kof,
            "kq" => &self.kq,
            "kdue" => &self.kdue,
            "kwait" => &self.kwait,
            "kstarts" => &self.kstarts,
            "holders" => &self.holders,
            "seen" => &self.seen,
            "since" => &self.since,
            _ => return None,
        };
        Some(key)
    }

    /// The KEYS of a script whose fixed KEYS are all this queue's, in its shape's order
    /// (a name that is not one of [`QueueKeys::named`] is left out: the shape tests catch
    /// that).
    pub(crate) fn for_script(&self, script: &LuaScript) -> Vec<Key> {
        script
            .shape()
            .map(|shape| shape.fixed_keys())
            .unwrap_or_default()
            .iter()
            .filter_map(|name| self.named(name))
            .map(Key::from)
            .collect()
    }

    /// Every key, for management and cleanup.
    /// (Not the lists and sets of the leases themselves: [`QueueKeys::lease`] names them,
    /// from the tokens in `leases`; nor the keys' waiting lists, [`QueueKeys::key_queue`].)
    pub fn all(&self) -> [&str; 24] {
        [
            &self.ready,
            &self.msgs,
            &self.deliveries,
            &self.inflight,
            &self.delayed,
            &self.errors,
            &self.dead,
            &self.dead_info,
            &self.seq,
            &self.suspects,
            &self.isolated,
            &self.leases,
            &self.leased,
            &self.flow,
            &self.flow_starts,
            &self.kheads,
            &self.kready,
            &self.kbusy,
            &self.kof,
            &self.kdue,
            &self.kwait,
            &self.holders,
            &self.seen,
            &self.since,
        ]
    }

    /// List of the envelopes of deleted dead letters that carry an attachment (the
    /// `bus-attachment` header), written by `admin_delete_dead.lua`: an attachment-aware
    /// host (bus-attachments' `OrphanCollector`) pops them and deletes their attachments.
    pub fn attachment_orphans(&self) -> String {
        let base = self.dead.strip_suffix(":dead").unwrap_or(&self.dead);
        format!("{base}:att-orphans")
    }
}

/// String: the lease of a singleton processor's `queue`, holding its holder's token and
/// expiring with the lease's ttl (docs/redis-layout.md, "Singleton leases"). In the
/// queue's slot; on a partitioned queue, one lease for all its partitions.
pub fn singleton(prefix: &str, queue: &str) -> String {
    format!("{prefix}:{{{queue}}}:singleton")
}

/// Set of the subscription names of a topic (in the topic's slot).
pub fn subscriptions(prefix: &str, topic: &str) -> String {
    format!("{prefix}:{{{topic}}}:subs")
}

/// String: the version of the script protocol the clients of `prefix` speak ("3"),
/// written with `SET NX` by the first client that connects (docs/wire-format.md,
/// "Versioning").
pub fn protocol(prefix: &str) -> String {
    format!("{prefix}:protocol")
}

/// Stream of the operators' state changes (requeue, delete, purge, ...), capped with
/// `XADD MAXLEN ~` (docs/operations.md, "Audit log"). Not a queue's key: no hash tag.
pub fn audit(prefix: &str) -> String {
    format!("{prefix}:audit")
}

/// Set of known command queue names, for listings.
pub fn queue_registry(prefix: &str) -> String {
    format!("{prefix}:registry:queues")
}

/// Hash of the partitioned command queues: queue name → number of shards, recorded by
/// their consumers for management and foreign producers.
pub fn partition_registry(prefix: &str) -> String {
    format!("{prefix}:registry:partitions")
}

/// Hash of the recurring schedules hosts run: schedule key ([`QueueKeys::schedule`]) →
/// JSON `{name, cron, zone, queue, missed, key}`, written by each host at start for
/// operators (docs/redis-layout.md, "Recurring messages (cron)").
pub fn schedule_registry(prefix: &str) -> String {
    format!("{prefix}:registry:schedules")
}

/// Set of known topic names, for listings.
pub fn topic_registry(prefix: &str) -> String {
    format!("{prefix}:registry:topics")
}

/// A `SCAN MATCH` pattern for the keys of every queue, subscription queue and topic under
/// `prefix` (they all start `<prefix>:{`), or under any prefix when `None`. Read what each
/// key found belongs to with [`source_of_key`] and [`topic_of_key`]: the pattern also
/// matches keys that are not the bus's.
pub fn discovery_pattern(prefix: Option<&str>) -> String {
    match prefix {
        Some(prefix) => format!("{}:{{*", escape_glob(prefix)),
        None => "*:{*}:*".to_owned(),
    }
}

/// The prefix and the queue or subscription whose key this is (one of
/// [`QueueKeys::all`]); `None` for any other key, or a name the bus would refuse.
pub fn source_of_key(key: &str) -> Option<(String, Source)> {
    let (prefix, tag, rest) = split_tagged(key)?;
    let source = match rest.strip_prefix(":s:") {
        Some(rest) => Source::subscription(tag, rest.split_once(':')?.0).ok()?,
        None => Source::queue(tag).ok()?,
    };
    let keys = QueueKeys::new(prefix, &source);
    keys.all()
        .contains(&key)
        .then(|| (prefix.to_owned(), source))
}

/// The prefix, queue and shard whose key this is (one of [`QueueKeys::all`] of
/// [`QueueKeys::shard`]); `None` for any other key, an unpartitioned queue's included.
pub fn shard_of_key(key: &str) -> Option<(String, String, u16)> {
    let (prefix, tag, _) = split_tagged(key)?;
    let (queue, shard) = tag.rsplit_once(':')?;
    // Only the canonical spelling: "01" or "+1" would be another tag.
    let number: u16 = shard.parse().ok()?;
    if number.to_string() != shard {
        return None;
    }
    bus_core::transport::validate_name("queue", queue).ok()?;
    QueueKeys::shard(prefix, queue, number)
        .all()
        .contains(&key)
        .then(|| (prefix.to_owned(), queue.to_owned(), number))
}

/// The prefix and the topic whose subscription set ([`subscriptions`]) this key is.
pub fn topic_of_key(key: &str) -> Option<(String, String)> {
    let (prefix, tag, _) = split_tagged(key)?;
    (bus_core::transport::validate_name("topic", tag).is_ok() && subscriptions(prefix, tag) == key)
        .then(|| (prefix.to_owned(), tag.to_owned()))
}

/// `<prefix>:{<tag>}<rest>` split in three (a prefix never holds a brace).
fn split_tagged(key: &str) -> Option<(&str, &str, &str)> {
    let (prefix, tagged) = key.split_once(":{")?;
    let (tag, rest) = tagged.split_once('}')?;
    Some((prefix, tag, rest))
}

/// Escapes SCAN MATCH's glob characters (`*`, `?`, `[`, `]`, `\`), so a prefix or name
/// matches only itself; the saga store's patterns use it too.
pub fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys_of_a_queue_share_its_hash_tag() {
        let keys = QueueKeys::new("bus", &Source::queue("orders").unwrap());
        assert_eq!(keys.ready, "bus:{orders}:ready");
        assert_eq!(
            QueueKeys::ready_of("bus", &Source::queue("orders").unwrap()),
            keys.ready
        );
        let mail = Source::subscription("paid", "mail").unwrap();
        assert_eq!(
            QueueKeys::ready_of("app", &mail),
            QueueKeys::new("app", &mail).ready
        );
        assert!(keys.all().iter().all(|k| k.starts_with("bus:{orders}:")));
        let (lease, done) = keys.lease("~L7");
        assert_eq!(lease, "bus:{orders}:leases:~L7");
        assert_eq!(done, "bus:{orders}:leases:~L7:done");
    }

    #[test]
    fn shards_have_their_own_tags_and_are_found_again() {
        let keys = QueueKeys::shard("app", "orders", 2);
        assert_eq!(keys.ready, "app:{orders:2}:ready");
        assert_eq!(QueueKeys::shard_ready_of("app", "orders", 2), keys.ready);
        assert!(keys.all().iter().all(|k| k.starts_with("app:{orders:2}:")));
        for key in keys.all() {
            assert_eq!(source_of_key(key), None, "{key} is no plain queue's");
            assert_eq!(
                shard_of_key(key),
                Some(("app".to_owned(), "orders".to_owned(), 2))
            );
        }
        for other in [
            "app:{orders}:ready",
            "app:{orders:02}:ready",
            "app:{orders:x}:ready",
            "app:{orders:1}:other",
            "app:{bad name:1}:ready",
            "app:registry:partitions",
        ] {
            assert_eq!(shard_of_key(other), None, "{other}");
        }
    }

    #[test]
    fn subscriptions_share_the_topic_tag() {
        let keys = QueueKeys::new("app", &Source::subscription("paid", "mail").unwrap());
        assert_eq!(keys.dead, "app:{paid}:s:mail:dead");
        assert_eq!(subscriptions("app", "paid"), "app:{paid}:subs");
    }

    #[test]
    fn discovered_keys_name_their_queue() {
        assert_eq!(discovery_pattern(Some("app")), "app:{*");
        assert_eq!(discovery_pattern(Some("a*b")), "a\\*b:{*");
        let queue = Source::queue("orders").unwrap();
        let keys = QueueKeys::new("app:x", &queue);
        for key in keys.all() {
            assert_eq!(
                source_of_key(key),
                Some(("app:x".to_owned(), queue.clone()))
            );
        }
        let mail = Source::subscription("paid", "mail").unwrap();
        assert_eq!(
            source_of_key(&QueueKeys::new("app", &mail).dead),
            Some(("app".to_owned(), mail))
        );
        assert_eq!(
            topic_of_key(&subscriptions("app", "paid")),
            Some(("app".to_owned(), "paid".to_owned()))
        );
        for other in [
            "app:{orders}:other",
            "app:{orders}:subs",
            "app:{bad name}:ready",
            "app:{paid}:s:bad name:ready",
            "app:registry:queues",
            "sagas:order:1",
        ] {
            assert_eq!(source_of_key(other), None, "{other}");
        }
        assert_eq!(topic_of_key("app:{orders}:ready"), None);
    }

    #[test]
    fn the_protocol_record_is_no_queues_key() {
        assert_eq!(protocol("app:x"), "app:x:protocol");
        assert_eq!(source_of_key(&protocol("app")), None);
        assert_eq!(topic_of_key(&protocol("app")), None);
        assert!(!protocol("app").starts_with(discovery_pattern(Some("app")).trim_end_matches('*')));
    }
}

/// The KEYS of each consumer script, in the order its header (`lua/*.lua`) lists them:
/// the consumer builds them once per queue, and so do tools that run the scripts
/// directly (the raw-layout benchmark).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ScriptKeys {
    /// `lua/reserve.lua`'s.
    pub reserve: Vec<Key>,
    /// `lua/reserve_alone.lua`'s.
    pub reserve_alone: Vec<Key>,
    /// `lua/ack.lua`'s.
    pub ack: Vec<Key>,
    /// `lua/renew.lua`'s.
    pub renew: Vec<Key>,
    /// `lua/retry.lua`'s.
    pub retry: Vec<Key>,
    /// `lua/dead_letter.lua`'s.
    pub dead_letter: Vec<Key>,
    /// `lua/release.lua`'s.
    pub release: Vec<Key>,
    /// `lua/recover.lua`'s.
    pub recover: Vec<Key>,
    /// `lua/absolve.lua`'s.
    pub absolve: Vec<Key>,
}

impl ScriptKeys {
    /// The KEYS of every script of this queue (or shard), in their shapes' order.
    pub fn new(k: &QueueKeys) -> Self {
        let keys = |script: &LuaScript| k.for_script(script);
        ScriptKeys {
            reserve: keys(&scripts::RESERVE),
            reserve_alone: keys(&scripts::RESERVE_ALONE),
            ack: keys(&scripts::ACK),
            renew: keys(&scripts::RENEW),
            retry: keys(&scripts::RETRY),
            dead_letter: keys(&scripts::DEAD_LETTER),
            release: keys(&scripts::RELEASE),
            recover: keys(&scripts::RECOVER),
            absolve: keys(&scripts::ABSOLVE),
        }
    }
}

/// Hash of the running hosts' heartbeats: field = host id, value = its JSON
/// (docs/redis-layout.md, "Host heartbeats"). Hash tag `{:hosts}`, shared with
/// [`hosts_seen`]: no queue name holds a `:`, so no queue shares it.
pub fn hosts_info(prefix: &str) -> String {
    format!("{prefix}:{{:hosts}}:info")
}

/// Sorted set of the hosts' ids, scored by when each was last seen (Redis's time, ms).
pub fn hosts_seen(prefix: &str) -> String {
    format!("{prefix}:{{:hosts}}:seen")
}

/// List: a requester's reply inbox `inbox` (docs/redis-layout.md, "Request and reply").
/// Hash tag `{:reply:<inbox>}`: no queue name holds a `:`, so no queue shares it.
pub fn reply_inbox(prefix: &str, inbox: &str) -> String {
    format!("{prefix}:{{:reply:{inbox}}}")
}

/// String: the mark of step `step` of message `id` from `source`, holding the step's
/// result (docs/redis-layout.md, "Step marks"). Under the source's base, so each
/// subscription of a topic has its own; a step name holds no `:`, so the key reads from
/// the right.
pub fn step_mark(prefix: &str, source: &Source, id: &str, step: &str) -> String {
    match source {
        Source::Queue(queue) => format!("{prefix}:{{{queue}}}:once:{id}:{step}"),
        Source::Subscription { topic, name } => {
            format!("{prefix}:{{{topic}}}:s:{name}:once:{id}:{step}")
        }
    }
}

/// Hash of one minute's per-type timing (docs/redis-layout.md, "Per-type timing"):
/// field = message type, value = its packed record; `minute` counts minutes since the
/// Unix epoch. Hash tag `{:timing}`, which no queue name can hold.
pub fn timing_minute(prefix: &str, minute: u64) -> String {
    format!("{prefix}:{{:timing}}:{minute}")
}

/// String: the sequence number of the last timing report of `host` recorded, so a
/// report sent twice (a retry after a reconnect) is counted once.
pub fn timing_reported(prefix: &str, host: &str) -> String {
    format!("{prefix}:{{:timing}}:host:{host}")
}
