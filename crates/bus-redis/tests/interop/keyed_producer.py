"""A foreign producer of a partitioned queue: `keyed_producer.py URL PREFIX QUEUE SHARDS KEY...`.

For each KEY, RPUSHes one plain JSON envelope (docs/wire-format.md) onto the ready list of
shard `fnv1a64(KEY) mod SHARDS`, `PREFIX:{QUEUE:i}:ready` (docs/redis-layout.md,
"Partitioned queues"), and prints `{"key": KEY, "shard": i, "n": n}` per message.
"""

import sys

sys.dont_write_bytecode = True

import json  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

from resp import Redis, fail  # noqa: E402


def fnv1a64(data):
    """FNV-1a, 64-bit, as documented: offset basis 0xcbf29ce484222325, prime 0x100000001b3."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) % (1 << 64)
    return h


def main():
    if len(sys.argv) < 6:
        fail("usage: keyed_producer.py URL PREFIX QUEUE SHARDS KEY...")
    url, prefix, queue, shards = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    redis = Redis(url)
    for n, key in enumerate(sys.argv[5:]):
        shard = fnv1a64(key.encode("utf-8")) % shards
        envelope = json.dumps({
            "v": 1,
            "id": str(uuid.uuid4()),
            "type": queue,
            "sent": int(time.time() * 1000),
            "body": {"n": n},
        }, separators=(",", ":"))
        redis.call("RPUSH", f"{prefix}:{{{queue}:{shard}}}:ready", envelope)
        print(json.dumps({"key": key, "shard": shard, "n": n}))
    redis.close()


if __name__ == "__main__":
    main()
