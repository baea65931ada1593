//! The Lua scripts of every transition (see `lua/` and docs/redis-layout.md), run by SHA
//! with a `NOSCRIPT` fallback (fred's `evalsha_with_reload`).

use std::sync::LazyLock;

use bytes::Bytes;
use fred::error::{Error as FredError, ErrorKind};
use fred::prelude::{Client, ClientLike};
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand, Key, MultipleKeys, Resp3Frame, Value};

use crate::shape::Shape;
use crate::{Error, Result};

/// A Lua script and its name (for error messages), run by SHA with a `NOSCRIPT`
/// fallback: Redis forgets scripts when it restarts without persistence, and fred then
/// loads the script on every primary and runs it again. The saga store and the
/// management tool run theirs through this too.
#[derive(Debug)]
pub struct LuaScript {
    name: &'static str,
    script: Script,
    shape: Option<Shape>,
    /// The prelude files it was built with, in order (`common`, `flow`, ...).
    preludes: Vec<&'static str>,
    /// The `#!lua` line it starts with, if any.
    shebang: &'static str,
}

impl LuaScript {
    /// A script; its SHA is computed here, once.
    pub fn new(name: &'static str, source: &'static str) -> Self {
        LuaScript {
            name,
            script: Script::from_lua(source),
            shape: None,
            preludes: Vec::new(),
            shebang: "",
        }
    }

    /// A script built by [`lua!`](crate::lua): `shebang` (empty, or a `#!lua` line), then
    /// the prelude files' definitions that the rest reaches (src/prelude.rs), then the
    /// shape's header ([`Shape::header`]: the call's check and the KEYS' names), then
    /// `body`.
    pub fn assemble(
        name: &'static str,
        shebang: &'static str,
        preludes: &[(&'static str, &'static str)],
        shape: Option<Shape>,
        body: &'static str,
    ) -> Self {
        let texts: String = preludes.iter().map(|(_, text)| *text).collect();
        let text = shebang.to_owned() + &crate::prelude::assemble(&texts, body);
        LuaScript {
            name,
            script: Script::from_lua(text),
            shape,
            preludes: preludes.iter().map(|(name, _)| *name).collect(),
            shebang,
        }
    }

    /// The prelude files it was built with, in order.
    pub fn preludes(&self) -> &[&'static str] {
        &self.preludes
    }

    /// Whether it runs on a full Redis (`#!lua flags=allow-oom`).
    pub fn allow_oom(&self) -> bool {
        self.shebang.contains("allow-oom")
    }

    /// The script's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What the script takes, when it was declared with its shape.
    pub fn shape(&self) -> Option<Shape> {
        self.shape
    }

    /// The script's whole text, as loaded into Redis.
    pub fn text(&self) -> &str {
        self.script.lua().map_or("", |text| &**text)
    }

    /// fred's script (its SHA and source), for a pipeline of its own (durable sends).
    pub(crate) fn fred(&self) -> &Script {
        &self.script
    }

    /// Runs the script, loading it first if Redis does not know it.
    pub async fn run(
        &self,
        client: &Client,
        keys: impl Into<MultipleKeys> + Send,
        args: Vec<Value>,
    ) -> Result<Value, fred::error::Error> {
        self.script.evalsha_with_reload(client, keys, args).await
    }

    /// Runs the script as [`run`](Self::run) does, on the node of hash slot `slot`, and
    /// gives its reply as the frame fred read, not made into a [`Value`]: for the reply of
    /// a reserve, whose every envelope fred would check for UTF-8 and move into a `Value`
    /// tree (~650 instructions per envelope under callgrind), only to be taken apart again.
    pub(crate) async fn run_raw(
        &self,
        client: &Client,
        slot: u16,
        keys: &[Key],
        args: &[Value],
    ) -> Result<Resp3Frame, FredError> {
        let call = || {
            let mut all = Vec::with_capacity(2 + keys.len() + args.len());
            all.push(Value::from(self.script.sha1().clone()));
            all.push(Value::from(keys.len() as i64));
            all.extend(keys.iter().cloned().map(Value::from));
            all.extend(args.iter().cloned());
            let evalsha = CustomCommand::new("EVALSHA", ClusterHash::Custom(slot), false);
            client.custom_raw(evalsha, all)
        };
        let mut frame = call().await?;
        if matches!(&frame, Resp3Frame::SimpleError { data, .. } if data.starts_with("NOSCRIPT")) {
            self.script.load(client).await?;
            frame = call().await?;
        }
        match frame {
            // Made into fred's error as `run` makes it (its kind read from the reply).
            error @ (Resp3Frame::SimpleError { .. } | Resp3Frame::BlobError { .. }) => {
                Err(Value::try_from(error)
                    .err()
                    .unwrap_or_else(|| FredError::new(ErrorKind::Unknown, "an error reply")))
            }
            frame => Ok(frame),
        }
    }
}

/// A [`LuaScript`] from the calling crate's `lua/` directory, for every crate of the bus
/// (this one, the saga store, BabelQueue), so a script's text is built one way everywhere:
///
/// - `lua!("ack")`: `lua/ack.lua` alone;
/// - `lua!("ack", ["common"])`: the helpers of `lua/common.lua` that `lua/ack.lua` uses,
///   then `lua/ack.lua` (preludes in the order given; unused helpers are left out, see
///   src/prelude.rs);
/// - `lua!("ack", ["common"], flags = "allow-oom")`: behind a `#!lua flags=allow-oom`
///   shebang;
/// - `lua!("ack", ["common"], keys = ["inflight", ...], argv = ["s:int", "receipts..."])`:
///   with its [`Shape`](crate::shape::Shape), whose header (the call's check, the KEYS'
///   names) opens the script.
///
/// The paths are relative to the file that calls the macro (`include_str!` resolves
/// them at the call site), which must sit one directory below `lua/` (`src/scripts.rs`).
#[macro_export]
macro_rules! lua {
    ($name:literal $(, [$($prelude:literal),* $(,)?])? $(, flags = $flags:literal)?
     $(, keys = [$($key:literal),* $(,)?], argv = [$($arg:literal),* $(,)?])? $(,)?) => {
        $crate::LuaScript::assemble(
            $name,
            concat!($("#!lua flags=", $flags, "\n",)? ""),
            &[$($(($prelude, include_str!(concat!("../lua/", $prelude, ".lua"))),)*)?],
            $crate::lua!(@shape $([$($key),*], [$($arg),*])?),
            include_str!(concat!("../lua/", $name, ".lua")),
        )
    };
    (@shape) => { None };
    (@shape [$($key:literal),*], [$($arg:literal),*]) => {
        Some($crate::shape::Shape { keys: &[$($key),*], argv: &[$($arg),*] })
    };
}

// A consumer-side script runs on a full Redis (`maxmemory`, `noeviction`): it only
// moves, counts or removes existing messages, and draining a full Redis needs it
// (`flags = "allow-oom"`). Sends are refused there, with Redis's OOM error.
// An admin script (src/admin) gets the shared helpers, then the dead-letter helpers.

// Each script is hashed once per process, on first use.
pub(crate) static SEND_AT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "send_at",
        ["common"],
        keys = ["delayed", "msgs", "ready"],
        argv = ["due_ms:int", "messages..."],
    )
});
pub(crate) static SEND_KEYED: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "send_keyed",
        ["common", "keyed"],
        keys = ["ready", "flow", "kheads", "kbusy", "kq", "delayed", "msgs", "kdue"],
        argv = ["key", "envelope", "envelopes..."],
    )
});
pub(crate) static SEND_KEYED_AT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "send_keyed_at",
        ["common", "keyed"],
        keys = ["delayed", "msgs", "ready", "flow", "kdue"],
        argv = ["due_ms:int", "key", "messages..."],
    )
});
pub(crate) static PUBLISH: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "publish",
        ["common"],
        keys = ["subs", "ready..."],
        argv = ["s:int", "names..."],
    )
});
/// The single deduplicated send, for foreign producers (the bus sends through
/// `send_once_batch`): in the catalog so that it is checked like every script.
pub(crate) static SEND_ONCE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "send_once",
        ["common", "keyed"],
        keys = ["dedup", "ready", "delayed", "msgs", "keyed..."],
        argv = ["window_ms:int", "due_ms", "id", "envelope", "key..."],
    )
});
pub(crate) static SEND_ONCE_BATCH: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "send_once_batch",
        ["common", "keyed"],
        keys = ["ready", "delayed", "msgs", "more..."],
        argv = ["n:int", "window_ms:int", "due_ms", "key", "messages..."],
    )
});
pub(crate) static SEND_TICK: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "send_tick",
        ["common"],
        keys = ["schedule", "ready"],
        argv = ["tick_ms:int", "catch_up", "envelope"],
    )
});
pub(crate) static PUBLISH_AT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "publish_at",
        ["common"],
        keys = ["subs", "queues..."],
        argv = ["s:int", "names..."],
    )
});
pub(crate) static CANCEL: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "cancel",
        ["common"],
        keys = ["delayed", "msgs", "deliveries", "errors", "kdue"],
        argv = ["id"],
    )
});
pub(crate) static RESCHEDULE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "reschedule",
        ["common"],
        keys = ["delayed", "ready"],
        argv = ["id", "due_ms:int"],
    )
});
pub(crate) static READ_SCHEDULED: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "read_scheduled",
        ["common"],
        keys = ["delayed", "msgs"],
        argv = ["id"],
    )
});
pub(crate) static RESERVE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "reserve",
        ["common", "keyed", "flow"],
        flags = "allow-oom",
        keys = [
            "ready",
            "msgs",
            "deliveries",
            "inflight",
            "delayed",
            "seq",
            "dead-info",
            "suspects",
            "leases",
            "leased",
            "flow",
            "flow-starts",
            "kheads",
            "kbusy",
            "kq",
            "kdue",
            "kwait",
            "kstarts",
            "holders",
            "kready"
        ],
        argv = ["max:int", "lock_ms:int", "holder", "start_now:int"],
    )
});
/// Trips a queue's fleet circuit breaker (`flow` hash).
pub(crate) static BREAKER_TRIP: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "breaker_trip",
        ["common"],
        keys = ["flow"],
        argv = ["cool_down_ms:int"],
    )
});
/// Holds a running probe's slot one more lock timeout.
/// Judges a fleet circuit breaker's probe once it is settled (docs/redis-layout.md).
pub(crate) static BREAKER_JUDGE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "breaker_judge",
        ["common"],
        flags = "allow-oom",
        keys = ["flow"],
        argv = ["outcome"],
    )
});
pub(crate) static BREAKER_HOLD: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "breaker_hold",
        ["common"],
        keys = ["flow"],
        argv = ["lock_ms:int"],
    )
});
pub(crate) static RESERVE_ALONE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "reserve_alone",
        ["common", "flow"],
        flags = "allow-oom",
        keys = [
            "suspects",
            "msgs",
            "deliveries",
            "inflight",
            "isolated",
            "leased",
            "flow",
            "flow-starts",
            "holders"
        ],
        argv = ["lock_ms:int", "holder"],
    )
});
pub(crate) static ACK: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "ack",
        ["common", "keyed"],
        flags = "allow-oom",
        keys = [
            "inflight",
            "msgs",
            "deliveries",
            "errors",
            "isolated",
            "leases",
            "leased",
            "kof",
            "kbusy",
            "kheads",
            "kq",
            "ready",
            "holders"
        ],
        argv = ["s:int", "l:int", "receipts..."],
    )
});
pub(crate) static RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "renew",
        ["common"],
        flags = "allow-oom",
        keys = ["inflight", "deliveries", "leases", "seen", "since"],
        argv = [
            "lock_ms:int",
            "holder",
            "dead_after_ms:int",
            "s:int",
            "receipts..."
        ],
    )
});
pub(crate) static RETRY: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "retry",
        ["common"],
        flags = "allow-oom",
        keys = [
            "inflight",
            "deliveries",
            "errors",
            "ready",
            "delayed",
            "isolated",
            "msgs",
            "leases",
            "leased",
            "holders",
            "kof"
        ],
        argv = ["id", "count", "delay_ms:int", "error"],
    )
});
pub(crate) static DEAD_LETTER: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "dead_letter",
        ["common", "keyed"],
        flags = "allow-oom",
        keys = [
            "inflight",
            "deliveries",
            "errors",
            "dead",
            "dead-info",
            "isolated",
            "msgs",
            "leases",
            "leased",
            "flow",
            "kof",
            "kbusy",
            "kheads",
            "kq",
            "ready",
            "holders"
        ],
        argv = ["id", "count", "reason", "error"],
    )
});
pub(crate) static RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "release",
        ["common"],
        flags = "allow-oom",
        keys = [
            "inflight",
            "deliveries",
            "ready",
            "isolated",
            "suspects",
            "leases",
            "leased",
            "holders",
            "msgs",
            "kof"
        ],
        argv = ["receipts..."],
    )
});
pub(crate) static RECOVER: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "recover",
        ["common", "keyed"],
        flags = "allow-oom",
        keys = [
            "inflight",
            "deliveries",
            "errors",
            "suspects",
            "dead",
            "dead-info",
            "isolated",
            "msgs",
            "leases",
            "leased",
            "flow",
            "kof",
            "kbusy",
            "kheads",
            "kq",
            "ready",
            "holders",
            "seen",
            "since"
        ],
        argv = [
            "delivery_limit:int",
            "batch:int",
            "error",
            "holder",
            "dead_after_ms:int"
        ],
    )
});
pub(crate) static ABSOLVE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "absolve",
        ["common"],
        flags = "allow-oom",
        keys = ["suspects", "ready"],
        argv = ["receipts..."],
    )
});
// A singleton's lease is taken and kept on a full Redis too: its host may be the one
// that drains it.
pub(crate) static SINGLETON_ACQUIRE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "singleton_acquire",
        ["common"],
        flags = "allow-oom",
        keys = ["singleton"],
        argv = ["holder", "ttl_ms:int"],
    )
});
pub(crate) static SINGLETON_RENEW: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "singleton_renew",
        ["common"],
        flags = "allow-oom",
        keys = ["singleton"],
        argv = ["holder", "ttl_ms:int"],
    )
});
pub(crate) static SINGLETON_RELEASE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "singleton_release",
        ["common"],
        flags = "allow-oom",
        keys = ["singleton"],
        argv = ["holder"],
    )
});

/// The reply readers every crate's scripts share (bus-redis's, the saga store's,
/// BabelQueue's, management's): a reply a script never sends is
/// [`Error::Protocol`] naming the script, and a Redis failure is [`Error::Redis`] (or
/// [`Error::Timeout`]) holding a [`RedisError`](crate::RedisError).
impl LuaScript {
    /// Runs the script, loading it first if Redis does not know it; a failure as this
    /// crate's [`Error`].
    pub async fn call(
        &self,
        client: &Client,
        keys: impl Into<MultipleKeys> + Send,
        args: Vec<Value>,
    ) -> Result<Value> {
        Ok(self.run(client, keys, args).await?)
    }

    /// Runs the script and reads an integer reply.
    pub async fn run_int(
        &self,
        client: &Client,
        keys: impl Into<MultipleKeys> + Send,
        args: Vec<Value>,
    ) -> Result<i64> {
        let reply = self.call(client, keys, args).await?;
        self.int(&reply)
    }

    /// Runs the script and reads an array reply (an empty Lua table comes back as an
    /// empty array or as nil: both read as empty).
    pub async fn run_array(
        &self,
        client: &Client,
        keys: impl Into<MultipleKeys> + Send,
        args: Vec<Value>,
    ) -> Result<Vec<Value>> {
        let reply = self.call(client, keys, args).await?;
        self.array(reply)
    }

    /// Reads an array (nil reads as empty).
    pub fn array(&self, value: Value) -> Result<Vec<Value>> {
        match value {
            Value::Array(values) => Ok(values),
            Value::Null => Ok(Vec::new()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Reads an array of strings (ids).
    pub fn strings(&self, value: Value) -> Result<Vec<String>> {
        self.array(value)?
            .into_iter()
            .map(|v| v.as_string().ok_or_else(|| self.unexpected(&v)))
            .collect()
    }

    /// Reads an integer.
    pub fn int(&self, value: &Value) -> Result<i64> {
        value.as_i64().ok_or_else(|| self.unexpected(value))
    }

    /// Reads an optional binary string (nil, or Lua's `false`, is `None`).
    pub fn bytes(&self, value: Value) -> Result<Option<Bytes>> {
        match value {
            Value::Null | Value::Boolean(false) => Ok(None),
            Value::Bytes(b) => Ok(Some(b)),
            Value::String(s) => Ok(Some(s.into_inner())),
            other => Err(self.unexpected(&other)),
        }
    }

    /// The error for a reply this script never sends: a bug, or a different script
    /// loaded under its SHA.
    pub fn unexpected(&self, reply: &Value) -> Error {
        Error::Protocol {
            script: self.name,
            detail: format!("{reply:?}"),
        }
    }
}

// Search and edit (src/admin/search.rs, src/admin/edit.rs).
pub(crate) static ADMIN_TAKE_FOUND: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_take_found",
        ["common", "admin_common"],
        keys = [
            "ready",
            "delayed",
            "msgs",
            "deliveries",
            "errors",
            "target-ready"
        ],
        argv = ["place", "op", "element", "elements..."],
    )
});
pub(crate) static ADMIN_EDIT_REQUEUE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_edit_requeue",
        ["common", "keyed", "admin_common"],
        keys = [
            "dead",
            "msgs",
            "dead-info",
            "errors",
            "deliveries",
            "ready",
            "edited",
            "flow",
            "kof",
            "kbusy",
            "kheads",
            "kq"
        ],
        argv = ["id", "envelope", "who", "kept:int"],
    )
});

// Host heartbeats (src/report/heartbeat.rs, docs/redis-layout.md "Host heartbeats").
/// Request/reply: a responder's push onto an inbox (docs/redis-layout.md).
pub(crate) static REPLY: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "reply",
        ["common"],
        keys = ["inbox"],
        argv = ["envelope", "keep_ms:int"],
    )
});
pub(crate) static HOST_BEAT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "host_beat",
        keys = ["hosts-info", "hosts-seen"],
        argv = ["host", "record", "keep_ms:int"],
    )
});
pub(crate) static HOST_LEAVE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "host_leave",
        keys = ["hosts-info", "hosts-seen"],
        argv = ["host"],
    )
});

// Per-type timing (src/report/timing.rs, docs/redis-layout.md "Per-type timing").
pub(crate) static TIMING_FLUSH: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "timing_flush",
        keys = ["minute", "reported"],
        argv = [
            "sequence:int",
            "expire_at:int",
            "marker_ttl:int",
            "records..."
        ],
    )
});

// The admin scripts (src/admin, docs/redis-layout.md "Management").
pub(crate) static ADMIN_REQUEUE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_requeue",
        ["common", "admin_common"],
        keys = ["dead", "msgs", "dead-info", "deliveries", "ready"],
        argv = ["selection", "selected..."],
    )
});
pub(crate) static ADMIN_MOVE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_move",
        ["common", "keyed", "admin_common"],
        keys = [
            "dead",
            "msgs",
            "dead-info",
            "errors",
            "deliveries",
            "target-ready",
            "kof",
            "kbusy",
            "kheads",
            "kq",
            "ready"
        ],
        argv = ["selection", "selected..."],
    )
});
pub(crate) static ADMIN_DEAD_ENVELOPES: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_dead_envelopes",
        ["common", "admin_common"],
        keys = ["dead", "msgs"],
        argv = ["ids..."],
    )
});
pub(crate) static ADMIN_DELETE_DEAD: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_delete_dead",
        ["common", "keyed", "admin_common"],
        keys = [
            "dead",
            "msgs",
            "dead-info",
            "errors",
            "deliveries",
            "kof",
            "kbusy",
            "kheads",
            "kq",
            "ready",
            "orphans..."
        ],
        argv = ["ids..."],
    )
});
pub(crate) static ADMIN_PURGE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_purge",
        ["common", "keyed", "admin_common"],
        keys = [
            "ready",
            "delayed",
            "msgs",
            "deliveries",
            "errors",
            "inflight",
            "dead-info",
            "suspects",
            "flow",
            "kheads",
            "kbusy",
            "kq",
            "kdue",
            "kwait",
            "kof",
            "kready"
        ],
        argv = ["max_ready:int", "max_delayed:int", "max_keys:int"],
    )
});
pub(crate) static ADMIN_UNSUBSCRIBE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_unsubscribe",
        ["common", "admin_common"],
        keys = [
            "subs",
            "ready",
            "inflight",
            "delayed",
            "dead",
            "leases",
            "leased",
            "msgs",
            "deliveries",
            "errors",
            "dead-info",
            "seq",
            "suspects",
            "isolated",
            "flow",
            "flow-starts",
            "kheads",
            "kready",
            "kbusy",
            "kof",
            "kdue",
            "kwait",
            "holders",
            "seen",
            "since",
            "kq",
            "kstarts"
        ],
        argv = ["name", "force"],
    )
});
pub(crate) static ADMIN_STATS: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_stats",
        ["common", "admin_common"],
        keys = [
            "ready", "inflight", "delayed", "dead", "msgs", "suspects", "leases", "leased", "flow"
        ],
        argv = [],
    )
});
pub(crate) static ADMIN_KEY_BACKLOGS: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_key_backlogs",
        ["common", "admin_common"],
        keys = ["kheads", "kbusy", "kq", "kwait", "kready"],
        argv = ["keys:int", "top:int"],
    )
});
pub(crate) static ADMIN_IN_FLIGHT: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_in_flight",
        ["common", "admin_common"],
        keys = ["inflight", "msgs", "deliveries", "leases"],
        argv = ["n:int"],
    )
});

pub(crate) static ADMIN_PRESENCE: LazyLock<LuaScript> = LazyLock::new(|| {
    lua!(
        "admin_presence",
        ["common"],
        keys = [
            "msgs",
            "deliveries",
            "inflight",
            "dead-info",
            "lease",
            "lease-done"
        ],
        argv = ["kind", "key", "count:int"],
    )
});

/// Every script of the native layout, for the tests that check them all (their shapes,
/// their files' headers, their refusal of malformed calls) and docs/wire-format.md's
/// table. Not an API.
#[doc(hidden)]
pub fn catalog() -> Vec<&'static LuaScript> {
    vec![
        &SEND_AT,
        &SEND_KEYED,
        &SEND_KEYED_AT,
        &PUBLISH,
        &SEND_ONCE,
        &SEND_ONCE_BATCH,
        &SEND_TICK,
        &PUBLISH_AT,
        &CANCEL,
        &RESCHEDULE,
        &READ_SCHEDULED,
        &RESERVE,
        &BREAKER_TRIP,
        &BREAKER_HOLD,
        &BREAKER_JUDGE,
        &RESERVE_ALONE,
        &ACK,
        &RENEW,
        &RETRY,
        &DEAD_LETTER,
        &RELEASE,
        &RECOVER,
        &ABSOLVE,
        &SINGLETON_ACQUIRE,
        &SINGLETON_RENEW,
        &SINGLETON_RELEASE,
        &ADMIN_TAKE_FOUND,
        &ADMIN_EDIT_REQUEUE,
        &REPLY,
        &HOST_BEAT,
        &HOST_LEAVE,
        &TIMING_FLUSH,
        &ADMIN_REQUEUE,
        &ADMIN_MOVE,
        &ADMIN_DEAD_ENVELOPES,
        &ADMIN_DELETE_DEAD,
        &ADMIN_PURGE,
        &ADMIN_UNSUBSCRIBE,
        &ADMIN_STATS,
        &ADMIN_KEY_BACKLOGS,
        &ADMIN_IN_FLIGHT,
        &ADMIN_PRESENCE,
    ]
}

/// The prelude files of `lua/` (helpers prepended to scripts, no script of their own).
#[doc(hidden)]
pub const PRELUDES: [&str; 4] = ["common", "keyed", "flow", "admin_common"];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every helper a script's text names is defined in it: leaving unused helpers out of
    /// the preludes (src/prelude.rs) never leaves out a used one.
    #[test]
    fn each_script_defines_every_prelude_helper_it_names() {
        let preludes = [
            include_str!("../lua/common.lua"),
            include_str!("../lua/keyed.lua"),
            include_str!("../lua/flow.lua"),
            include_str!("../lua/admin_common.lua"),
        ];
        let helpers: Vec<&str> = preludes
            .iter()
            .flat_map(|prelude| prelude.lines())
            .filter_map(|line| line.strip_prefix("local function "))
            .map(|rest| rest.split('(').next().unwrap())
            .collect();
        assert!(helpers.len() > 30, "{helpers:?}");
        let scripts = catalog();
        let mut left_out = 0;
        for script in scripts {
            let text = script.fred().lua().unwrap().to_string();
            let words: std::collections::HashSet<&str> = text
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .collect();
            for helper in &helpers {
                let defined = text.contains(&format!("local function {helper}("));
                assert!(
                    defined || !words.contains(helper),
                    "{} names {helper} without defining it",
                    script.name()
                );
                left_out += usize::from(!defined);
            }
        }
        assert!(left_out > 0, "no script leaves out any helper");
    }
}
