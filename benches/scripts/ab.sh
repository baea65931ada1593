#!/bin/bash
# Alternates throughput bench binaries (built from different commits) N times and prints
# the medians of their figures, so that a change is judged on many runs of a noisy
# machine, each bus figure against the circular list of its own run
# (docs/performance.md).
#
#   benches/scripts/ab.sh 10 /path/to/throughput-before /path/to/throughput-after
#
# Build a binary with `cargo bench -p benches --bench throughput --no-run` at each commit
# and copy target/release/deps/throughput-<hash> aside. MESSAGES (100000) and ONLY
# (prefilled,end_to_end: the pre-filled, end-to-end and in-memory phases) pass through to
# the bench.
set -euo pipefail
runs=$1; shift
out=$(mktemp)
cd "$(dirname "$0")/.."
for _ in $(seq 1 "$runs"); do
  for bin in "$@"; do
    ROUNDS=1 MESSAGES=${MESSAGES:-100000} ONLY=${ONLY:-prefilled,end_to_end} "$bin" --bench 2>&1 \
      | grep -E "^(circular list|bus|in-memory transport), (pre-filled|end to end)" \
      | grep -v "bare host" | sed "s|^|$bin\||" >> "$out"
  done
done
python3 - "$out" "$@" <<'PY'
import re, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    bin, rest = line.split("|", 1)
    name = rest.split("  ")[0].strip()
    m = re.search(r"(\d+) msg/s \| CPU us/msg: redis +([\d.]+) client +([\d.]+)", rest)
    rows.setdefault((bin, name), []).append([float(x) for x in m.groups()])
med = lambda rows, i: st.median(r[i] for r in rows)
for bin in sys.argv[2:]:
    print(bin)
    for what in ("pre-filled", "end to end (producer process)"):
        bus, circ = rows.get((bin, f"bus, {what}")), rows.get((bin, f"circular list, {what}"))
        if not bus or not circ:
            continue
        ratios = [b[0] / c[0] * 100 for b, c in zip(bus, circ)]
        print(f"  {what}: bus / circular median {st.median(ratios):.0f}% "
              f"(each run: {' '.join(f'{r:.0f}' for r in ratios)}); bus {med(bus, 0):.0f} msg/s, "
              f"Redis CPU {med(bus, 1):.2f}, client CPU {med(bus, 2):.2f} us/msg")
    memory = rows.get((bin, "in-memory transport, pre-filled"))
    if memory:
        print(f"  in-memory transport: median {med(memory, 0):.0f} msg/s "
              f"(each run: {' '.join(f'{r[0]:.0f}' for r in memory)}), client CPU {med(memory, 2):.2f} us/msg")
PY
rm -f "$out"
