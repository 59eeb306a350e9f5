"""The ``dst`` command line.

Exit status: 0 nothing violated; 1 an invariant was violated (for ``replay``:
the recorded violation reproduced exactly); 2 bad input or usage; 3 a replay
diverged.  ``--json`` prints one JSON document on stdout for machines; humans
get a progress line on a terminal and a short summary.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import click

from . import __version__
from .errors import DstError, UsageError
from .registry import all_scenarios, load
from .runner.bulk import BulkSummary, SeedOutcome, run_bulk
from .runner.single import replay_trace
from .scenario import Scenario
from .trace.codec import read_trace, write_trace
from .trace.model import Trace
from .trace.render import format_time, render_markdown, render_text, story

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_DIVERGED = 0, 1, 2, 3

#: Failing seeds whose full story `dst run` prints; the rest are listed by seed.
STORIES_SHOWN = 1


def _die(err: DstError) -> NoReturn:
    click.echo(f"error: {err}", err=True)
    sys.exit(err.exit_code)


class SwitchParam(click.ParamType):
    """``-c key=value``: split here, typed against the scenario's switches later."""

    name = "key=value"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        key, sep, text = str(value).partition("=")
        if not sep or not key.strip():
            self.fail(f"{value!r} is not key=value (e.g. -c cas=false)", param, ctx)
        return key.strip(), text.strip()


class SeedRange(click.ParamType):
    name = "A:B"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(value))
        if not m or int(m.group(1)) >= int(m.group(2)):
            self.fail(f"{value!r} is not a seed range A:B with A < B (e.g. 0:1000)", param, ctx)
        return int(m.group(1)), int(m.group(2))


class Duration(click.ParamType):
    name = "DURATION"
    _UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, float):
            return value
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if not m or float(m.group(1)) <= 0:
            self.fail(f"{value!r} is not a duration like 90s, 15m, 8h", param, ctx)
        return float(m.group(1)) * self._UNITS[m.group(2) or "s"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dst")
def main() -> None:
    """Deterministic simulation testing for AI-agent runtimes.

    dst runs real trio code against fake LLMs, suppliers and users on a
    virtual clock, under a seeded scheduler that chooses every interleaving,
    timer, message drop and crash.  Each run is a trace that replays exactly.

    \b
    Typical session:
      dst list                                  what can be tested
      dst run counter -c cas=false --seeds 500  search 500 seeds
      dst replay traces/failures/counter-3.jsonl
      dst show traces/failures/counter-3.jsonl
    """


# -- list -----------------------------------------------------------------------


def _scenario_json(s: Scenario) -> dict[str, Any]:
    return {
        "name": s.name,
        "doc": s.doc,
        "switches": [
            {"name": w.name, "default": w.default,
             "choices": list(w.allowed) if w.allowed is not None else None, "doc": w.doc}
            for w in s.switches.values()
        ],
        "invariants": list(s.invariants),
        "end_checks": list(s.end_checks),
        "planted_bugs": [
            {"config": dict(b.config), "breaks": list(b.breaks), "doc": b.doc}
            for b in s.planted_bugs
        ],
    }


@main.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def list_command(as_json: bool) -> None:
    """List scenarios, their switches, invariants and planted bugs."""
    try:
        scenarios = all_scenarios()
    except DstError as err:
        _die(err)
    if as_json:
        click.echo(json.dumps({"scenarios": [_scenario_json(s) for s in scenarios]}, indent=2))
        return
    for s in scenarios:
        click.echo(f"{s.name}: {s.doc}")
        for w in s.switches.values():
            click.echo(f"    -c {w.name}={_show(w.default):<8} {w.describe_allowed():<24} {w.doc}")
        click.echo(f"    invariants: {', '.join(s.all_checks) or 'none'}")
        for b in s.planted_bugs:
            setting = " ".join(f"{k}={_show(v)}" for k, v in b.config.items())
            click.echo(f"    planted bug: -c {setting} breaks {', '.join(b.breaks)}")


def _show(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


# -- run ------------------------------------------------------------------------


class _Progress:
    """A one-line progress display on a terminal; silent otherwise."""

    def __init__(self, total: int | None, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self.start = time.monotonic()

    def update(self, summary: BulkSummary, _chunk: list[SeedOutcome]) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        rate = summary.runs / elapsed if elapsed > 0 else 0.0
        done = f"{summary.runs:,}/{self.total:,}" if self.total else f"{summary.runs:,}"
        fails = len(summary.failures)
        line = (f"  {done} seeds  {rate:,.0f} seeds/s  {fails} failure{'s' * (fails != 1)}"
                f"  {format_time(elapsed)[:-4]}")
        click.echo(f"\r{line:<78}", nl=False, err=True)

    def close(self) -> None:
        if self.enabled:
            click.echo("", err=True)


def _config_text(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={_show(v)}" for k, v in config.items())


def _print_failure(o: SeedOutcome, scenario: Scenario, config: dict[str, Any],
                   path: Path, full: bool) -> None:
    trace = Trace(**_split(o.trace_text or ""))
    vio = next((r for r in trace.records if r["type"] == "violation"), None)
    where = (f"seed {o.seed}, step {vio['step']}, virtual {format_time(vio['t'])}"
             if vio else f"seed {o.seed}")
    click.echo(f"FAIL {scenario.name} [{_config_text(config)}]: "
               f"{', '.join(o.violated)} violated ({where})")
    if full:
        lines = story(trace)
        click.echo(f"  story ({len(lines)} lines, {o.steps} steps):")
        for i, (_step, t, actor, text) in enumerate(lines, 1):
            click.echo(f"    {i:>3}  {t}  {actor:<12} {text}")
    click.echo(f"  trace:  {path}")
    click.echo(f"  replay: dst replay {shlex.quote(str(path))}")


def _split(text: str) -> dict[str, Any]:
    objs = [json.loads(line) for line in text.splitlines() if line]
    footer = {k: v for k, v in objs[-1].items() if k != "type"}
    return {"header": objs[0], "records": objs[1:-1], "footer": footer}


@main.command("run")
@click.argument("scenario")
@click.option("-c", "switches", type=SwitchParam(), multiple=True, metavar="KEY=VALUE",
              help="Set a scenario switch (repeatable); `dst list` shows them.")
@click.option("--seeds", type=click.IntRange(min=1), default=None,
              help="Run seeds 0..N-1 (default 1000).")
@click.option("--seed", "one_seed", type=click.IntRange(min=0), default=None,
              help="Run just this seed (what a failure's replay line uses).")
@click.option("--seed-range", type=SeedRange(), default=None, help="Run seeds A..B-1.")
@click.option("--strategy", type=click.Choice(["random"]), default="random",
              show_default=True, help="How choices are made.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes (one seed is never split).")
@click.option("--for", "duration", type=Duration(), default=None,
              help="Keep running new seeds for this long (e.g. 8h), then summarise.")
@click.option("--out", type=click.Path(file_okay=False), default="traces/failures",
              show_default=True, help="Where traces of failing seeds are written.")
@click.option("--check-determinism", is_flag=True,
              help="Run each seed twice and report the first record that differs.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def run_command(scenario: str, switches: tuple[tuple[str, str], ...], seeds: int | None,
                one_seed: int | None, seed_range: tuple[int, int] | None, strategy: str,
                workers: int, duration: float | None, out: str, check_determinism: bool,
                as_json: bool) -> None:
    """Run SCENARIO over many seeds and report every invariant violated.

    SCENARIO is a name from `dst list`, a path to a .py file, or a module.
    Traces of failing seeds are written under --out, each with the one
    command that replays it.
    """
    try:
        scen = load(scenario)
        config = scen.config(dict(switches))
    except DstError as err:
        _die(err)
    given = [x is not None for x in (seeds, one_seed, seed_range)]
    if sum(given) > 1:
        _die(UsageError("give one of --seeds, --seed, --seed-range"))
    start, stop = 0, 1000
    if one_seed is not None:
        start, stop = one_seed, one_seed + 1
    elif seed_range is not None:
        start, stop = seed_range
    elif seeds is not None:
        stop = seeds
    stop_at: int | None = stop
    deadline = None
    if duration is not None:
        deadline = time.monotonic() + duration
        if seeds is None and seed_range is None and one_seed is None:
            stop_at = None
    progress = _Progress(stop_at - start if stop_at is not None else None,
                         enabled=not as_json and sys.stderr.isatty())
    began = time.monotonic()
    summary = run_bulk(scen.name if scenario == scen.name else scenario, config, start,
                       stop_at, workers=workers, deadline=deadline,
                       check_determinism=check_determinism, on_chunk=progress.update)
    seconds = time.monotonic() - began
    progress.close()
    out_dir = Path(out)
    paths: dict[int, Path] = {}
    for o in summary.failures + summary.nondeterministic:
        if o.seed not in paths and o.trace_text is not None:
            path = out_dir / f"{scen.name}-{o.seed}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(o.trace_text, encoding="utf-8")
            paths[o.seed] = path
    if as_json:
        doc = {
            "scenario": scen.name, "config": config, "runs": summary.runs,
            "seconds": round(seconds, 3),
            "failures": [{"seed": o.seed, "violated": list(o.violated),
                          "trace": str(paths[o.seed])} for o in summary.failures],
            "nondeterministic": [{"seed": o.seed, "difference": o.nondeterminism}
                                 for o in summary.nondeterministic],
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        for i, o in enumerate(summary.failures):
            if i < STORIES_SHOWN + 4:
                _print_failure(o, scen, config, paths[o.seed], full=i < STORIES_SHOWN)
        hidden = len(summary.failures) - (STORIES_SHOWN + 4)
        if hidden > 0:
            click.echo(f"... and {hidden} more failing seeds (traces in {out_dir}/)")
        for o in summary.nondeterministic:
            click.echo(f"NONDETERMINISTIC seed {o.seed}: {o.nondeterminism}")
        rate = summary.runs / seconds if seconds > 0 else 0.0
        by = ", ".join(f"{k} x{v}" for k, v in sorted(summary.by_invariant.items()))
        click.echo(f"{scen.name} [{_config_text(config)}]: {summary.runs:,} runs, "
                   f"{len(summary.failures):,} failed{' (' + by + ')' if by else ''}, "
                   f"{rate:,.0f} runs/s ({seconds:.1f}s)")
        if check_determinism:
            click.echo(f"determinism: {summary.runs - len(summary.nondeterministic):,} of "
                       f"{summary.runs:,} seeds replayed identically")
    if summary.nondeterministic:
        sys.exit(EXIT_DIVERGED)
    sys.exit(EXIT_VIOLATION if summary.failures else EXIT_OK)


# -- replay / show --------------------------------------------------------------


def _load_trace(path: str) -> tuple[Trace, Scenario]:
    trace = read_trace(path)
    return trace, load(trace.header["scenario"])


@main.command("replay")
@click.argument("trace_path", metavar="TRACE")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def replay_command(trace_path: str, as_json: bool) -> None:
    """Re-run TRACE, forcing its choices, and compare every record.

    Exit 0 or 1 when the replay is identical (by the recorded verdict), 3 when
    it diverged: then the first differing step is shown, with its likely cause.
    """
    try:
        trace, scen = _load_trace(trace_path)
        result = replay_trace(scen, trace)
    except DstError as err:
        _die(err)
    got = result.trace()
    expected_lines, got_lines = trace.record_lines(), got.record_lines()
    diverged: str | None = result.divergence
    if diverged is None:
        for exp, act, rec in zip(expected_lines, got_lines, trace.records, strict=False):
            if exp != act:
                diverged = f"diverged at step {rec['step']}: expected {exp}, got {act}"
                break
        else:
            if len(expected_lines) != len(got_lines):
                diverged = (f"diverged at the end: the trace has {len(expected_lines)} records, "
                            f"the replay {len(got_lines)}")
    verdict = trace.footer.get("verdict")
    if as_json:
        click.echo(json.dumps({"trace": trace_path, "identical": diverged is None,
                               "verdict": verdict, "violated": trace.violated,
                               "divergence": diverged}, indent=2))
    elif diverged is None:
        vio = ", ".join(trace.violated)
        what = f"{vio} violated again" if vio else "no invariant violated"
        click.echo(f"identical: {len(expected_lines)} records replayed byte for byte; "
                   f"verdict {verdict} ({what})")
    else:
        click.echo(f"{diverged}\n  likely cause: the code under test (or the scenario) "
                   "changed since the trace was recorded, or it is nondeterministic "
                   "(reads something dst does not control); "
                   "`dst run --check-determinism` tells which")
    if diverged is not None:
        sys.exit(EXIT_DIVERGED)
    sys.exit(EXIT_VIOLATION if verdict == "fail" else EXIT_OK)


@main.command("show")
@click.argument("trace_path", metavar="TRACE")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown"]), default="text",
              show_default=True, help="How to render the timeline.")
@click.option("--verbose", "-v", is_flag=True, help="Also show the scheduler's decisions.")
@click.option("-o", "output", type=click.Path(dir_okay=False), default=None,
              help="Write to this file instead of stdout.")
def show_command(trace_path: str, fmt: str, verbose: bool, output: str | None) -> None:
    """Print TRACE as a timeline: step, virtual time, actor, what happened."""
    try:
        trace = read_trace(trace_path)
    except DstError as err:
        _die(err)
    text = (render_markdown if fmt == "markdown" else render_text)(trace, verbose=verbose)
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)


__all__ = ["main", "write_trace"]
