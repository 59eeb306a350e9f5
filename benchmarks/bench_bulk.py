"""Bulk runs (`dst run`): scaling across workers, memory over a long run, a failure-heavy run.

Three measurements, each of the real command in a subprocess (as a user runs it):

- ``scaling``: seeds/s of ``approval`` (default config, passing) with ``--workers 1``
  and ``--workers 2``, alternated ``--repeat`` times, best of each; the figure is the
  ratio (goal: 2 workers at least 1.9x one, on a machine with two idle cores).  The
  rate is the run's own (``seconds`` of ``--json``): start-up and shrinking aside.
- ``memory``: a long passing ``counter`` run (``--scenario`` for another; ``--seeds``,
  1,000,000 for an overnight check): the peak resident memory of the ``dst`` process
  and of each worker, sampled from ``/proc`` every ``--every`` seconds, and how much
  each grew from the first quarter of the run to the end (goal: under 200 MB and
  flat); then the results database's bytes per seed (goal: under 100).
- ``failures``: ``counter -c cas=false`` (nearly every seed fails the same way):
  files and bytes written under ``--out``, the wall time and the peak memory.

``--python`` runs another installation's ``dst`` (``PATH/python -m dst``), so the
same measurements of an older dst, installed in a virtualenv of its own, give the
"before" column; options that dst lacks are not passed to it.

Run: ``.venv/bin/python benchmarks/bench_bulk.py [--part all] [--seeds 50000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DST_")}
    env["PYTHONHASHSEED"] = "0"  # dst re-executes itself otherwise, and the pid changes
    return env


def run_dst(python: str, args: list[str], every: float = 0.5) -> dict[str, Any]:
    """Run ``python -m dst ARGS``; its JSON (if any), wall time, and memory samples."""
    began = time.perf_counter()
    # From a directory of its own: ``-m`` puts the working directory first on the path,
    # and a dst checkout there would shadow the installation being measured.
    with tempfile.TemporaryDirectory() as cwd:
        return _watch(subprocess.Popen([python, "-m", "dst", *args], env=_env(), text=True,
                                       cwd=cwd, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE), args, began, every)


def _watch(proc: subprocess.Popen[str], args: list[str], began: float,
           every: float) -> dict[str, Any]:
    samples: list[tuple[float, int, list[int]]] = []
    while proc.poll() is None:
        samples.append((time.perf_counter() - began, _rss_kb(proc.pid),
                        [_rss_kb(c) for c in _children(proc.pid)]))
        time.sleep(every)
    out, err = proc.communicate()
    wall = time.perf_counter() - began
    if proc.returncode not in (0, 1):
        raise SystemExit(f"dst {' '.join(args)} exited {proc.returncode}: {err.strip()}")
    doc = json.loads(out) if "--json" in args else None
    return {"wall": wall, "doc": doc, "samples": samples}


def _growth(samples: list[tuple[float, int, list[int]]], pick: Any) -> tuple[float, float]:
    """Peak MB, and MB grown from the end of the first quarter of the run to its end."""
    values = [pick(s) for s in samples if pick(s)]
    if not values:
        return 0.0, 0.0
    quarter = values[len(values) // 4]
    return max(values) / 1024, (values[-1] - quarter) / 1024


def scaling(python: str, seeds: int, repeat: int) -> dict[str, Any]:
    rates: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(repeat):
        for workers in (1, 2):
            with tempfile.TemporaryDirectory() as out:
                doc = run_dst(python, ["run", "approval", "--seeds", str(seeds), "--workers",
                                       str(workers), "--no-shrink", "--json", "--out", out],
                              every=1.0)["doc"]
            rates[workers].append(doc["runs"] / doc["seconds"])
    one, two = max(rates[1]), max(rates[2])
    return {"seeds": seeds, "one_worker": one, "two_workers": two, "ratio": two / one}


def memory(python: str, seeds: int, every: float, scenario: str = "counter") -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as out:
        got = run_dst(python, ["run", scenario, "--seeds", str(seeds), "--workers", "2",
                               "--no-shrink", "--out", out], every=every)
        db = Path(out, "results.sqlite").stat().st_size
    parent = _growth(got["samples"], lambda s: s[1])
    worker = _growth(got["samples"], lambda s: max(s[2], default=0))
    return {"scenario": scenario, "seeds": seeds, "seconds": got["wall"],
            "parent_peak_mb": parent[0],
            "parent_growth_mb": parent[1], "worker_peak_mb": worker[0],
            "worker_growth_mb": worker[1], "db_bytes": db, "db_bytes_per_seed": db / seeds}


def failures(python: str, seeds: int, every: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as out:
        got = run_dst(python, ["run", "counter", "-c", "cas=false", "--seeds", str(seeds),
                               "--workers", "2", "--no-shrink", "--out", out], every=every)
        files = [p for p in Path(out).iterdir() if p.is_file()]
        traces = [p for p in files if p.suffix == ".jsonl"]
        written = sum(p.stat().st_size for p in files)
    parent = _growth(got["samples"], lambda s: s[1])
    return {"seeds": seeds, "seconds": got["wall"], "files": len(files),
            "trace_files": len(traces), "bytes": written, "parent_peak_mb": parent[0],
            "parent_growth_mb": parent[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--part", choices=["scaling", "memory", "failures", "all"], default="all")
    ap.add_argument("--python", default=sys.executable,
                    help="the python whose dst is measured (another virtualenv: before)")
    ap.add_argument("--seeds", type=int, default=50_000, help="seeds of the memory run")
    ap.add_argument("--scenario", default="counter",
                    help="the memory run's scenario (it must pass: replenish_crash, ...)")
    ap.add_argument("--scaling-seeds", type=int, default=2_000)
    ap.add_argument("--failure-seeds", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    parts = ["scaling", "memory", "failures"] if args.part == "all" else [args.part]
    result: dict[str, Any] = {"python": args.python}
    if "scaling" in parts:
        result["scaling"] = s = scaling(args.python, args.scaling_seeds, args.repeat)
        if not args.json:
            print(f"scaling  approval, {s['seeds']:,} seeds: 1 worker {s['one_worker']:,.0f}"
                  f" seeds/s, 2 workers {s['two_workers']:,.0f} seeds/s: "
                  f"{s['ratio']:.2f}x (goal >= 1.9x)", flush=True)
    if "memory" in parts:
        result["memory"] = m = memory(args.python, args.seeds, args.every, args.scenario)
        if not args.json:
            print(f"memory   {m['scenario']}, {m['seeds']:,} passing seeds in {m['seconds']:.0f}s: "
                  f"parent peak {m['parent_peak_mb']:.0f} MB (grew "
                  f"{m['parent_growth_mb']:+.1f} MB after the first quarter), worker peak "
                  f"{m['worker_peak_mb']:.0f} MB ({m['worker_growth_mb']:+.1f} MB); results "
                  f"database {m['db_bytes']:,} bytes, {m['db_bytes_per_seed']:.2f} bytes/seed "
                  "(goals: < 200 MB and flat, < 100 bytes/seed)", flush=True)
    if "failures" in parts:
        result["failures"] = f = failures(args.python, args.failure_seeds, args.every)
        if not args.json:
            print(f"failures counter cas=false, {f['seeds']:,} seeds in {f['seconds']:.0f}s: "
                  f"{f['files']:,} files ({f['trace_files']:,} traces), "
                  f"{f['bytes'] / 1e6:.2f} MB written; parent peak {f['parent_peak_mb']:.0f} "
                  f"MB (grew {f['parent_growth_mb']:+.1f} MB after the first quarter)",
                  flush=True)
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
