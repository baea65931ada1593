"""A foreign producer: `producer.py URL PREFIX QUEUE N`.

RPUSHes N plain JSON envelopes (docs/wire-format.md) onto `PREFIX:{QUEUE}:ready` in one
command, and prints each envelope as pushed, one per line. Even-numbered messages carry
W3C trace context headers; odd-numbered ones omit `headers`, which is optional.
"""

import sys

sys.dont_write_bytecode = True

import json  # noqa: E402
import secrets  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

from resp import QueueKeys, Redis, fail  # noqa: E402


def envelope(queue, n):
    message = {
        "v": 1,
        "id": str(uuid.uuid4()),
        "type": queue,
        "sent": int(time.time() * 1000),
    }
    if n % 2 == 0:
        trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
        message["headers"] = {
            "traceparent": f"00-{trace_id}-{span_id}-01",
            "tracestate": "py=interop",
            "x-origin": "python",
        }
    message["body"] = {"n": n, "text": f"héllo ✓ from Python #{n}"}
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def main():
    if len(sys.argv) != 5:
        fail("usage: producer.py URL PREFIX QUEUE N")
    url, prefix, queue, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    redis = Redis(url)
    envelopes = [envelope(queue, n) for n in range(count)]
    # One RPUSH per batch: the batch is enqueued whole, in order.
    for start in range(0, len(envelopes), 1000):
        redis.call("RPUSH", QueueKeys(prefix, queue).ready, *envelopes[start:start + 1000])
    redis.close()
    for line in envelopes:
        print(line)


if __name__ == "__main__":
    main()
