"""A design prototype, not the bus's scripts: what a reserve's envelopes cost Redis when
they pass through Lua, as reserve.lua's fresh envelopes do (A: `LPOP ready n`, `RPUSH` into
the lease, returned), against a lease made without any envelope entering Lua (B: `SORT
ready BY nosort LIMIT 0 n STORE <lease>` and `LTRIM`, the script returning the count, the
client reading the lease with `LRANGE`). redis-server's instructions per reserved message
under callgrind, counted over the reserves only (docs/performance.md, "What bounds each
number"):

    [REDIS_SERVER=<redis-server>] python3 benches/scripts/reserve_lease_proto.py [A B]
"""
import os, subprocess, sys, tempfile, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "crates", "bus-redis", "tests", "interop"))
from resp import Redis  # noqa: E402

PORT = int(os.environ.get("PORT", "6412"))
N, BATCH = 20_000, 1_000
ENV = ('{"v":1,"id":"m%07d","type":"Order","sent":1,"headers":{},"body":{"order_id":"%d",'
       '"amount":1234,"currency":"EUR","customer":"c-1","lines":[1,2,3]}}')
A = """
local got = redis.call('LPOP', KEYS[1], ARGV[1])
if not got then return {} end
redis.call('RPUSH', KEYS[2], unpack(got))
return got
"""
B = """
local n = redis.call('SORT', KEYS[1], 'BY', 'nosort', 'LIMIT', 0, ARGV[1], 'STORE', KEYS[2])
if n > 0 then redis.call('LTRIM', KEYS[1], n, -1) end
return n
"""

def main(variant):
    out = f"/tmp/rproto-{variant}.out"
    server = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                               os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(PORT), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", tempfile.mkdtemp()],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = Redis(f"redis://127.0.0.1:{PORT}"); break
            except OSError:
                if time.monotonic() > deadline: raise
                time.sleep(0.1)
        for i in range(0, N, 500):
            r.call("RPUSH", "ready", *[ENV % (j, j) for j in range(i, i + 500)])
        sha = r.call("SCRIPT", "LOAD", A if variant == "A" else B).decode()
        subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], capture_output=True, check=True)
        got = 0
        for c in range(N // BATCH):
            lease = f"lease:{c}"
            if variant == "A":
                got += len(r.call("EVALSHA", sha, 2, "ready", lease, BATCH))
            else:
                n = r.call("EVALSHA", sha, 2, "ready", lease, BATCH)
                envs = r.call("LRANGE", lease, 0, -1)
                assert len(envs) == n
                got += n
        subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], capture_output=True, check=True)
        assert r.call("LLEN", "ready") == 0
    finally:
        server.terminate(); server.wait()
    total = next(l for l in subprocess.run(["callgrind_annotate", out], capture_output=True, text=True).stdout.splitlines()
                 if "PROGRAM TOTALS" in l)
    print(f"{variant}: {got} reserved, {int(total.split()[0].replace(',', '')) / got:.0f} instructions each")

if __name__ == "__main__":
    for v in sys.argv[1:] or ["A", "B"]:
        main(v)
