"""``dst explore SCENARIO``: run every schedule within bounds, and say what that proves.

The command around :mod:`dst.explore.exhaustive`: parses the bounds, runs the
search (and plain depth-first search beside it with ``--compare-dfs``, to show
what partial-order reduction saved), writes the shortest violating schedule of
each broken check as an ordinary trace, checks that ``dst replay`` reproduces
it, and prints the verdict of every check with the sentence that says under
which bounds "no violation" is a proof.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from ..errors import DstError, UsageError
from ..explore.exhaustive import (
    BUILT_IN,
    Bounds,
    Exploration,
    Violation,
    deepen,
    record,
    replays,
)
from ..registry import is_shipped, load
from ..runner.bulk import user_error
from ..scenario import Scenario
from ..trace.codec import write_trace
from ..trace.escape import visible
from ..trace.model import scenario_file
from ..trace.render import counted, replay_line
from ..verdict_table import only
from .arguments import Seed, key_values, out_dir

EXIT_OK, EXIT_VIOLATION = 0, 1


def _die(err: DstError) -> NoReturn:
    """One line on stderr, ``error: ...``, and the error's exit status (as ``dst`` does)."""
    click.echo(f"error: {' '.join(str(err).split())}", err=True)
    sys.exit(err.exit_code)


def _duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"--budget {text!r} is not a duration like 30s, 5m, 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


@click.command("explore")
@click.argument("scenario_ref", metavar="SCENARIO")
@click.option("-c", "switches", multiple=True, metavar="KEY=VALUE",
              help="Set a switch (repeatable).")
@click.option("--max-steps", type=click.IntRange(min=1), default=None,
              help="Decisions per schedule; a run with more to do is cut "
                   "[default: the scenario's max_steps].")
@click.option("--crashes", type=click.IntRange(min=0), default=None,
              help="Crash budget per schedule [default: the scenario's fault plan].")
@click.option("--drops", type=click.IntRange(min=0), default=None,
              help="Message drop budget per schedule [default: the scenario's fault plan].")
@click.option("--dups", type=click.IntRange(min=0), default=None,
              help="Message duplicate budget per schedule [default: the scenario's fault plan].")
@click.option("--preemptions", type=click.IntRange(min=0), default=None,
              help="Preemptions at trio checkpoints per schedule "
                   "[default: the scenario's fault plan]. While one is left no step is "
                   "independent, so reduction skips nothing: 0 lets it work.")
@click.option("--partitions", type=click.IntRange(min=0), default=None,
              help="Network partitions per schedule [default: the scenario's fault plan].")
@click.option("--slow", type=click.IntRange(min=0), default=None,
              help="Timers firing while other work could run, per schedule "
                   "[default: the scenario's fault plan].")
@click.option("--service-faults/--no-service-faults", default=None,
              help="Keep the scenario's service fault budgets [default: on when its "
                   "fault plan has any].")
@click.option("--invariant", "invariants", multiple=True, metavar="NAME",
              help="Check only this invariant (repeatable); every invariant checked gets "
                   "its own verdict, past the others' violations.")
@click.option("--max-schedules", type=click.IntRange(min=1), default=100_000,
              show_default=True, help="Stop (not a proof) after this many schedules.")
@click.option("--budget", default=None, metavar="DURATION",
              help="Stop (not a proof) after this long: 30s, 5m, 1h.")
@click.option("--seed", type=Seed(), default=0, show_default=True,
              help="Seed of the fakes' own draws (sim.rng, env.rng); choices are all explored.")
@click.option("--no-por", is_flag=True, help="Plain depth-first search: every interleaving.")
@click.option("--compare-dfs", is_flag=True,
              help="Also run plain depth-first search and report what reduction saved.")
@click.option("--check-reduction", is_flag=True,
              help="Also run plain depth-first search (no reduction, no state caching) "
                   "over the same bounds, and exit 5 if its verdicts or shortest "
                   "violations differ from the reduced search's.")
@click.option("--prune-states/--no-prune-states", default=None,
              help="Skip states explored before (needs @scenario.fingerprint, and one "
                   "that names every object the processes share) [default: when the "
                   "scenario's fingerprint is exact].")
@click.option("--out", default="traces/explore", show_default=True,
              help="Where the shortest violating schedule of each check is written.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def command(scenario_ref: str, switches: tuple[str, ...], max_steps: int | None,
            crashes: int | None, drops: int | None, dups: int | None, preemptions: int | None,
            partitions: int | None, slow: int | None, service_faults: bool | None,
            invariants: tuple[str, ...], max_schedules: int, budget: str | None, seed: int,
            no_por: bool, compare_dfs: bool, check_reduction: bool, prune_states: bool | None,
            out: str, as_json: bool) -> None:
    """Run every schedule of SCENARIO within bounds: a proof, or the shortest trace.

    Every interleaving, timer, data choice and fault within the bounds is run,
    once per reordering of independent steps (partial-order reduction with
    sleep sets), and a state explored before is not explored again when the
    scenario's fingerprint is exact.  The fault budgets are the scenario's own
    plan's (what `dst run` explores) unless set lower (--crashes, --drops, --dups,
    --preemptions, --partitions, --slow, --no-service-faults); the summary names every
    bound set below the plan.  The search goes deeper in turn (every schedule of
    up to 8 steps, 16, ... up to --max-steps), so a search stopped by its budget
    still says the depth it covered completely.  An eventually property is
    checked only without reduction (--no-por), and only on runs long enough to
    reach its deadline; otherwise it is "not checked".  Each invariant gets its
    own verdict (a run goes on past one invariant's violation).  A check that
    breaks is written as the shortest violating trace found; a check that holds
    is proven for the bounds the summary states.

    \b
    Examples:
      dst explore counter -c workers=2 -c increments=3
      dst explore counter -c cas=false --compare-dfs
      dst explore counter -c cas=false --check-reduction
      dst explore approval -c llm=happy -c spend_mode=after \\
          --invariant AtMostOnce --invariant NoResurrection
      dst explore bank.py --max-steps 40 --crashes 1 --budget 5m --json

    \b
    Exit status: 0 nothing violated (a proof only if the summary says so),
    1 a check was violated, 2 bad input, 3 the scenario did not repeat itself
    under the same choices, 4 the scenario itself is broken, 5 --check-reduction
    found the reduced search disagreeing with plain search.
    """
    try:
        scenario = load(scenario_ref)
        config = scenario.config(key_values(switches))
        if invariants:
            scenario = only(scenario, invariants)
        plan = scenario.fault_plan(config)
        bounds = Bounds(
            max_steps=max_steps or scenario.max_steps,
            crashes=plan.max_crashes if crashes is None else crashes,
            drops=plan.max_drops if drops is None else drops,
            dups=plan.max_dups if dups is None else dups,
            preemptions=plan.preemptions if preemptions is None else preemptions,
            partitions=plan.max_partitions if partitions is None else partitions,
            slow=plan.max_slow if slow is None else slow,
            service_faults=bool(plan.services) if service_faults is None else service_faults,
            max_schedules=max_schedules, budget=_duration(budget) if budget else None)
        where = out_dir(out)
        show = _Progress(enabled=not as_json and sys.stderr.isatty())
        result = _guarded(scenario, scenario_ref, config, seed, lambda: deepen(
            scenario, config, bounds, por=not no_por, prune_states=prune_states, seed=seed,
            progress=show.update))
        plain = None
        if (compare_dfs or check_reduction) and not no_por:
            # One budget for both searches: the plain one gets what the reduced one left.
            left = (bounds if bounds.budget is None else dataclasses.replace(
                bounds, budget=max(0.0, bounds.budget - result.seconds)))
            plain = _guarded(scenario, scenario_ref, config, seed, lambda: deepen(
                scenario, config, left, por=False, prune_states=False, seed=seed,
                progress=show.update))
        show.close()
        # `dst replay` runs every check of the scenario as shipped, not only --invariant's.
        full = load(scenario_ref) if invariants else scenario
        written: dict[str, dict[str, Any]] = {}
        for name, v in sorted(result.violations.items()):
            written[name] = _guarded(scenario, scenario_ref, config, seed, functools.partial(
                _write, scenario, full, scenario_ref, result, v, where, seed))
    except DstError as err:
        _die(err)
    if as_json:
        click.echo(json.dumps(_document(result, plain, written, seed), indent=2))
    else:
        _print(result, plain, written)
    if check_reduction and plain is not None:
        if not (plain.exhausted and result.exhausted):
            click.echo("check-reduction: not checked, a search stopped before every "
                       "schedule ran (raise --max-schedules or --budget)", err=True)
        elif (differs := _disagreement(result, plain)) is not None:
            click.echo(f"check-reduction: FAILED, the reduced search disagrees with plain "
                       f"depth-first search ({differs}): a bug in dst's reduction; "
                       "trust the plain search (--no-por --no-prune-states) and report it",
                       err=True)
            sys.exit(EXIT_UNSOUND)
    sys.exit(EXIT_VIOLATION if result.violations else EXIT_OK)


#: Exit status of ``--check-reduction`` when the reduced search disagrees with plain search.
EXIT_UNSOUND = 5


T = TypeVar("T")


def _guarded(scenario: Scenario, ref: str, config: dict[str, Any], seed: int,
             work: Callable[[], T]) -> T:
    """Run ``work``; an exception from the scenario's own code is one line, exit 4."""
    try:
        return work()
    except DstError:
        raise  # bad input, or the scenario not repeating itself (exit 3)
    except Exception as exc:
        raise user_error(exc, scenario, ref, config, seed) from None


class _Progress:
    """A line on stderr, redrawn at most twice a second, on a terminal only."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.shown = -1.0

    def update(self, result: Exploration, seconds: float) -> None:
        if self.enabled and seconds - self.shown >= 0.5:
            self.shown = seconds
            click.echo(f"\r  {result.schedules:,} schedules, depth {result.max_depth}, "
                       f"{seconds:.0f}s ", nl=False, err=True)

    def close(self) -> None:
        if self.enabled and self.shown >= 0:
            click.echo("\r\033[K", nl=False, err=True)


def _write(scenario: Scenario, full: Scenario, ref: str, result: Exploration,
           violation: Violation, where: Path, seed: int) -> dict[str, Any]:
    """Write the schedule as a trace; say whether `dst replay` reproduces it."""
    run = record(scenario, result, violation, seed=seed)
    run.scenario_file = scenario_file(ref)  # in the header: the file, from here
    trace = run.trace()
    path = write_trace(trace, where / f"{scenario.name}-explore-{violation.name}.jsonl")
    again = replay_line(str(path), None if is_shipped(scenario.name) else ref)
    why = replays(full, trace)
    return {"trace": str(path), "replay": again if why is None else None,
            "replay_divergence": why, "filtered": full is not scenario}


def _checks(result: Exploration) -> list[str]:
    names = list(result.checks)
    names += [n for n in BUILT_IN if n in result.violations]
    names += sorted(n for n in result.violations if n not in names)
    return names


def _document(result: Exploration, plain: Exploration | None, written: dict[str, Any],
              seed: int) -> dict[str, Any]:
    b = result.bounds
    checks: dict[str, Any] = {}
    for name in [*_checks(result), *(n for n in BUILT_IN if n not in result.violations)]:
        verdict, proven = result.verdict(name)
        entry: dict[str, Any] = {"verdict": verdict, "proof": proven,
                                 "caveat": result.caveat(name) or None}
        v = result.violations.get(name)
        if v is not None:
            w = written[name]
            entry.update(shortest_steps=v.steps, schedules=v.schedules, message=v.message,
                         trace=w["trace"], replay=w["replay"],
                         replay_divergence=w["replay_divergence"])
        checks[name] = entry
    return {
        "scenario": result.scenario, "config": result.config, "seed": seed,
        "bounds": {"max_steps": b.max_steps, "crashes": b.crashes, "drops": b.drops,
                   "dups": b.dups, "preemptions": b.preemptions, "partitions": b.partitions,
                   "slow": b.slow, "service_faults": b.service_faults,
                   "max_schedules": b.max_schedules, "budget_seconds": b.budget},
        "por": result.por, "no_reduction": result.no_reduction,
        "prune_states": result.prune_states, "no_pruning": result.no_pruning,
        "schedules": result.schedules, "exhausted": result.exhausted,
        "stopped": result.stopped, "proof": result.proof, "statement": result.statement(),
        "limits": result.limits(), "complete_depth": result.complete_depth,
        "runs": {"at_rest": result.ended["rest"], "violation": result.ended["violation"],
                 "cut": result.ended["cut"], "sleep_blocked": result.ended["sleep"],
                 "state_pruned": result.ended["state"]},
        "pruned_branches": result.pruned_branches, "distinct_states": result.states,
        "max_depth": result.max_depth, "seconds": round(result.seconds, 3),
        "plain_dfs": None if plain is None else {
            "schedules": plain.schedules, "exhausted": plain.exhausted,
            "seconds": round(plain.seconds, 3), "agrees": _disagreement(result, plain) is None,
            "shortest": {n: v.steps for n, v in sorted(plain.violations.items())}},
        "checks": checks,
    }


def _disagreement(result: Exploration, plain: Exploration) -> str | None:
    """Where plain depth-first search saw other verdicts or other shortest violations."""
    mine = {n: v.steps for n, v in result.violations.items()}
    theirs = {n: v.steps for n, v in plain.violations.items()}
    if mine == theirs:
        return None
    return ", ".join(f"{n}: {mine.get(n, 'not violated')} against {theirs.get(n, 'not violated')}"
                     for n in sorted(set(mine) | set(theirs)) if mine.get(n) != theirs.get(n))


def _config_text(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in sorted(config.items()))


def _print(result: Exploration, plain: Exploration | None, written: dict[str, Any]) -> None:
    echo = click.echo
    echo(f"explore {result.scenario} [{visible(_config_text(result.config))}]: "
         f"{result.bounds.describe()}")
    rate = result.schedules / result.seconds if result.seconds > 0 else 0.0
    reduction = (f"; reduction skipped {result.pruned_branches:,} branches, "
                 f"{result.ended['sleep']:,} runs stopped where every option was asleep"
                 if result.por else "; plain depth-first search"
                 + (f" ({result.no_reduction})" if result.no_reduction else ""))
    echo(f"  schedules      {result.schedules:,}{reduction}")
    if plain is not None:
        if plain.exhausted and result.exhausted:
            saved = plain.schedules - result.schedules
            share = saved / plain.schedules if plain.schedules else 0.0
            differs = _disagreement(result, plain)
            echo(f"  plain DFS      {plain.schedules:,} schedules ({plain.seconds:.2f}s): "
                 f"reduction saved {saved:,} ({share:.0%}); "
                 + ("same verdicts and shortest violations" if differs is None
                    else f"IT DISAGREES: {differs}"))
        else:
            echo(f"  plain DFS      stopped after {plain.schedules:,} schedules "
                 f"({plain.stopped_text()})")
    states = (f"{result.states:,}" if result.states is not None
              else f"- ({result.no_pruning})" if result.no_pruning
              else "- (the scenario declares no @scenario.fingerprint)")
    if result.ended["state"]:
        states += f"; {result.ended['state']:,} runs stopped at a state explored before"
    elif result.no_pruning and result.states is not None:
        states += f" ({result.no_pruning})"
    echo(f"  states         {states}")
    cut = f"; {result.cut:,} schedules cut at the bound" if result.cut else ""
    echo(f"  max depth      {result.max_depth} decisions{cut}")
    echo(f"  time           {result.seconds:.2f}s ({rate:,.0f} schedules/s)")
    for name in _checks(result):
        proven = result.verdict(name)[1]
        v = result.violations.get(name)
        if v is not None:
            w = written[name]
            echo(f"  {name}: VIOLATED, shortest {counted(v.steps, 'step')} "
                 f"({v.schedules:,} schedules): {visible(v.message)}")
            echo(f"      trace:  {w['trace']}")
            if w["replay"] is not None:
                echo(f"      replay: {w['replay']}")
            else:
                cause = replay_cause(name, w["replay_divergence"] or "")
                echo(f"      replay: `dst replay` does not reproduce it{cause}: "
                     f"{visible(w['replay_divergence'] or '')}")
        elif proven:
            echo(f"  {name}: holds")
        elif result.verdict(name)[0] == "not checked":
            echo(f"  {name}: not checked ({result.caveat(name)})")
        else:
            echo(f"  {name}: not violated ({result.caveat(name)})")
    quiet = [n for n in BUILT_IN if n not in result.violations]
    if quiet:
        echo(f"  built-in       no {', '.join(quiet)}")
    echo(f"  {result.statement()}")


def replay_cause(name: str, divergence: str) -> str:
    """Why ``dst replay`` does not reproduce the explored violation of ``name``: it stops
    at another check's violation first, or (no other check broke) the run took another
    path, which a check keeping state between calls, or nondeterministic code, explains."""
    got = divergence.partition(", got ")[2]
    if got.startswith("violation") and f'"invariant":{json.dumps(name)}' not in got:
        return " (it checks every invariant, and another one breaks first on this schedule)"
    return (" (the replay took another path: a check that keeps state between calls, or "
            "code reading what dst does not control; `dst run --check-determinism` tells "
            "which)")
