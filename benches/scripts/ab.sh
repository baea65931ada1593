#!/bin/bash
# Alternates throughput bench binaries (built from different commits) N times and prints
# the medians of their end-to-end figures, so that a change is judged on many runs of a
# noisy machine, each against the circular list of its own run (docs/performance.md).
#
#   benches/scripts/ab.sh 30 /path/to/throughput-before /path/to/throughput-after
#
# Build a binary with `cargo bench -p benches --bench throughput --no-run` at each commit
# and copy target/release/deps/throughput-<hash> aside. MESSAGES (300000) and ONLY
# (end_to_end) pass through to the bench.
set -euo pipefail
runs=$1; shift
out=$(mktemp)
cd "$(dirname "$0")/.."
for _ in $(seq 1 "$runs"); do
  for bin in "$@"; do
    ROUNDS=1 MESSAGES=${MESSAGES:-300000} ONLY=${ONLY:-end_to_end} "$bin" --bench 2>&1 \
      | grep -E "^(circular list|bus), end to end" | sed "s|^|$bin\||" >> "$out"
  done
done
python3 - "$out" "$@" <<'PY'
import re, statistics as st, sys
rows = {}
for line in open(sys.argv[1]):
    bin, rest = line.split("|", 1)
    phase = "bus" if rest.startswith("bus") else "circular"
    m = re.search(r"(\d+) msg/s \| CPU us/msg: redis +([\d.]+) client +([\d.]+) \| redis commands +([\d.]+)", rest)
    rows.setdefault((bin, phase), []).append([float(x) for x in m.groups()])
for bin in sys.argv[2:]:
    bus, circ = rows[(bin, "bus")], rows[(bin, "circular")]
    ratios = [b[0] / c[0] * 100 for b, c in zip(bus, circ)]
    med = lambda rows, i: st.median(r[i] for r in rows)
    print(f"{bin}\n  bus / circular {st.median(ratios):.0f}% (each run: {' '.join(f'{r:.0f}' for r in ratios)})"
          f"\n  bus: {med(bus, 0):.0f} msg/s, Redis CPU {med(bus, 1):.2f}, client CPU {med(bus, 2):.2f},"
          f" Redis command time {med(bus, 3):.2f} us/msg"
          f"\n  circular list: client CPU {med(circ, 2):.2f} us/msg")
PY
rm -f "$out"
