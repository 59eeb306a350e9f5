"""``dst check SCENARIO``: the correct design holds, and every planted bug is still found.

A scenario makes two promises, and both rot silently: the default config (the
correct design) passes, and each declared planted bug is found by a random
search (a change to the system or the scenario can hide it, and a checker that
no longer finds a known bug will not find an unknown one).  ``dst check`` runs
one row per promise: the default config over ``--seeds`` seeds, which must all
pass, and each planted bug until every invariant it declares is broken, within
the same number of seeds.  One line a row; exit 1 when a row does not hold.
Seeds run on worker processes as in ``dst run`` (a seed that hangs is stopped
and reported, exit 4), and a row stops at the first seeds that settle it.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from dst.errors import DstError
from dst.registry import is_shipped, load
from dst.runner.bulk import BulkSummary, SeedOutcome, run_bulk
from dst.scenario import Scenario
from dst.trace.escape import visible
from dst.trace.model import scenario_file
from dst.trace.render import replay_line

from .pin import refuse

#: Seeds each row gets unless ``--seeds`` says otherwise.
DEFAULT_SEEDS = 300


def _search(ref: str, config: Mapping[str, Any], seeds: int, workers: int,
            settled: Any) -> BulkSummary:
    """Run seeds ``0..seeds-1`` until ``settled(summary)`` holds (checked after each chunk)."""
    summary = BulkSummary(keep_traces=True)
    done = [False]

    def feed() -> Iterator[int]:
        for seed in range(seeds):
            if done[0]:
                return
            yield seed

    def on_chunk(s: BulkSummary, _outcomes: list[SeedOutcome]) -> None:
        done[0] = done[0] or settled(s)

    run_bulk(ref, config, feed(), workers=workers, on_chunk=on_chunk, summary=summary,
             scenario_file=scenario_file(ref))  # in the header: the file, from here
    if summary.stalled:
        raise _Stalled(summary.stalled)
    return summary


class _Stalled(DstError):
    exit_code = 4


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _settings(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_show(v)}" for k, v in config.items())


def _default_row(scen: Scenario, ref: str, scenario_arg: str, seeds: int, workers: int,
                 out: Path) -> tuple[bool, str]:
    config = scen.default_config()
    began = time.monotonic()
    summary = _search(ref, config, seeds, workers, lambda s: bool(s.failures))
    took = f"({time.monotonic() - began:.1f}s)"
    what = f"default [{_settings(config)}]"
    if not summary.failures:
        cut = f"; {summary.bounded} cut at the step bound" if summary.bounded else ""
        return True, f"ok    {what}: no violation in {summary.runs} seeds{cut} {took}"
    first = min(summary.failures, key=lambda o: o.seed)
    path = out / f"{scen.name}-{first.seed}.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(first.trace_text or "", encoding="utf-8")
    replay = replay_line(str(path), None if is_shipped(scenario_arg) else scenario_arg)
    return False, (f"FAIL  {what}: {', '.join(first.violated)} violated in seed {first.seed} "
                   f"{took}; replay: {replay}")


def _bug_row(scen: Scenario, ref: str, index: int, seeds: int,
             workers: int) -> tuple[bool, str]:
    bug = scen.planted_bugs[index]
    config = scen.checked_config(bug.config)
    wanted = set(bug.breaks)
    began = time.monotonic()
    summary = _search(ref, config, seeds, workers,
                      lambda s: wanted <= set(s.by_invariant))
    took = f"({time.monotonic() - began:.1f}s)"
    what = f"planted bug {_settings(bug.config)} (breaks {', '.join(bug.breaks)})"
    broken = set(summary.by_invariant)
    if wanted <= broken:
        by = {name: min(o.seed for o in summary.failures if name in o.violated)
              for name in bug.breaks}
        found = ", ".join(f"{name} by seed {seed}" for name, seed in by.items())
        return True, f"ok    {what}: found, {found} {took}"
    missing = ", ".join(sorted(wanted - broken))
    also = f"; broke only {', '.join(sorted(broken))}" if broken else ""
    switches = " ".join(f"-c {shlex.quote(f'{k}={_show(v)}')}" for k, v in bug.config.items())
    return False, (f"LOST  {what}: {missing} not broken in {summary.runs} seeds{also} {took}; "
                   f"see: dst run {shlex.quote(ref)} {switches} --seeds {seeds}")


@click.command("check")
@click.argument("scenario")
@click.option("--seeds", type=click.IntRange(min=1), default=DEFAULT_SEEDS, show_default=True,
              help="Seeds each row gets: the default config must pass all of them, and "
                   "each planted bug must be found within them.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes.")
@click.option("--out", default="traces/failures", show_default=True,
              help="Where the trace of a failing default-config seed is written.")
def command(scenario: str, seeds: int, workers: int, out: str) -> None:
    """Check that SCENARIO's default config passes and its planted bugs are still found.

    SCENARIO is a shipped name, a .py file or a module. One line a row: ok,
    FAIL (the default config broke a check: the seed and its replay command)
    or LOST (a planted bug was not found within --seeds seeds).

    Exit status: 0 every row holds, 1 a row does not, 2 bad input, 4 the
    scenario itself is broken.

    \b
      dst check counter
      dst check bank.py --seeds 1000
    """
    try:
        scen = load(scenario)
        ref = scenario if not is_shipped(scenario) else scen.name
        began = time.monotonic()
        rows = [_default_row(scen, ref, scenario, seeds, workers, Path(out))]
        click.echo(visible(f"{scen.name}: {rows[0][1]}"))
        for index in range(len(scen.planted_bugs)):
            rows.append(_bug_row(scen, ref, index, seeds, workers))
            click.echo(visible(f"{scen.name}: {rows[-1][1]}"))
    except DstError as err:
        refuse(err)
    held = sum(ok for ok, _ in rows)
    bugs = "" if scen.planted_bugs else " (it declares no planted bug: dst cannot tell " \
        "whether a search would find one)"
    click.echo(f"{scen.name}: {held} of {len(rows)} rows hold{bugs} "
               f"({time.monotonic() - began:.1f}s)")
    raise SystemExit(0 if held == len(rows) else 1)
