"""One chunk of seeds, in whatever process runs it: the runs, and what comes back of them.

A chunk of seeds shares one ``trio.run`` (see ``dst.sim.run``).  What a worker
sends back is one small :class:`SeedOutcome` per seed, with the full trace text
of the failing seeds it is asked to keep only: passing runs are never rendered,
which keeps the hot path free of JSON.  The same ``run_chunk`` runs in a local
worker (``dst.runner.bulk``) and on a Dask worker (``dst.runner.cluster_worker``).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import DstError, InternalError, ScenarioError
from ..explore.strategies import explore
from ..registry import describe_exception, load, user_frame
from ..scenario import Scenario
from .determinism import comparable, first_difference
from .groups import KeepPolicy, signature, to_render
from .paths import MemoStats, PathMemo
from .single import RunResult, run_seeds
from .workers import Beat

#: Seeds per task sent to a worker: big enough to amortise ``trio.run`` and the
#: inter-process round trip, small enough for a smooth progress display.
CHUNK = 200


@dataclass(frozen=True)
class SeedOutcome:
    seed: int
    verdict: str
    violated: tuple[str, ...]
    steps: int
    #: Failing seeds (and runs cut at the step bound) whose trace is wanted; None
    #: for the rest, and for a failure a worker was told will not be kept.
    trace_text: str | None
    nondeterminism: str | None = None
    #: Why the run ended; "bound" means it hit its step bound, so its end-of-run
    #: checks did not run (a summary says how many did).
    ended: str = "quiescent"
    #: With a determinism check: the run's record lines and footer, to compare
    #: with the same seed run in another process (``comparable``).
    lines: tuple[str, ...] | None = None
    #: Coverage (``dst.coverage``): probes called, probes that held, and the
    #: digests of the distinct fingerprints the run went through.
    probes_declared: frozenset[str] = frozenset()
    probes_reached: frozenset[str] = frozenset()
    states: frozenset[int] = frozenset()
    #: A failing seed's group (``dst.runner.groups.signature``); None when it passed.
    signature: str | None = None
    #: Why a ``@dst.test`` body called ``pytest.skip()`` in this run: it tested nothing.
    skipped: str | None = None
    #: An earlier seed's run stood for this one: same decisions (``dst.runner.paths``).
    reused: bool = False



def _skip_reason(r: RunResult) -> str | None:
    """Why the ``@dst.test`` body of run ``r`` called ``pytest.skip()``, or None (also for a
    scenario's run: no ``@dst.test`` was loaded, so ``dst.small`` is not imported either)."""
    small = sys.modules.get("dst.small")
    return None if small is None else small.skip_reason(r.sim)


def _passed(r: RunResult) -> SeedOutcome | RunResult:
    """A run that passed and ended on its own, as its outcome (no trace is ever rendered
    for it); any other run as it is, for ``_outcomes`` to look at beside its chunk.

    Called as each run ends, so that a chunk keeps only its failing and bounded runs
    alive: a chunk of 200 finished runs held to its end made the collector walk them
    all between seeds."""
    if r.verdict == "fail" or r.ended == "bound":
        return r
    return SeedOutcome(r.seed, r.verdict, tuple(r.violated), r.steps, None, ended=r.ended,
                       probes_declared=r.probes_declared, probes_reached=r.probes_reached,
                       states=r.states, skipped=_skip_reason(r), reused=r.reused)


def _outcomes(results: list[RunResult] | list[SeedOutcome | RunResult],
              keep: KeepPolicy | None) -> list[SeedOutcome]:
    """One outcome per run, with the traces worth rendering: with ``keep`` None every
    failing and bounded run's (the caller keeps them all), else those ``keep`` wants.
    A run already made an outcome (``_passed``) stays as it is."""
    runs = [r for r in results if isinstance(r, RunResult)]
    sigs = {r.seed: signature(r.sim.records, r.violated) for r in runs
            if r.verdict == "fail"}
    if keep is None:
        render = set(sigs) | {r.seed for r in runs if r.ended == "bound"}
    else:
        render = to_render(((r.seed, r.steps, sigs[r.seed]) for r in runs
                            if r.seed in sigs), keep)
        bounded = [r.seed for r in runs if r.ended == "bound" and r.seed not in sigs]
        render.update(bounded[:keep.bounded])
    return [r if isinstance(r, SeedOutcome) else
            SeedOutcome(r.seed, r.verdict, tuple(r.violated), r.steps,
                        r.trace().text() if r.seed in render else None, ended=r.ended,
                        probes_declared=r.probes_declared, probes_reached=r.probes_reached,
                        states=r.states, signature=sigs.get(r.seed),
                        skipped=_skip_reason(r), reused=r.reused)
            for r in results]


# -- one chunk, in whatever process runs it ---------------------------------------------


def _run_pass(scenario: Scenario, ref: str, config: Mapping[str, Any], seeds: Iterable[int],
               beat: Beat | None, strategy: str = "random",
               keep_as: Callable[[RunResult], Any] | None = None,
               reuse: bool | PathMemo = False) -> list[Any]:
    """Run ``seeds`` in order under the strategy ``strategy`` names (a spec of
    ``dst.explore.strategies``), stopping early when asked; user errors become one line.

    Each run's result, or what ``keep_as`` makes of it as the run ends.  ``reuse``
    is ``run_seeds``'s: off by default here, where a determinism check runs
    every seed itself."""
    results: list[Any] = []
    current = [-1]

    def feed() -> Iterator[int]:
        for seed in seeds:
            if beat is not None:
                if beat.stopped:
                    return
                beat.starting(seed)
            current[0] = seed
            yield seed

    def done(r: RunResult) -> None:
        results.append(r if keep_as is None else keep_as(r))
        if beat is not None:
            beat.finished()

    try:
        how = explore(strategy, scenario, config)
        run_seeds(scenario, config, feed(), done, strategy=how.strategy, plan=how.plan,
                  reuse=reuse)
    except (DstError, KeyboardInterrupt):
        raise
    except BaseException as exc:
        raise user_error(exc, scenario, ref, config, current[0]) from None
    return results


def _disagreement(outcomes: list[SeedOutcome], stats: MemoStats) -> list[SeedOutcome]:
    """The outcomes, the seed whose run showed the memo two runs of one schedule that
    differ told as a seed that did not repeat itself (``--check-determinism``'s report)."""
    if stats.disagreement is None:
        return outcomes
    return [replace(o, nondeterminism=stats.disagreement) if o.seed == stats.disagreed_at
            else o for o in outcomes]


def run_chunk(
    scenario_ref: str, config: Mapping[str, Any], seeds: list[int],
    check_determinism: bool = False, *, beat: Beat | None = None, strategy: str = "random",
    keep: KeepPolicy | None = None, scenario_file: str | None = None,
    reuse: bool | PathMemo = True,
) -> list[SeedOutcome]:
    """Run one chunk; with ``check_determinism`` each seed twice in a row, keeping every
    run's lines.

    Every failing outcome carries its signature; its trace text only if ``keep``
    wants it (``keep`` None: every failing and bounded run's trace, as a caller
    that keeps them all needs).  A seed's second run comes right after its first,
    in the same process, so a run that depends on what an earlier run left behind (a
    module global) differs.  ``scenario_file`` goes in the header of every trace
    rendered (``dst.trace.model.scenario_file``, made by the process that was asked).
    Without the check, a seed that takes an earlier seed's decisions is answered with
    that run (``reuse``, as ``run_seeds`` says); with it, every seed runs twice.
    """
    scenario = load(scenario_ref)
    if not check_determinism:
        if reuse is True:  # a memo of this chunk's own, so that its disagreement is told
            reuse = PathMemo()
        told = isinstance(reuse, PathMemo) and reuse.stats.disagreement is not None
        kept = _run_pass(scenario, scenario_ref, config, seeds, beat, strategy, _passed,
                         reuse)
        for r in kept:
            if isinstance(r, RunResult):
                r.scenario_file = scenario_file
        outcomes = _outcomes(kept, keep)
        if isinstance(reuse, PathMemo) and not told:
            return _disagreement(outcomes, reuse.stats)
        return outcomes
    # Each seed twice in a row, so that what a run leaves behind meets the very next run:
    # a chunk run whole and then again would pair runs a chunk apart, which state that
    # cycles (a counter's parity) can line up.  A stop may cut the last pair short: only
    # the seeds run twice count.
    both = _run_pass(scenario, scenario_ref, config, [s for s in seeds for _ in (0, 1)], beat,
                     strategy)
    first, second = both[0::2], both[1::2]
    first = first[:len(second)]
    for r in first:
        r.scenario_file = scenario_file
    outcomes = _outcomes(first, keep)
    checked = []
    for a, b, o in zip(first, second, outcomes, strict=True):
        diff = first_difference(a, b)
        o = replace(o, lines=comparable(a))
        checked.append(o if diff is None else
                       replace(o, nondeterminism=diff, trace_text=a.trace().text()))
    return checked


def user_error(exc: BaseException, scenario: Scenario, ref: str, config: Mapping[str, Any],
               seed: int) -> DstError:
    """One line for an exception the scenario's own code raised where dst called it.

    Names the part of the scenario (setup, an invariant, an end-of-run check),
    the exception, the user's file and line, the seed, and the way to reproduce.
    A failure with no frame of the user's code is dst's own: an internal error.
    """
    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, DstError):
        return leaf
    roles: dict[Any, str] = {}
    setup = getattr(scenario, "_setup", None)
    if setup is not None:
        roles[getattr(setup, "__code__", None)] = "setup"
    for name, fn in scenario.invariants.items():
        roles[getattr(fn, "__code__", None)] = f"invariant {name}"
    for name, fn in scenario.end_checks.items():
        roles[getattr(fn, "__code__", None)] = f"end-of-run check {name}"
    fingerprint = getattr(scenario, "fingerprint_of", None)
    if fingerprint is not None:
        roles[getattr(fingerprint, "__code__", None)] = "fingerprint"
    tb = leaf.__traceback__
    role = None
    while tb is not None and role is None:
        role = roles.get(tb.tb_frame.f_code)
        tb = tb.tb_next
    where = user_frame(leaf)
    if role is None and where is None:
        return InternalError(f"{describe_exception(leaf)} while running seed {seed} "
                             f"of {scenario.name}")
    at = f" at {where[0]}:{where[1]}" if where else ""
    fix = ("fix the check so that it returns True, False or a message"
           if role and role != "setup" else "fix it")
    switches = "".join(f" -c {k}={_show(v)}" for k, v in config.items()
                       if k in scenario.switches and v != scenario.switches[k].default)
    return ScenarioError(
        f"{role or 'the scenario'} of {scenario.name} raised {describe_exception(leaf)}{at} "
        f"(seed {seed}); {fix}, then check with: dst run {shlex.quote(ref)}{switches} "
        f"--seed {seed}")


def _show(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def seed_chunks(seeds: Iterable[int]) -> Iterator[list[int]]:
    """Cut ``seeds`` into chunks of at most ``CHUNK`` *contiguous* seeds.

    Contiguous, so that the results database can mark a chunk done as one range.
    """
    chunk: list[int] = []
    for seed in seeds:
        if chunk and (len(chunk) >= CHUNK or seed != chunk[-1] + 1):
            yield chunk
            chunk = []
        chunk.append(seed)
    if chunk:
        yield chunk
