"""Instructions per seed and per decision, counted by cachegrind (load does not move them).

Usage::

    python benchmarks/bench_instructions.py [--only ROW ...] [--json]

Timings on a shared machine wander by +-25%; instruction counts do not.  Each
row runs a workload under ``valgrind --tool=cachegrind --cache-sim=no`` twice,
with ``n`` and ``2n`` seeds, and reports ``(Ir(2n) - Ir(n)) / n``: the cost of
one more seed, start-up and imports cancelled out (each extra chunk of 200
seeds still pays its own ``trio.run`` start-up, as in ``dst run``).  The
``counter`` rows at 1, 7 and 20 increments (6, 30 and 82 decisions per run,
every invariant's verdict ignored so that each run makes all its calls) give a
line: instructions per decision (its slope) and per run (its intercept).

Needs ``valgrind`` on the PATH (the Debian package ``valgrind``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: row -> (scenario, switches, fault plan changes, seeds n); the row runs n and 2n seeds.
ROWS: dict[str, tuple[str, dict[str, object], dict[str, object], int]] = {
    "counter_inc1": ("counter", {"cas": False, "increments": 1}, {}, 200),
    "counter_inc7": ("counter", {"cas": False}, {}, 200),
    "counter_inc20": ("counter", {"cas": False, "increments": 20}, {}, 200),
    "counter_inc7_p0": ("counter", {"cas": False}, {"preemptions": 0}, 200),
    "counter": ("counter", {}, {}, 200),
    "ping": ("ping", {}, {}, 200),
    "approval": ("approval", {}, {}, 200),
    "approval_p0": ("approval", {}, {"preemptions": 0}, 200),
    "replenish_crash": ("replenish_crash", {}, {}, 100),
    "bare_trio": ("bare", {}, {}, 200),
}


def _child(row: str, seeds: int) -> None:
    """Run ``seeds`` seeds of ``row`` (inside valgrind); print the mean decisions per run."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_kernel

    name, switches, changes, _ = ROWS[row]
    if name == "bare":
        bench_kernel.bare_pass_per_seed(list(range(seeds)))
        print(bench_kernel.WORKERS * bench_kernel.CALLS_PER_WORKER)
        return
    import importlib

    from dst.runner.single import run_seeds

    shipped = importlib.import_module(f"scenarios.{name}").scenario
    config = {**shipped.default_config(), **switches}
    plan = dataclasses.replace(shipped.fault_plan(config), **changes)
    # counter: every invariant's verdict ignored, so that each run makes all its calls.
    scenario = bench_kernel._measured_counter() if name == "counter" else shipped
    steps: list[int] = []
    for start in range(0, seeds, 200):
        run_seeds(scenario, config, list(range(start, min(seeds, start + 200))),
                  lambda r: steps.append(r.steps), faults=plan)
    print(sum(steps) / len(steps))


def _measure(row: str, seeds: int) -> tuple[int, float]:
    """Instructions and mean decisions per run of ``seeds`` seeds of ``row``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        done = subprocess.run(
            ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}",
             sys.executable, __file__, "--child", row, str(seeds)],
            check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        for line in Path(out).read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1]), float(done.stdout.split()[-1])
    raise RuntimeError(f"no summary line from cachegrind for {row}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=None, metavar="ROW",
                        help="measure only this row (repeatable): " + ", ".join(ROWS))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", nargs=2, metavar=("ROW", "SEEDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("error: valgrind is not on the PATH; install it (apt-get install valgrind)",
              file=sys.stderr)
        return 2
    rows = args.only or list(ROWS)
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        print(f"error: unknown row {unknown[0]!r}; rows: {', '.join(ROWS)}", file=sys.stderr)
        return 2
    figures: dict[str, dict[str, float]] = {}
    for row in rows:
        n = ROWS[row][3]
        small, _ = _measure(row, n)
        large, decisions = _measure(row, 2 * n)
        per_seed = (large - small) / n
        figures[row] = {"instructions_per_seed": per_seed, "decisions_per_run": decisions}
        if not args.json:
            print(f"{row:18} {per_seed / 1e6:7.3f} M/seed  {decisions:6.1f} dec/run  "
                  f"{per_seed / decisions / 1e3:7.1f} k/dec (all-in)", flush=True)
    line = [r for r in ("counter_inc1", "counter_inc7", "counter_inc20") if r in figures]
    if len(line) >= 2:
        xs = [figures[r]["decisions_per_run"] for r in line]
        ys = [figures[r]["instructions_per_seed"] for r in line]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        covariance = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
        slope = covariance / sum((x - mx) ** 2 for x in xs)
        figures["counter_fit"] = {"per_decision": slope, "per_run": my - slope * mx}
        if not args.json:
            print(f"counter line: {slope / 1e3:.1f} k instructions per decision "
                  f"+ {(my - slope * mx) / 1e6:.2f} M per run")
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
