"""Reads a queue's dead letters from outside Rust: `deadletters.py URL PREFIX QUEUE`.

Prints one JSON line per dead letter, oldest first (docs/wire-format.md, "Dead letters"):
{"storage_id", "reason", "at_ms", "deliveries", "errors", "element"}, where `element` is
the original element, unchanged (decoded as UTF-8 for printing).
"""

import sys

sys.dont_write_bytecode = True

import json  # noqa: E402

from resp import QueueKeys, Redis, fail  # noqa: E402


def main():
    if len(sys.argv) != 4:
        fail("usage: deadletters.py URL PREFIX QUEUE")
    url, prefix, queue = sys.argv[1], sys.argv[2], sys.argv[3]
    keys = QueueKeys(prefix, queue)
    redis = Redis(url)
    for storage_id in redis.call("LRANGE", keys.dead, 0, -1):
        info = json.loads(redis.call("HGET", keys.dead_info, storage_id))
        errors = redis.call("HGET", keys.errors, storage_id)
        deliveries = redis.call("HGET", keys.deliveries, storage_id)
        element = redis.call("HGET", keys.msgs, storage_id)
        print(json.dumps({
            "storage_id": storage_id.decode("utf-8"),
            "reason": info["reason"],
            "at_ms": info["at_ms"],
            "deliveries": int(deliveries) if deliveries is not None else 0,
            "errors": json.loads(errors) if errors is not None else [],
            "element": element.decode("utf-8", "replace"),
        }, ensure_ascii=False))
    redis.close()


if __name__ == "__main__":
    main()
