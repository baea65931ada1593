"""Drives the real BabelQueue Python SDK (babelqueue[redis]==1.24.0) for the Rust tests.

Every subcommand prints JSON lines on stdout; SDK warnings go to stderr (the tests read
them). Usage: bq.py <command> --url URL --layout legacy|laravel --queue Q [options]
"""

import argparse
import json
import logging
import sys
import time

from babelqueue import BabelQueue
from babelqueue.codec import EnvelopeCodec
from babelqueue.headers import headers_from_context
from babelqueue.redis_transport import RedisTransport
from babelqueue.redrive import redrive

URN = "urn:babel:orders:created"


def app_for(args, **kwargs):
    transport = RedisTransport(
        args.url,
        laravel_compat=(args.layout == "laravel"),
        retry_after=args.retry_after,
    )
    return BabelQueue(transport=transport, queue=args.queue, **kwargs)


def emit(obj):
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def data_for(i):
    # Values that a careless re-encoding would change.
    return {"i": i, "text": "ü / \"q\" \u2028", "big": 9007199254740993, "empty": [], "ratio": 0.1}


def cmd_publish(args):
    app = app_for(args)
    for i in range(args.start, args.start + args.count):
        data = data_for(i)
        trace_id = "trace-%d" % i
        headers = {}
        if args.headers:
            headers = {"traceparent": "00-%032x-%016x-01" % (i + 1, i + 1), "x-index": str(i)}
            mid = app.publish_with_headers(args.urn, data, headers, trace_id=trace_id)
        else:
            mid = app.publish(args.urn, data, trace_id=trace_id)
        emit({"id": mid, "trace_id": trace_id, "data": data, "headers": headers})


def cmd_publish_delayed(args):
    app = app_for(args)
    env = EnvelopeCodec.make(args.urn, data_for(0), queue=args.queue)
    # The SDK reads the clock inside the call: the due time lies between the two readings.
    before = time.time()
    app.transport.publish_delayed(args.queue, EnvelopeCodec.encode(env), args.delay)
    emit({"id": env["meta"]["id"], "published_after": before, "published_before": time.time()})


def cmd_consume(args):
    """Consumes up to --count messages (stops when idle for --idle seconds)."""
    app = app_for(args, max_attempts=args.max_attempts, dead_letter=True)

    def handler(data, meta, envelope):
        emit({"id": meta.get("id"), "meta": meta, "data": data, "trace_id": envelope.get("trace_id"),
              "attempts": envelope.get("attempts"), "headers": dict(headers_from_context()),
              "keys": sorted(envelope.keys())})

    app.register(args.urn, handler)
    app.consume(args.queue, max_messages=args.count, timeout=args.idle, handle_signals=False)


def cmd_fail(args):
    """Consumes until idle for --idle seconds with handlers that always raise (for --urn and
    nothing else), so the SDK itself dead-letters after --max-attempts."""
    app = app_for(args, max_attempts=args.max_attempts, dead_letter=True)

    def handler(data, meta):
        emit({"failing": meta.get("id")})
        raise RuntimeError("boom from the Python SDK")

    app.register(args.urn, handler)
    app.consume(args.queue, max_messages=1000000, timeout=args.idle, handle_signals=False)


def cmd_worker(args):
    """Works the queue until SIGTERM; prints each handled id. With --hang-at K it prints
    {"hang": id} on its K-th message and blocks there (for a SIGKILL)."""
    app = app_for(args, max_attempts=args.max_attempts, dead_letter=True)
    seen = [0]

    def handler(data, meta):
        seen[0] += 1
        if args.hang_at and seen[0] == args.hang_at:
            emit({"hang": meta.get("id")})
            time.sleep(3600)
        emit({"id": meta.get("id")})

    app.register(args.urn, handler)
    emit({"ready": True})
    app.consume(args.queue, timeout=0.2)


def cmd_bench(args):
    """Consumes --count messages with a no-op handler; prints the rate from the first
    handled message to the last (interpreter start-up excluded)."""
    app = app_for(args, max_attempts=args.max_attempts, dead_letter=True)
    times = []

    def handler(data, meta):
        times.append(time.perf_counter())

    app.register(args.urn, handler)
    app.consume(args.queue, max_messages=args.count, timeout=args.idle, handle_signals=False)
    seconds = times[-1] - times[0] if len(times) > 1 else 0.0
    emit({"count": len(times), "seconds": seconds})


def cmd_redrive(args):
    """Runs the SDK's redrive over the DLQ (dry run: every record stays) and prints its items."""
    app = app_for(args)
    result = redrive(app.transport, args.dlq, dry_run=True, timeout=0.2)
    for item in result.items:
        emit({"message_id": item.message_id, "trace_id": item.trace_id, "urn": item.urn,
              "reason": item.reason, "to": item.to})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("--url", required=True)
    parser.add_argument("--layout", choices=["legacy", "laravel"], default="legacy")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--retry-after", type=int, default=90)
    parser.add_argument("--urn", default=URN)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--headers", action="store_true")
    parser.add_argument("--delay", type=float, default=0)
    parser.add_argument("--idle", type=float, default=2.0)
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--hang-at", type=int, default=0)
    parser.add_argument("--dlq", default="")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s %(message)s")
    commands = {
        "publish": cmd_publish,
        "publish-delayed": cmd_publish_delayed,
        "consume": cmd_consume,
        "worker": cmd_worker,
        "fail": cmd_fail,
        "redrive": cmd_redrive,
        "bench": cmd_bench,
    }
    commands[args.command](args)


if __name__ == "__main__":
    main()
