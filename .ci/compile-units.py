#!/usr/bin/env python3
"""How much a test script makes cargo compile on a fresh clone, without compiling.

Reads the `cargo clippy` / `cargo test` lines of a script (default scripts/test.sh),
asks cargo for each one's unit graph (`--unit-graph`, an unstable flag, hence
RUSTC_BOOTSTRAP=1; nothing is built) and counts the distinct units: a unit is one
compilation of one target of one package with one set of features, profile and mode,
and it is compiled again whenever any of its dependencies is (cargo's metadata hash),
so its identity here includes its dependencies' identities. clippy is counted as the
`cargo check` it runs. Usage, from the repository root:

    .ci/compile-units.py                      # scripts/test.sh as it is
    git show REV:scripts/test.sh > /tmp/t.sh && .ci/compile-units.py /tmp/t.sh
"""
import collections
import json
import os
import re
import shlex
import subprocess
import sys


def commands(script):
    """The script's cargo clippy/test commands, with $FEATURES expanded."""
    variables = {}
    for line in open(script):
        line = line.strip()
        m = re.match(r"^([A-Z_]+)=(\S+)$", line)
        if m:
            variables[m.group(1)] = m.group(2)
            continue
        if not re.match(r"^cargo (clippy|test) ", line):
            continue
        line = re.sub(r"\$\{?([A-Z_]+)\}?", lambda v: variables.get(v.group(1), ""), line)
        args = shlex.split(line.split(" -- ")[0])
        if args[1] == "clippy":
            args[1] = "check"
        yield args


def pkg_name(pkg_id):
    head, _, tail = pkg_id.partition("#")
    return tail.split("@")[0] if "@" in tail else head.rstrip("/").rsplit("/", 1)[-1]


def main():
    script = sys.argv[1] if len(sys.argv) > 1 else "scripts/test.sh"
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    seen = {}
    for args in commands(script):
        out = subprocess.run(args + ["--unit-graph", "-Z", "unstable-options"], env=env,
                             capture_output=True, text=True, check=True).stdout
        units = json.loads(out)["units"]
        memo = {}

        def ident(i):
            if i not in memo:
                u = units[i]
                t = u["target"]
                memo[i] = hash((u["pkg_id"], tuple(t["kind"]), t["name"], u["mode"],
                                tuple(sorted(u["features"])),
                                json.dumps(u["profile"], sort_keys=True), u.get("platform"),
                                tuple(sorted(ident(d["index"]) for d in u["dependencies"]))))
            return memo[i]

        new = 0
        for i, u in enumerate(units):
            if ident(i) not in seen:
                seen[ident(i)] = u
                new += 1
        print(f"{new:5d} new of {len(units):5d} units  {shlex.join(args)}")
    modes = collections.Counter(u["mode"] for u in seen.values())
    built = modes["build"] + modes["test"]
    linked = sum(1 for u in seen.values() if u["mode"] == "test" or (
        u["mode"] == "build" and u["target"]["kind"][0] in ("bin", "example", "bench", "test")))
    print(f"{len(seen)} distinct units: {built} built, {modes['check']} checked, "
          f"{modes['doctest']} doc-test runs, {linked} executables linked")
    libs = collections.Counter(pkg_name(u["pkg_id"]) for u in seen.values()
                               if u["mode"] in ("build", "check")
                               and u["target"]["kind"][0] in ("lib", "proc-macro"))
    print("compiled most often (lib, check and build):",
          ", ".join(f"{name} {n}" for name, n in libs.most_common(12)))


if __name__ == "__main__":
    main()
