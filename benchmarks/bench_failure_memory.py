"""Failure memory of ``dst run``: every seed fails with a message of its own.

The worst case for failure grouping: a scenario whose invariant's message names
the seed (spelled in letters, since digits are folded out of a signature), so
that every failing seed is a group of its own.  The real command runs in a
subprocess, as a user runs it, with ``--junit``, ``--summary-md`` and ``--json``;
the script prints

- the resident memory of the ``dst`` process (the parent, which watches the
  workers and keeps the groups): when it started, once ``dst`` was imported, at
  the end, and its peak (``getrusage`` of the process itself, read as it exits,
  so nothing between two samples is missed); and samples taken from ``/proc``
  every ``--every`` seconds, at a quarter, half and the end of the run (flat
  means the later ones do not grow);
- what the run left on disk: files under ``--out`` (trace files among them) and
  their bytes, the results database, the JUnit and Markdown files and the JSON
  document.

``--src DIR`` measures the ``dst`` of another checkout (``PYTHONPATH=DIR``): a
``git worktree`` of an older commit gives the "before" column.  ``--max-groups``
is passed only when given (an older ``dst`` lacks it).

Run: ``python benchmarks/bench_failure_memory.py [--seeds 100000] [--workers 2]
[--src /tmp/wt-old] [--max-groups N] [--json]``.
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

#: Even seeds break ``Even`` and odd seeds ``Odd``, each with a message of its own.
SCENARIO = '''
from dst import Env, Scenario, Sim

scenario = Scenario("distinct", doc="every seed fails with a message of its own")


async def worker(env: Env) -> None:
    await env.store.put("x", 1)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    sim.process("worker", worker, stores=["db"])
    return sim.seed


def letters(seed: int) -> str:
    """The seed in letters: a signature folds digits, and must not fold this."""
    return "".join("abcdefghij"[int(d)] for d in str(seed))


@scenario.invariant("Even")
def even(seed: int) -> bool | str:
    return seed % 2 != 0 or f"even seed {letters(seed)} broke it"


@scenario.invariant("Odd")
def odd(seed: int) -> bool | str:
    return seed % 2 != 1 or f"odd seed {letters(seed)} broke it"
'''

#: Runs ``dst`` in this process and writes its resident memory to ``$BENCH_RSS`` on exit.
#: Forked workers leave by ``os._exit`` and never run it.
WRAPPER = r'''
import atexit, json, os, resource, sys

def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

start = rss_kb()
from dst.cli import main
loaded = rss_kb()

def report():
    with open(os.environ["BENCH_RSS"], "w") as f:
        json.dump({"start_kb": start, "loaded_kb": loaded, "end_kb": rss_kb(),
                   "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, f)

atexit.register(report)
sys.argv[0] = "dst"
main()
'''


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def measure(seeds: int, workers: int, src: str | None, max_groups: int | None,
            every: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        scenario = root / "distinct.py"
        scenario.write_text(SCENARIO, encoding="utf-8")
        out, junit, md, rss = root / "out", root / "junit.xml", root / "summary.md", \
            root / "rss.json"
        args = ["run", str(scenario), "--seeds", str(seeds), "--workers", str(workers),
                "--no-shrink", "--out", str(out), "--junit", str(junit), "--summary-md",
                str(md), "--json"]
        if max_groups is not None:
            args += ["--max-groups", str(max_groups)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DST_")}
        env["PYTHONHASHSEED"] = "0"  # else dst re-executes itself, and the pid changes
        env["BENCH_RSS"] = str(rss)
        if src is not None:
            env["PYTHONPATH"] = str(Path(src).resolve())
        began = time.perf_counter()
        samples: list[int] = []
        # From a directory of its own, so that no checkout in the working directory
        # shadows the dst being measured.
        with open(root / "stdout.json", "w", encoding="utf-8") as stdout:
            proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *args], env=env,
                                    cwd=tmp, stdout=stdout, stderr=subprocess.PIPE,
                                    text=True)
            while proc.poll() is None:
                samples.append(_rss_kb(proc.pid))
                time.sleep(every)
            err = proc.stderr.read() if proc.stderr else ""
            proc.wait()
        wall = time.perf_counter() - began
        if proc.returncode not in (0, 1):
            raise SystemExit(f"dst exited {proc.returncode}: {err.strip()}")
        doc = json.loads((root / "stdout.json").read_text(encoding="utf-8"))
        memory = json.loads(rss.read_text())
        files = [p for p in out.iterdir() if p.is_file()]
        samples = [s for s in samples if s] or [0]
        return {
            "seeds": seeds, "workers": workers, "src": src, "max_groups": max_groups,
            "seconds": wall, "failed": doc["failed"], "groups": len(doc["groups"]),
            "not_kept": doc.get("not_kept"),
            "rss_mb": {k[:-3]: v / 1024 for k, v in memory.items()},
            "sampled_mb": {"quarter": samples[len(samples) // 4] / 1024,
                           "half": samples[len(samples) // 2] / 1024,
                           "last": samples[-1] / 1024},
            "files": len(files),
            "trace_files": sum(1 for p in files if p.name.endswith(".jsonl")),
            "out_bytes": sum(p.stat().st_size for p in files),
            "db_bytes": _size(out / "results.sqlite"),
            "junit_bytes": _size(junit), "md_bytes": _size(md),
            "json_bytes": _size(root / "stdout.json"),
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seeds", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--src", default=None,
                    help="the checkout whose dst is measured (default: the installed one)")
    ap.add_argument("--max-groups", type=int, default=None)
    ap.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = measure(args.seeds, args.workers, args.src, args.max_groups, args.every)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    m, s = r["rss_mb"], r["sampled_mb"]
    print(f"dst of {r['src'] or 'this installation'}: {r['seeds']:,} seeds, "
          f"{r['workers']} workers, {r['seconds']:.0f}s; {r['failed']:,} failed, "
          f"{r['groups']:,} groups reported; not kept: {r['not_kept']}")
    print(f"parent RSS: {m['start']:.0f} MB at start, {m['loaded']:.0f} MB with dst "
          f"imported (before), peak {m['peak']:.0f} MB, {m['end']:.0f} MB at exit (after); "
          f"sampled {s['quarter']:.0f} / {s['half']:.0f} / {s['last']:.0f} MB at a quarter,"
          " half and end of the run")
    print(f"files: {r['files']:,} under --out ({r['trace_files']:,} traces, "
          f"{r['out_bytes'] / 1e6:.2f} MB, results database {r['db_bytes'] / 1e6:.2f} MB); "
          f"JUnit {r['junit_bytes'] / 1e3:,.1f} kB, Markdown {r['md_bytes'] / 1e3:,.1f} kB, "
          f"JSON {r['json_bytes'] / 1e3:,.1f} kB")


if __name__ == "__main__":
    main()
