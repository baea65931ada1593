"""A tiny Redis client over a socket (RESP2), plus the bus's key layout and script loading.

Standard library only, so that the interop test (SPEC §4.3) needs nothing from pip. It
follows docs/wire-format.md and docs/redis-layout.md exactly as a foreign producer or
consumer in any language would.
"""

import hashlib
import os
import socket
import sys
from urllib.parse import unquote, urlsplit


class RedisError(Exception):
    """An error reply from Redis (`-ERR ...`, `-NOSCRIPT ...`)."""


class Redis:
    """One blocking connection. `call` sends a command and returns its decoded reply:
    bytes (bulk string), str (simple string), int, list, or None (nil)."""

    def __init__(self, url, timeout=10.0):
        parts = urlsplit(url)
        if parts.scheme != "redis":
            raise ValueError(f"only redis:// URLs are supported here, not {url!r}")
        self.sock = socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 6379), timeout=timeout
        )
        self.reader = self.sock.makefile("rb")
        if parts.password is not None:
            user = unquote(parts.username) if parts.username else None
            password = unquote(parts.password)
            self.call("AUTH", *([user] if user else []), password)
        database = parts.path.lstrip("/")
        if database and database != "0":
            self.call("SELECT", database)

    def close(self):
        self.reader.close()
        self.sock.close()

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for arg in args:
            if isinstance(arg, str):
                arg = arg.encode("utf-8")
            elif isinstance(arg, int):
                arg = str(arg).encode("ascii")
            out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
        self.sock.sendall(b"".join(out))
        reply = self._read()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def _read(self):
        line = self.reader.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by Redis")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode("utf-8")
        if kind == b"-":
            return RedisError(rest.decode("utf-8", "replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.reader.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed by Redis")
            return data[:-2]
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            # An error inside an array (from a script) is returned, not raised.
            return [self._read() for _ in range(n)]
        raise ConnectionError(f"unexpected RESP reply {line!r}")


class QueueKeys:
    """The keys of a command queue (docs/redis-layout.md): `<prefix>:{<queue>}:<suffix>`."""

    SUFFIXES = ("ready", "msgs", "deliveries", "inflight", "delayed",
                "errors", "dead", "dead-info", "seq", "suspects", "isolated", "leases",
                "leased", "flow", "flow-starts", "kheads", "kready", "kbusy", "kof", "kq", "kdue", "kwait",
                "kstarts", "holders", "seen", "since")

    def __init__(self, prefix, queue):
        base = f"{prefix}:{{{queue}}}"
        for suffix in self.SUFFIXES:
            setattr(self, suffix.replace("-", "_"), f"{base}:{suffix}")


def lua_dir():
    """The bus's `lua/` directory: $BUS_LUA_DIR, else crates/bus-redis/lua beside us."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("BUS_LUA_DIR") or os.path.join(here, "..", "..", "lua")


# The consumer-side scripts, which start with the flag line that lets them run on a full
# Redis (docs/wire-format.md, "Loading a script").
ALLOW_OOM = {"reserve", "reserve_alone", "ack", "renew", "retry", "dead_letter", "release",
             "recover", "absolve", "breaker_judge"}


# The prelude files of each script this client runs, after `common.lua`
# (docs/wire-format.md, "Loading a script"): per-key ordering's helpers, flow control's.
WITH_KEYED = {"reserve", "ack", "dead_letter", "recover", "send_keyed", "send_keyed_at",
              "send_once", "send_once_batch"}
WITH_FLOW = {"reserve", "reserve_alone"}


class Script:
    """A bus script: `common.lua` (then `keyed.lua` and `flow.lua` where the table of
    docs/wire-format.md says so) followed by `<name>.lua`, concatenated with nothing in between (as crates/bus-redis/src/scripts.rs
    does), after the line `#!lua flags=allow-oom` for a consumer-side script; run by SHA
    with an EVAL fallback."""

    def __init__(self, name):
        text = b"#!lua flags=allow-oom\n" if name in ALLOW_OOM else b""
        parts = (["common"] + (["keyed"] if name in WITH_KEYED else [])
                 + (["flow"] if name in WITH_FLOW else []) + [name])
        for part in parts:
            with open(os.path.join(lua_dir(), part + ".lua"), "rb") as f:
                text += f.read()
        self.name = name
        self.text = text
        self.sha = hashlib.sha1(text).hexdigest()

    def run(self, redis, keys, args):
        try:
            return redis.call("EVALSHA", self.sha, len(keys), *keys, *args)
        except RedisError as e:
            if not str(e).startswith("NOSCRIPT"):
                raise
            # Not cached (first use, or Redis restarted): EVAL also caches it.
            return redis.call("EVAL", self.text, len(keys), *keys, *args)


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)
