"""A foreign consumer: `consumer.py URL PREFIX QUEUE N`.

Consumes N messages of command queue QUEUE with the bus's own scripts, as
docs/wire-format.md describes: `reserve` (common.lua + reserve.lua) moves messages into
flight, each envelope is decoded and checked, and `ack` (common.lua + ack.lua) removes
them. While the queue is empty it blocks with `BLMOVE ready ready LEFT LEFT 1` (a no-op
rotation that wakes it when a message arrives). Prints one JSON line per message:
{"storage_id", "delivery", "id", "type", "sent", "headers", "body"}.

Exits non-zero, with the reason on stderr, on anything unexpected or after 30 s.
"""

import sys

sys.dont_write_bytecode = True

import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from resp import QueueKeys, Redis, Script, fail  # noqa: E402

LOCK_MS = 30_000
# This consumer's id, recorded as the holder of the locks it takes (docs/redis-layout.md,
# "Holders and presence"): unique per run.
HOLDER = f"py-{os.getpid()}-{time.time_ns()}"
BATCH = 10
DEADLINE_S = 30.0


def check(envelope, queue):
    """Checks an envelope against envelope version 1; returns the reason it is bad, if any."""
    if not isinstance(envelope, dict):
        return "not a JSON object"
    if envelope.get("v") != 1:
        return f"unsupported version {envelope.get('v')!r}"
    if not isinstance(envelope.get("id"), str) or not envelope["id"]:
        return "missing id"
    if envelope.get("type") != queue:
        return f"type {envelope.get('type')!r} is not {queue!r}"
    if not isinstance(envelope.get("sent"), int):
        return "missing sent"
    headers = envelope.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        return "headers are not a string map"
    if "body" not in envelope:
        return "missing body"
    return None


def main():
    if len(sys.argv) != 5:
        fail("usage: consumer.py URL PREFIX QUEUE N")
    url, prefix, queue, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    keys = QueueKeys(prefix, queue)
    reserve, reserve_alone, ack = Script("reserve"), Script("reserve_alone"), Script("ack")
    judge = Script("breaker_judge")
    redis = Redis(url)
    deadline = time.monotonic() + DEADLINE_S
    received = 0
    while received < count:
        if time.monotonic() > deadline:
            fail(f"timed out: received {received} of {count}")
        reply = reserve.run(
            redis,
            [keys.ready, keys.msgs, keys.deliveries, keys.inflight, keys.delayed, keys.seq,
             keys.dead_info, keys.suspects, keys.leases, keys.leased, keys.flow,
             keys.flow_starts, keys.kheads, keys.kbusy, keys.kq, keys.kdue, keys.kwait,
             keys.kstarts, keys.holders, keys.kready],
            [min(BATCH, count - received), LOCK_MS, HOLDER, min(BATCH, count - received)],
        )
        # [wait_ms, pending, lease token, [envelope, ...], position, storage_id,
        #  delivery_count, envelope, ...]: the leased envelopes (delivery 1, receipt:
        # token and index) fill the positions the stored messages leave free.
        wait_ms, pending = reply[0], reply[1]
        if 2 <= pending <= 5:
            # Flow control holds the queue back (2 paused, 3 at its concurrency limit, 4 at
            # its rate limit, free again in wait_ms; 5 a fleet circuit breaker, next probe
            # in wait_ms, or sooner if a probe closes it): nothing was taken.
            pause = {4: wait_ms, 5: min(max(wait_ms, 1), 250)}.get(pending, 100)
            time.sleep(pause / 1000)
            continue
        # 6: the breaker's cool-down is over and the message, if any, is its probe: this
        # consumer handles every message successfully, so it closes the breaker below.
        probe = pending == 6
        if probe:
            pending = 0
        token, leased, quads = reply[2], reply[3], reply[4:]
        stored = {quads[i]: quads[i + 1:i + 4] for i in range(0, len(quads), 4)}
        messages, index = [], 0
        for position in range(len(leased or []) + len(stored)):
            if position in stored:
                messages.append(tuple(stored[position]))
            else:
                messages.append((token, 1, leased[index], index))
                index += 1
        if pending:
            # Recovered messages wait to run alone: this consumer holds nothing (it acks
            # each batch before the next reserve), so it takes them one at a time.
            alone = reserve_alone.run(
                redis,
                [keys.suspects, keys.msgs, keys.deliveries, keys.inflight, keys.isolated,
                 keys.leased, keys.flow, keys.flow_starts, keys.holders],
                [LOCK_MS, HOLDER],
            )
            messages = [tuple(alone[1:4])] if len(alone) > 1 else []
            probe = len(alone) > 4 and alone[4] == 6
            if alone[0] >= 2:
                continue
        if not messages:
            if pending:
                continue
            # Nothing ready: wait for the next push, or until the next delayed message is
            # due (wait_ms), at most a second.
            timeout = 1.0 if wait_ms < 0 else min(max(wait_ms, 1), 1000) / 1000
            redis.call("BLMOVE", keys.ready, keys.ready, "LEFT", "LEFT", f"{timeout:.3f}")
            continue
        stored_receipts, indices = [], []
        for message in messages:
            storage_id, delivery, raw = message[:3]
            name = storage_id if len(message) == 3 else b"%s/%d" % (storage_id, message[3])
            try:
                envelope = json.loads(raw.decode("utf-8"))
            except ValueError as e:
                fail(f"element {name!r} is not a JSON envelope ({e}): {raw[:80]!r}")
            problem = check(envelope, queue)
            if problem:
                fail(f"element {name!r}: {problem}: {raw[:200]!r}")
            print(json.dumps({
                "storage_id": name.decode("utf-8"),
                "delivery": delivery,
                "id": envelope["id"],
                "type": envelope["type"],
                "sent": envelope["sent"],
                "headers": envelope.get("headers", {}),
                "body": envelope["body"],
            }, ensure_ascii=False), flush=True)
            # The reservation token: (storage id, delivery count) for a stored message,
            # (lease token, index) for a leased one.
            if len(message) == 3:
                stored_receipts += [storage_id, delivery]
            else:
                indices.append(message[3])
        args = [len(stored_receipts) // 2, 1 if indices else 0] + stored_receipts
        if indices:
            # The lease's bits: bit i (the high bit of each byte first) for index i.
            bits = bytearray(max(indices) // 8 + 1)
            for index in indices:
                bits[index // 8] |= 0x80 >> (index % 8)
            args += [token, bytes(bits)]
        acked = ack.run(
            redis, [keys.inflight, keys.msgs, keys.deliveries, keys.errors, keys.isolated,
                    keys.leases, keys.leased, keys.kof, keys.kbusy, keys.kheads, keys.kq,
                    keys.ready, keys.holders],
            args)
        if acked != len(messages):
            fail(f"ack removed {acked} of {len(messages)} messages")
        if probe:
            # Whoever settles a probe judges it: acked, so the breaker closes for everyone.
            judge.run(redis, [keys.flow], ["ok"])
        received += len(messages)
    redis.close()


if __name__ == "__main__":
    main()
