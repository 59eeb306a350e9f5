"""Seeds per second on a Dask cluster against local worker processes, same cores.

```
.venv/bin/python benchmarks/bench_cluster.py [--seeds 6000] [--workers 2] [--repeat 2]
    [-c cas=true ...] [--json]
```

Starts ``dask scheduler`` on loopback and ``--workers`` Dask workers with one
thread each, started as docs/cluster.md tells users (one
``PYTHONHASHSEED=0 dask worker ADDRESS --nthreads 1 --no-nanny`` per core), then
runs the same seeds of the ``counter`` scenario both ways:

* ``local``: ``run_bulk(..., workers=N)``, what ``dst run --workers N`` does;
* ``cluster``: ``run_on_cluster(address, ...)``, what ``dst run --cluster`` does,
  connection and the check of the workers included.

Each way gets one warm-up pass (imports on the workers), then ``--repeat``
timed passes, alternating, so that the load of the machine falls on both alike.
The figure is the best pass of each and their ratio, cluster / local (the goal:
at least 0.85).  Both count chunks absorbed into a summary and do nothing else
with them: recording is the same work either way.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dst.registry import load
from dst.runner.bulk import BulkSummary, run_bulk
from dst.runner.cluster import connect, run_on_cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cluster(workers: int, where: Path) -> tuple[str, list[subprocess.Popen[bytes]]]:
    address = f"tcp://127.0.0.1:{_free_port()}"
    env = {**os.environ, "PYTHONHASHSEED": "0"}

    def dask(*args: str, log: str) -> subprocess.Popen[bytes]:
        with (where / log).open("wb") as out:
            return subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=where, env=env,
                                    stdout=out, stderr=subprocess.STDOUT)

    procs = [dask("scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1],
                  "--no-dashboard", log="scheduler.log")]
    client = connect(address, timeout=90)
    try:
        for i in range(workers):
            procs.append(dask("worker", address, "--nthreads", "1", "--no-nanny",
                              "--no-dashboard", "--death-timeout", "60",
                              "--local-directory", str(where), log=f"worker-{i}.log"))
        client.wait_for_workers(workers, timeout=90)
    finally:
        client.close()
    return address, procs


def timed(run: Callable[[], BulkSummary]) -> tuple[float, BulkSummary]:
    began = time.perf_counter()
    summary = run()
    return time.perf_counter() - began, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=6000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("-c", dest="switches", action="append", default=[],
                        metavar="KEY=VALUE", help="a counter switch (default: shipped config)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = load("counter").config(dict(s.split("=", 1) for s in args.switches))
    seeds = range(args.seeds)

    def local() -> BulkSummary:
        return run_bulk("counter", config, seeds, workers=args.workers)

    with tempfile.TemporaryDirectory() as tmp:
        address, procs = start_cluster(args.workers, Path(tmp))
        try:
            def cluster() -> BulkSummary:
                return run_on_cluster(address, "counter", config, seeds)

            run_bulk("counter", config, range(400), workers=args.workers)
            run_on_cluster(address, "counter", config, range(400 * args.workers))
            best: dict[str, float] = {}
            runs: dict[str, list[float]] = {"local": [], "cluster": []}
            for i in range(args.repeat):
                order: list[tuple[str, Callable[[], BulkSummary]]] = [
                    ("local", local), ("cluster", cluster)]
                for name, run in order if i % 2 == 0 else reversed(order):
                    seconds, summary = timed(run)
                    if summary.runs != args.seeds:
                        sys.exit(f"{name}: ran {summary.runs} seeds of {args.seeds}")
                    runs[name].append(args.seeds / seconds)
                    best[name] = max(best.get(name, 0.0), args.seeds / seconds)
        finally:
            for proc in reversed(procs):
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
    ratio = best["cluster"] / best["local"]
    doc: dict[str, Any] = {"seeds": args.seeds, "workers": args.workers, "config": config,
                           "runs_per_s": runs, "best": best, "ratio": round(ratio, 3)}
    if args.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"counter {config}, {args.seeds} seeds, {args.workers} workers, "
          f"best of {args.repeat}")
    for name in ("local", "cluster"):
        passes = ", ".join(f"{r:,.0f}" for r in runs[name])
        print(f"  {name:8} {best[name]:8,.0f} seeds/s   (passes: {passes})")
    print(f"  cluster / local: {ratio:.2f}")


if __name__ == "__main__":
    main()
