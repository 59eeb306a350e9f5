"""Reach: how many seeds dst needs to find each bug it claims to find, and what it costs.

Usage::

    python benchmarks/bench_reach.py [--ranges 20] [--range-size 10000] [--limit 1000]
        [--only TEXT]... [--perf-seeds 400] [--repeat 3] [--no-reach] [--no-perf]
        [--before PATH] [--json]

*Reach.*  The bugs are the litmus cases of ``tests/litmus`` (each with
``fixed=false``) and every planted bug of every shipped scenario
(``dst.registry.all_scenarios()``, each planted bug's config).  A run finds a
bug when it breaks one of the invariants the bug declares.  Seeds are searched
in ``--ranges`` disjoint ranges, range ``k`` starting at ``k * --range-size``
and running at most ``--limit`` seeds, each stopped at its first finding.  The
figure is the median over the ranges of the seeds run up to and including the
first finding ("not found in N" when more than half the ranges found nothing),
beside how many ranges found it.  One search follows the scenario's own fault
plan (preemption at checkpoints on, as shipped), one the same plan with
``preemptions=0``.

*Cost.*  Decisions per run and seeds/s of ``counter``, ``approval`` and
``replenish_crash`` (their defaults) with preemption on and off, in chunks of
seeds per ``trio.run`` as ``dst run`` does, against bare trio in the same
invocation (``bench_kernel``'s baseline: the counter workload, one
``trio.run`` per seed).  Each row is the best of ``--repeat`` passes, the two
modes of a scenario interleaved; the ratio uses CPU time
(``time.process_time``), which other work on a shared machine disturbs far
less than wall time.  "checkpoint" counts the decisions that let a task held at
a trio checkpoint go on.

*Before.*  ``--before PATH`` runs the same measurements on another checkout of
dst (a ``git worktree`` at an older commit) in a child process with
``PYTHONPATH=PATH``, and prints its figures beside these.  A litmus case that
does not load there (it uses API the older code lacks) is "not expressible";
the older code has no preemption, so it has one column.

Nothing is asserted: every figure is a count or a ratio measured here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dst import FaultPlan
from dst.registry import all_scenarios, load
from dst.runner.bulk import CHUNK
from dst.runner.single import RunResult, run_seeds
from dst.scenario import Scenario

LITMUS = Path(__file__).resolve().parents[1] / "tests" / "litmus"
LITMUS_CASES = (
    "check_then_act", "lost_wakeup", "singleflight", "channel_cancel", "half_update",
    "timeout_compensation", "lease_fencing",
)
COST_SCENARIOS = ("counter", "approval", "replenish_crash")


@dataclass
class Bug:
    label: str
    scenario: Scenario | None
    config: dict[str, Any]
    breaks: tuple[str, ...]
    #: Why the bug cannot be searched for here (the case does not load), if it cannot.
    missing: str | None = None


def _show_config(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in config.items())


def find_bugs(only: list[str]) -> list[Bug]:
    bugs: list[Bug] = []
    for case in LITMUS_CASES:
        label = f"litmus {case}"
        try:
            scenario = load(str(LITMUS / f"{case}.py"))
        except Exception as exc:  # the older code lacks API the case uses
            bugs.append(Bug(label, None, {}, (), f"{type(exc).__name__}: {exc}"))
            continue
        bug = scenario.planted_bugs[0]
        bugs.append(Bug(label, scenario, dict(bug.config), bug.breaks))
    for scenario in all_scenarios():
        for bug in scenario.planted_bugs:
            label = f"{scenario.name} {_show_config(dict(bug.config))}"
            bugs.append(Bug(label, scenario, dict(bug.config), bug.breaks))
    return [b for b in bugs if not only or any(text in b.label for text in only)]


def without_preemption(scenario: Scenario, config: dict[str, Any]) -> Scenario:
    """A copy of ``scenario`` whose fault plan makes trio checkpoints ordinary again."""
    plan = dataclasses.replace(scenario.fault_plan(config), preemptions=0)
    return dataclasses.replace(scenario, faults=plan)


#: Whether the dst imported here preempts at trio checkpoints (older code does not).
HAS_PREEMPTION = any(f.name == "preemptions" for f in dataclasses.fields(FaultPlan))


# -- reach ------------------------------------------------------------------------


def seeds_to_finding(scenario: Scenario, config: dict[str, Any], breaks: tuple[str, ...],
                     start: int, limit: int) -> int | None:
    """Seeds run from ``start`` up to and including the first that finds the bug."""
    found: list[int] = []
    wanted = set(breaks)

    def on_result(result: RunResult) -> None:
        if not found and wanted & set(result.violated):
            found.append(result.seed)

    def seeds(first: int, stop: int) -> Iterator[int]:
        for seed in range(first, stop):
            if found:
                return
            yield seed

    end = start + limit
    for chunk in range(start, end, CHUNK):
        run_seeds(scenario, config, seeds(chunk, min(chunk + CHUNK, end)), on_result)
        if found:
            return found[0] - start + 1
    return None


def reach(scenario: Scenario, config: dict[str, Any], breaks: tuple[str, ...],
          ranges: int, range_size: int, limit: int) -> dict[str, Any]:
    counts = [seeds_to_finding(scenario, config, breaks, k * range_size, limit)
              for k in range(ranges)]
    median = statistics.median_low([math.inf if c is None else c for c in counts])
    return {
        "median": None if math.isinf(median) else int(median),
        "found": sum(c is not None for c in counts),
        "ranges": ranges,
        "limit": limit,
        "counts": counts,
    }


def measure_reach(bugs: list[Bug], ranges: int, range_size: int,
                  limit: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for bug in bugs:
        row: dict[str, Any] = {}
        if bug.scenario is None:
            row["missing"] = bug.missing
        else:
            t0 = time.perf_counter()
            config = bug.scenario.checked_config(bug.config)
            row["shipped"] = reach(bug.scenario, config, bug.breaks, ranges, range_size, limit)
            if HAS_PREEMPTION:
                row["no_preemption"] = reach(without_preemption(bug.scenario, config), config,
                                             bug.breaks, ranges, range_size, limit)
            row["seconds"] = time.perf_counter() - t0
        out[bug.label] = row
        print(f"  {bug.label}: {_cell(row.get('shipped'), row.get('missing'))}",
              file=sys.stderr, flush=True)  # progress, on stderr: stdout may be JSON
    return out


# -- cost -------------------------------------------------------------------------


def cost(scenario: Scenario, seeds: int) -> dict[str, float]:
    config = scenario.default_config()
    decisions = held = 0
    start, cpu = time.perf_counter(), time.process_time()

    def on_result(result: RunResult) -> None:
        nonlocal decisions, held
        decisions += result.steps
        for rec in result.sim.records:
            if rec[0] == "decision" and rec[4][rec[5]].endswith("@run"):
                held += 1

    for chunk in range(0, seeds, CHUNK):
        run_seeds(scenario, config, range(chunk, min(chunk + CHUNK, seeds)), on_result)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"seeds_per_s": seeds / wall, "seeds_per_cpu_s": seeds / cpu,
            "decisions_per_run": decisions / seeds, "checkpoint_decisions_per_run": held / seeds}


def best(passes: list[dict[str, float]]) -> dict[str, float]:
    """The fastest of several passes (a shared machine only ever makes a pass slower)."""
    return max(passes, key=lambda p: p["seeds_per_cpu_s"])


def measure_cost(seeds: int, repeat: int) -> dict[str, Any]:
    """Each row the best of ``repeat`` passes, the modes of one scenario interleaved."""
    from bench_kernel import bare_pass_per_seed  # the baseline, as bench_kernel measures it

    bare_pass_per_seed(list(range(min(seeds, CHUNK))))  # warm-up
    bare = []
    for _ in range(repeat):
        cpu = time.process_time()
        wall = bare_pass_per_seed(list(range(seeds))).seconds
        bare.append({"seeds_per_s": seeds / wall,
                     "seeds_per_cpu_s": seeds / (time.process_time() - cpu)})
    rows: dict[str, Any] = {}
    for name in COST_SCENARIOS:
        scenario = load(name)
        modes = {"shipped": scenario}
        if HAS_PREEMPTION:
            modes["no_preemption"] = without_preemption(scenario, scenario.default_config())
        cost(scenario, min(seeds, CHUNK))  # warm-up
        passes: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
        for _ in range(repeat):
            for mode, variant in modes.items():
                passes[mode].append(cost(variant, seeds))
        rows[name] = {mode: best(runs) for mode, runs in passes.items()}
    return {"seeds": seeds, "repeat": repeat, "bare": best(bare), "rows": rows}


# -- before -----------------------------------------------------------------------


def measure_before(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The same measurements on the checkout at ``path``, in a child process.

    ``PYTHONPATH`` puts that checkout's ``dst`` and ``scenarios`` ahead of the
    installed ones; the working directory is outside both checkouts, so that
    neither is imported by accident from it.
    """
    argv = ["--ranges", str(args.ranges), "--range-size", str(args.range_size),
            "--limit", str(args.limit), "--perf-seeds", str(args.perf_seeds),
            "--repeat", str(args.repeat), "--json"]
    argv += [f"--only={text}" for text in args.only]
    argv += ["--no-reach"] * args.no_reach + ["--no-perf"] * args.no_perf
    env = dict(os.environ, PYTHONPATH=str(path), PYTHONHASHSEED="0")
    child = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env,
                           cwd=path.parent, stdout=subprocess.PIPE, text=True, check=False)
    if child.returncode != 0:
        raise SystemExit(f"the measurements on {path} failed (exit {child.returncode})")
    result: dict[str, Any] = json.loads(child.stdout)
    return result


def describe_checkout(path: Path) -> str:
    """The short commit checked out at ``path``, or its directory name."""
    git = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)
    return git.stdout.strip() if git.returncode == 0 else path.name


# -- output -----------------------------------------------------------------------


def _cell(row: dict[str, Any] | None, missing: str | None = None) -> str:
    if row is None:
        return "not expressible" if missing else "-"
    found = f"{row['found']}/{row['ranges']}"
    if row["median"] is None:
        return f"not found in {row['limit']:,} ({found})"
    # The mean counts a range that found nothing as its limit: a lower bound then.
    counts = [row["limit"] if c is None else c for c in row["counts"]]
    return f"{row['median']:,} ({found}, mean {statistics.fmean(counts):.1f})"


def render(result: dict[str, Any], before: dict[str, Any] | None, before_name: str) -> str:
    lines: list[str] = []
    setup = result["setup"]
    if "reach" in result:
        lines += [
            f"seeds to first finding: median over {setup['ranges']} ranges of seeds "
            f"(range k starts at k x {setup['range_size']:,}, at most {setup['limit']:,} seeds "
            "each); in brackets: ranges that found it",
            "",
        ]
        table = [["bug", "shipped", "preemptions=0"] + ([before_name] if before else [])]
        for label, row in result["reach"].items():
            cells = [label, _cell(row.get("shipped"), row.get("missing")),
                     _cell(row.get("no_preemption"), row.get("missing"))]
            if before is not None:
                other = before.get("reach", {}).get(label)
                cells.append("not in that code" if other is None
                             else _cell(other.get("shipped"), other.get("missing")))
            table.append(cells)
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        for cells in table:
            lines.append("  ".join([cells[0].ljust(widths[0])]
                                   + [c.rjust(w) for c, w in zip(cells[1:], widths[1:],
                                                                 strict=True)]))
    if "cost" in result:
        c = result["cost"]
        lines += [
            "",
            f"cost per run: {c['seeds']:,} seeds per pass, chunks of {CHUNK} per trio.run, "
            f"best of {c['repeat']} passes; bare trio (one trio.run per seed): "
            f"{c['bare']['seeds_per_cpu_s']:,.0f} seeds per CPU second",
            "",
            f"{'scenario':42} {'decisions/run':>13} {'checkpoint':>10} {'seeds/s':>8} "
            f"{'seeds/CPU s':>11} {'/ bare':>6}",
        ]
        sources = [("", c)]
        if before is not None and "cost" in before:
            sources.append((f" ({before_name})", before["cost"]))
        for suffix, figures in sources:
            for name, modes in figures["rows"].items():
                for mode, row in modes.items():
                    what = "preemption on" if mode == "shipped" else "preemptions=0"
                    if suffix:
                        what = "no preemption"
                    ratio = row["seeds_per_cpu_s"] / figures["bare"]["seeds_per_cpu_s"]
                    lines.append(
                        f"{name + ', ' + what + suffix:42} {row['decisions_per_run']:13.1f} "
                        f"{row['checkpoint_decisions_per_run']:10.1f} "
                        f"{row['seeds_per_s']:8,.0f} {row['seeds_per_cpu_s']:11,.0f} "
                        f"{ratio:6.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranges", type=int, default=20, help="disjoint ranges of seeds")
    parser.add_argument("--range-size", type=int, default=10_000,
                        help="distance between the starts of two ranges")
    parser.add_argument("--limit", type=int, default=1000,
                        help="seeds searched at most per range (at most --range-size)")
    parser.add_argument("--only", action="append", default=[],
                        help="only the bugs whose label contains TEXT (repeatable)")
    parser.add_argument("--perf-seeds", type=int, default=400, help="seeds per cost row")
    parser.add_argument("--repeat", type=int, default=3,
                        help="passes per cost row (the fastest counts)")
    parser.add_argument("--no-reach", action="store_true", help="skip the reach table")
    parser.add_argument("--no-perf", action="store_true", help="skip the cost table")
    parser.add_argument("--before", metavar="PATH",
                        help="also measure the dst checked out at PATH (e.g. a git worktree)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.ranges < 1 or args.limit < 1 or args.limit > args.range_size:
        parser.error("--ranges and --limit must be at least 1, --limit at most --range-size")
    result: dict[str, Any] = {"setup": {"ranges": args.ranges, "range_size": args.range_size,
                                        "limit": args.limit}}
    if not args.no_reach:
        bugs = find_bugs(args.only)
        result["reach"] = measure_reach(bugs, args.ranges, args.range_size, args.limit)
    if not args.no_perf:
        result["cost"] = measure_cost(args.perf_seeds, args.repeat)
    before, name = None, ""
    if args.before:
        path = Path(args.before).resolve()
        before, name = measure_before(path, args), describe_checkout(path)
    if args.json:
        print(json.dumps({"now": result, "before": before, "before_commit": name}
                         if before else result, indent=2))
    else:
        print(render(result, before, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
