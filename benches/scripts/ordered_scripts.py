"""What an ordered queue's scripts cost Redis, per message, with no host in the way.

Starts a private redis-server on a loopback port, orders a queue per key (n = 1), sends N
messages over 10,000 keys with `send_keyed.lua`, then reserves 1,000 at a time and acks
each batch at once with `reserve.lua` and `ack.lua`, as a host with 1,000 running would,
until every message is acked. The scripts are the repository's `lua/` files, loaded as
docs/wire-format.md says (the interop test's client, standard library only), or those of
$BUS_LUA_DIR, so that a changed copy can be measured against them.

    python3 benches/scripts/ordered_scripts.py                # time per script (SLOWLOG)
    CALLGRIND=/tmp/x.out python3 benches/scripts/ordered_scripts.py
        # redis-server's instructions per message under callgrind, counted over the
        # reserve/ack loop only: deterministic, for comparing two copies of the scripts

N (100000; 20000 is enough under callgrind), PORT (6399) and REDIS_SERVER (the binary, for
one built with symbols) come from the environment; UNORDERED=1 runs the same loop on an
unordered queue (plain `RPUSH` sends), the baseline an ordered message is compared with.
"""

import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "crates", "bus-redis", "tests", "interop"))
from resp import QueueKeys, Redis, Script  # noqa: E402

N = int(os.environ.get("N", "100000"))
PORT = int(os.environ.get("PORT", "6399"))
KEYS, BATCH = 10_000, 1_000
CALLGRIND = os.environ.get("CALLGRIND")
UNORDERED = os.environ.get("UNORDERED")
BODY = ('{"v":1,"id":"%s","type":"Order","sent":1,"headers":{},"body":{"order_id":"%d",'
        '"amount":1234,"currency":"EUR","customer":"c-1","lines":[1,2,3]}}')


def bitmap(n):
    """ack's bits for indices 0 .. n - 1 of a lease (docs/wire-format.md, "The calls")."""
    bits = bytearray((n + 7) // 8)
    for i in range(n):
        bits[i // 8] |= 0x80 >> (i % 8)
    return bytes(bits)


def wait_for(redis_url, deadline):
    while True:
        try:
            return Redis(redis_url)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main():
    under = (["valgrind", "--tool=callgrind", "--instr-atstart=no",
              f"--callgrind-out-file={CALLGRIND}"] if CALLGRIND else [])
    server = subprocess.Popen(
        under + [os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(PORT), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", tempfile.mkdtemp()],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        r = wait_for(f"redis://127.0.0.1:{PORT}", time.monotonic() + 30)
        run(r, server)
    finally:
        server.terminate()
        server.wait()
    if CALLGRIND:
        out = subprocess.run(["callgrind_annotate", CALLGRIND], capture_output=True,
                             text=True, check=True).stdout
        total = next(line for line in out.splitlines() if "PROGRAM TOTALS" in line)
        print(f"redis-server: {int(total.split()[0].replace(',', '')) / N:.0f} "
              "instructions per message (reserve and ack)")


def run(r, server):
    k = QueueKeys("bus", "q")
    if not UNORDERED:
        r.call("HSET", k.flow, "per_key", "1")
    send, reserve, ack = Script("send_keyed"), Script("reserve"), Script("ack")
    for i in range(N):
        if UNORDERED:
            r.call("RPUSH", k.ready, BODY % (f"m{i:07d}", i))
            continue
        send.run(r, [k.ready, k.flow, k.kheads, k.kbusy, k.kq, k.delayed, k.msgs, k.kdue],
                 [f"key-{i % KEYS}", BODY % (f"m{i:07d}", i)])
    reserve_keys = [k.ready, k.msgs, k.deliveries, k.inflight, k.delayed, k.seq,
                    k.dead_info, k.suspects, k.leases, k.leased, k.flow, k.flow_starts,
                    k.kheads, k.kbusy, k.kq, k.kdue, k.kwait, k.kstarts, k.holders, k.kready]
    ack_keys = [k.inflight, k.msgs, k.deliveries, k.errors, k.isolated, k.leases, k.leased,
                k.kof, k.kbusy, k.kheads, k.kq, k.ready, k.holders]
    # Compiled before the count starts, and no slow log under callgrind (where every call
    # is slow enough to be logged, and logging one copies its arguments).
    for script in (reserve, ack):
        r.call("SCRIPT", "LOAD", script.text)
    if CALLGRIND:
        r.call("CONFIG", "SET", "slowlog-log-slower-than", "-1")
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)],
                       capture_output=True, check=True)
    else:
        r.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        r.call("CONFIG", "SET", "slowlog-max-len", str(4 * N))
        r.call("SLOWLOG", "RESET")
    done = 0
    while done < N:
        reply = reserve.run(r, reserve_keys, [BATCH, 60_000, "bench", BATCH])
        token, leased = reply[2], reply[3]
        if not leased:
            raise SystemExit(f"reserve took nothing after {done} of {N}: {reply[:3]}")
        acked = ack.run(r, ack_keys, [0, 1, token, bitmap(len(leased))])
        if acked != len(leased):
            raise SystemExit(f"ack settled {acked} of {len(leased)}")
        done += len(leased)
    if CALLGRIND:
        subprocess.run(["callgrind_control", "-i", "off", str(server.pid)],
                       capture_output=True, check=True)
        return
    names = {reserve.sha: "reserve", ack.sha: "ack"}
    totals = {}
    for entry in r.call("SLOWLOG", "GET", str(4 * N)):
        args = entry[3]
        name = args[0].decode().upper()
        if name == "EVALSHA":
            name = names.get(args[1].decode(), "EVALSHA")
        calls, us = totals.get(name, (0, 0))
        totals[name] = (calls + 1, us + entry[2])
    print("script or command (inside the scripts), calls, µs per message:")
    for name, (calls, us) in sorted(totals.items(), key=lambda t: -t[1][1]):
        print(f"  {name:14s} {calls:7d} {us / N:7.2f}")


if __name__ == "__main__":
    main()
