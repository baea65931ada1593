"""Redis time per reserve.lua call, protocol 2 (BASE, default 366b0bd) against this tree's
protocol-3 script, alternating, on a queue with no flow control set (docs/performance.md,
"Flow control"). Usage from the repository root: python3 scripts/flow_reserve_cost.py PORT
(a redis-server of its own on 127.0.0.1:PORT; it is FLUSHALLed)."""
import os, subprocess, sys
sys.path.insert(0, "crates/bus-redis/tests/interop")
from resp import Redis
port = sys.argv[1]
r = Redis(f"redis://127.0.0.1:{port}")
L = "crates/bus-redis/lua/"
base = os.environ.get("BASE", "366b0bd")
show = lambda f: subprocess.run(["git", "show", f"{base}:{L}{f}"], check=True, capture_output=True).stdout
main = b"#!lua flags=allow-oom\n" + show("common.lua") + show("reserve.lua")
mine = b"#!lua flags=allow-oom\n" + open(L+"common.lua","rb").read() + open(L+"keyed.lua","rb").read() + open(L+"flow.lua","rb").read() + open(L+"reserve.lua","rb").read()
env = b'{"v":1,"id":"m","type":"jobs","sent":1,"body":{"n":1,"pad":"' + b"x"*60 + b'"}}'
def run(name, text, nkeys, batch, calls):
    sha = r.call("SCRIPT", "LOAD", text).decode()
    q = f"b:{{{name}{batch}}}"
    keys = [f"{q}:{s}" for s in ["ready","msgs","deliveries","inflight","delayed","seq","dead-info","suspects","leases","leased","flow","flow-starts"]][:nkeys]
    for _ in range(0, batch*calls, 1000):
        r.call("RPUSH", keys[0], *([env]*1000))
    r.call("CONFIG", "RESETSTAT")
    for _ in range(calls):
        r.call("EVALSHA", sha, len(keys), *keys, batch, 60000)
    info = r.call("INFO", "commandstats").decode()
    line = [l for l in info.splitlines() if l.startswith("cmdstat_evalsha:")][0]
    usec = int(line.split("usec=")[1].split(",")[0])
    r.call("DEL", *keys)
    r.call("FLUSHALL")
    return usec / calls
for rnd in range(4):
    for batch, calls in [(1, 20000), (100, 2000)]:
        a = run("main", main, 10, batch, calls)
        b = run("flow", mine, 12, batch, calls)
        print(f"round {rnd+1} batch {batch}: main {a:.2f} us/call, flow {b:.2f} us/call, ratio {b/a:.3f}", flush=True)
