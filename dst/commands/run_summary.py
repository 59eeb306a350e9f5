"""What ``dst run`` says when it is done: the failure groups, the summary line, JSON.

Each group is told once, by its shortest seed: its story (shrunk when it could
be), the trace kept and the one command that replays it, how many seeds failed
alike, and the first of them.  The first few groups get their story, the next
few a line each; ``--json`` and ``--summary-md`` list them all.  Whatever the
number of failing seeds, what is printed is bounded by the number of groups, and
that by ``--max-groups``: the failing seeds of groups not kept are one line of
counts per invariant.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..errors import DstError
from ..runner.bulk import BulkSummary, SeedOutcome
from ..runner.groups import MAX_GROUPS, GroupBook, Report, Shrunk, shape
from ..runner.recorder import Recorder
from ..runner.reports import config_text, not_kept_text, shown_trace, violation_of
from ..scenario import Scenario
from ..trace.codec import read_trace
from ..trace.escape import encodable, visible
from ..trace.model import Trace
from ..trace.render import STORY_TAIL, counted, format_time, replay_line, story

#: Failure groups told with their story; the next ``GROUPS_LISTED`` get a line each.
STORIES_SHOWN = 3
GROUPS_LISTED = 10
#: Groups shrunk per invocation (each gets ``dst.commands.shrink.RUN_BUDGET`` seconds),
#: in the order they were found: a run with many groups still ends in a minute.
GROUPS_SHRUNK = 8


@dataclass
class Invocation:
    """The options of one ``dst run``, for the command that continues it and the reports."""

    scenario: str
    switches: tuple[tuple[str, str], ...]
    seeds: int | None
    one_seed: int | None
    seed_range: tuple[int, int] | None
    shard: tuple[int, int] | None
    strategy: str
    workers: int | None
    duration: float | None
    max_failures: int | None
    keep: int | None
    seed_timeout: float | None
    out: str
    check_determinism: bool
    #: The seeds this invocation covers (the shard's, with --shard); stop None: open-ended.
    start: int
    stop: int | None
    ref: str | None
    #: The Dask scheduler the seeds ran on (``--cluster``), if any.
    cluster: str | None = None
    #: Failure groups kept (``--max-groups``).
    max_groups: int = MAX_GROUPS
    #: ``--every-seed``, and ``--shrink``/``--no-shrink`` as given (None: not given).
    every_seed: bool = False
    shrink: bool | None = None

    def seeds_text(self) -> str:
        if self.stop is None:
            return f"{self.start}.. for {duration_text(self.duration or 0)}"
        return f"{self.start}..{self.stop - 1}" if self.stop > self.start else "none"

    def shard_text(self) -> str | None:
        return None if self.shard is None else f"{self.shard[0]}/{self.shard[1]}"

    def replay(self, path: Path) -> str:
        return replay_line(str(path), self.ref)

    def command_line(self) -> str:
        """The command that continues this run: the same one, with ``--resume``.

        A determinism check records nothing, so it is continued by running it again.
        """
        argv = ["dst", "run", self.scenario]
        for key, value in self.switches:
            argv += ["-c", f"{key}={value}"]
        if self.seeds is not None:
            argv += ["--seeds", str(self.seeds)]
        if self.one_seed is not None:
            argv += ["--seed", str(self.one_seed)]
        if self.seed_range is not None:
            argv += ["--seed-range", f"{self.seed_range[0]}:{self.seed_range[1]}"]
        if self.shard is not None:
            argv += ["--shard", f"{self.shard[0]}/{self.shard[1]}"]
        if self.strategy != "random":
            argv += ["--strategy", self.strategy]
        if self.workers is not None:
            argv += ["--workers", str(self.workers)]
        if self.cluster is not None:
            argv += ["--cluster", self.cluster]
        if self.duration is not None:
            argv += ["--for", duration_text(self.duration)]
        if self.max_failures is not None:
            argv += ["--max-failures", str(self.max_failures)]
        if self.keep != 1:
            argv += ["--keep-traces", "all" if self.keep is None else str(self.keep)]
        if self.max_groups != MAX_GROUPS:
            argv += ["--max-groups", str(self.max_groups)]
        if self.seed_timeout is not None:
            argv += ["--seed-timeout", duration_text(self.seed_timeout)]
        if self.every_seed:
            argv += ["--every-seed"]
        if self.shrink is not None:
            argv += ["--shrink" if self.shrink else "--no-shrink"]
        argv += ["--out", self.out]
        argv += ["--check-determinism"] if self.check_determinism else ["--resume"]
        return " ".join(shlex.quote(a) for a in argv)

    def status(self, summary: BulkSummary) -> str:
        """How the run ended, as the ``runs`` table and the reports say it."""
        if summary.stalled or summary.not_run:
            return "incomplete"
        if summary.interrupted:
            return "interrupted"
        if summary.stopped_early:
            return "max-failures"
        if self.duration is not None and (self.stop is None
                                          or summary.runs < self.stop - self.start):
            return "time-up"
        return "done"


def rerun_line(run: Invocation, seed: int) -> str:
    """``dst run SCENARIO -c ... --seed N``: one seed again, its trace written."""
    argv = ["dst", "run", run.scenario, *[w for k, v in run.switches
                                          for w in ("-c", f"{k}={v}")]]
    if run.strategy != "random":
        argv += ["--strategy", run.strategy]
    return " ".join(shlex.quote(a) for a in [*argv, "--seed", str(seed)])


def duration_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def ranges_text(ranges: list[tuple[int, int]]) -> str:
    return ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in sorted(ranges))


# -- shrinking each group's shortest trace ----------------------------------------------


def shrink_groups(scenario_ref: str, book: GroupBook, recorder: Recorder) -> None:
    """Shrink the shortest kept trace of each group not shrunk yet (``GROUPS_SHRUNK`` at
    most), recording the shrunk story and its shape, by which groups merge."""
    todo = [g for g in book.ordered() if g.shrunk is None and g.kept][:GROUPS_SHRUNK]
    if not todo:
        return
    from .shrink import shrink_failures  # the shrinker, only when there is a story to shrink

    try:
        for group in todo:
            steps, seed, path = group.kept[0]
            stand_in = SeedOutcome(seed, "fail", group.violated, steps, None)
            got = shrink_failures(scenario_ref, [stand_in], {seed: path}).get(seed)
            if got is None:
                continue
            try:
                trace = read_trace(got.path)
            except DstError:
                continue
            group.shrunk = Shrunk(got.path, got.steps, got.from_steps, seed,
                                  shape(trace.records, trace.violated))
            recorder.set_shrunk(group)
    except KeyboardInterrupt:
        pass  # keep what is shrunk; the rest is told as found


# -- telling it ------------------------------------------------------------------------


def _echo(line: str) -> None:
    """Print a line of the summary.  Text from traces is already made visible; a lone
    surrogate left in a path or a command (an argument that was not UTF-8) is
    escaped, so that printing it cannot fail."""
    click.echo(encodable(line))


def _where(g: Report, seed: int, found: tuple[Path, Trace] | None) -> str:
    """Where the headline says the group broke: the step and virtual time of ``seed``'s
    own trace (kept), never those of another trace; when only the shrunk one is there to
    read, its step is told as the shrunk trace's."""
    own = next((path for _, s, path in g.kept if s == seed), None)
    vio = None
    if found is not None and found[0] == own:
        vio = violation_of(found[1])
    elif own is not None:
        try:
            vio = violation_of(read_trace(own))
        except DstError:
            vio = None  # deleted or edited since
    if vio is not None:
        return f"seed {seed}, step {vio['step']}, virtual {format_time(vio['t'])}"
    shrunk = g.shrunk
    vio = violation_of(found[1]) if found is not None and shrunk is not None and \
        found[0] == shrunk.path else None
    if shrunk is None or vio is None:
        return f"seed {seed}"
    of = f" of seed {shrunk.seed}" if shrunk.seed != seed else ""
    return f"seed {seed}; shrunk trace{of}: step {vio['step']}, virtual {format_time(vio['t'])}"


def _print_group(run: Invocation, title: str, g: Report, number: int, full: bool) -> None:
    steps, seed = g.shortest
    found = shown_trace(g) if full or g.kept else None
    trace = found[1] if found else None
    _echo(f"FAIL {title}: {visible(', '.join(g.violated))} violated "
          f"({_where(g, seed, found)})")
    alike = (f"{g.count:,} failing seeds; first seed {g.first_seed}, shortest seed {seed} "
             f"({counted(steps, 'step')})" if g.count > 1
             else f"1 failing seed ({counted(steps, 'step')})")
    _echo(f"  group {number}: {alike}")
    shrunk = g.shrunk
    if full and trace is not None:
        lines = story(trace)
        shown = lines[-STORY_TAIL:]
        width = max([len(actor) for _, _, actor, _ in shown] + [8])
        time_w = max([len(t) for _, t, _, _ in shown] + [0])  # "1d 00:00:00.000" is wider
        told = (f"shrunk from {shrunk.from_steps} to {counted(shrunk.steps, 'step')}"
                if shrunk and found and found[0] == shrunk.path else counted(steps, "step"))
        tail = f"; the last {len(shown)} shown" if len(shown) < len(lines) else ""
        _echo(f"  story ({counted(len(lines), 'line')}, {told}{tail}):")
        for i, (_step, t, actor, text) in enumerate(shown, len(lines) - len(shown) + 1):
            _echo(f"    {i:>3}  {t:>{time_w}}  {actor:<{width}}  {text}")
    if shrunk:
        _echo(f"  shrunk: {shrunk.path} ({counted(shrunk.steps, 'step')}, from "
              f"{shrunk.from_steps})")
        _echo(f"  replay: {run.replay(shrunk.path)}")
    if g.kept:
        path = g.kept[0][2]
        _echo(f"  trace:  {path}")
        _echo(f"  replay: {run.replay(path)}")
    else:
        _echo(f"  no trace kept; run it again with: {rerun_line(run, seed)}")


def print_summary(run: Invocation, scen: Scenario, config: dict[str, Any],
                  summary: BulkSummary, groups: list[Report], paths: dict[int, Path],
                  seconds: float, resumed: int) -> None:
    title = f"{scen.name} [{config_text(config)}]"
    for i, g in enumerate(groups[:STORIES_SHOWN + GROUPS_LISTED], 1):
        _print_group(run, title, g, i, full=i <= STORIES_SHOWN)
    hidden = len(groups) - STORIES_SHOWN - GROUPS_LISTED
    if hidden > 0:
        _echo(f"... and {hidden:,} more failure groups (--json and --summary-md list "
                   "them all)")
    book = summary.groups
    unkept = not_kept_text(book.not_kept_failed, book.not_kept, run.max_groups)
    if unkept:
        _echo(f"... {unkept}")
    for o in summary.nondeterministic:
        _echo(f"NONDETERMINISTIC seed {o.seed}: {o.nondeterminism}")
    new = summary.runs - resumed
    rate = new / seconds if seconds > 0 else 0.0
    by = ", ".join(f"{k} x{v}" for k, v in sorted(summary.by_invariant.items()))
    earlier = f" ({resumed:,} done earlier, resumed)" if resumed else ""
    how = f" under {run.strategy}" if run.strategy != "random" else ""
    more = "more than " if unkept else ""
    grouped = (f" in {more}{len(groups):,} group{'s' * (len(groups) != 1 or bool(more))}"
               if summary.failed else "")
    skipped = sum(summary.skipped.values())
    skips = f" ({skipped_counts(summary)})" if skipped else ""
    _echo(f"{title}{how}: {summary.runs:,} run{'s' * (summary.runs != 1)}{earlier}{skips}, "
          f"{summary.failed:,} failed{' (' + by + ')' if by else ''}{grouped}, "
          f"{rate:,.0f} runs/s ({seconds:.1f}s)")
    if skipped:
        _echo(skipped_text(summary))
    if summary.reused:
        _echo(f"{summary.reused:,} of {new:,} seeds took the decisions of an earlier seed, "
              "whose run (confirmed by a second) stood for theirs (--every-seed runs each)")
    _print_coverage(scen, summary)
    if summary.bounded:
        first = next((paths[s] for s in summary.bounded_seeds if s in paths),
                     next(iter(paths.values()), None))
        _echo(f"{summary.bounded:,} runs hit the step bound ({scen.max_steps:,} steps) "
                   "before the system came to rest, so their end-of-run checks did not run"
                   + (f"; see one with: dst show {first}" if first else ""))
    again = run.command_line()
    if summary.not_run:
        _echo(f"not run: seeds {ranges_text(summary.not_run)} were in flight on a worker "
                   "that had to be stopped; they are not recorded as done")
    if summary.interrupted or summary.not_run:
        if run.check_determinism:
            _echo("interrupted: a determinism check records nothing; check the seeds "
                       f"not done with: {again}" if summary.interrupted else
                       f"check them again with: {again}")
        else:
            _echo(f"{'interrupted: ' if summary.interrupted else ''}the seeds finished "
                       f"so far are recorded; continue with: {again}")
    if summary.stopped_early:
        _echo(f"stopped after {run.max_failures:,} failing seed"
                   f"{'s' * (run.max_failures != 1)} (--max-failures {run.max_failures}); "
                   f"the seeds after the last were not run; continue with: {again}")
    if run.stop is not None and run.status(summary) == "time-up":
        _echo(f"time up (--for {duration_text(run.duration or 0)}): {summary.runs:,} of "
              f"{run.stop - run.start:,} seeds run; continue with: {again}")
    if run.check_determinism:
        _echo(f"determinism: {summary.runs - len(summary.nondeterministic):,} of "
                   f"{summary.runs:,} seeds replayed identically")


def all_skipped(summary: BulkSummary) -> bool:
    """Whether every seed run skipped (``pytest.skip()`` or ``pytest.xfail()`` in a
    ``@dst.test`` body) and none failed: the run tested nothing (``dst run`` exits 5)."""
    return not summary.failed and summary.runs > 0 and \
        sum(summary.skipped.values()) == summary.runs


def skips_and_xfails(summary: BulkSummary) -> tuple[dict[str, int], dict[str, int]]:
    """The seeds' reasons, by count: those of ``pytest.skip()``, and those of
    ``pytest.xfail()`` (without ``xfail:``; ``no reason given`` for none), each sorted."""
    skips: dict[str, int] = {}
    xfails: dict[str, int] = {}
    if summary.skipped:
        from ..small import xfail_reason

        for reason, n in sorted(summary.skipped.items()):
            why = xfail_reason(reason)
            if why is None:
                skips[reason] = n
            else:
                why = why or "no reason given"
                xfails[why] = xfails.get(why, 0) + n
    return skips, dict(sorted(xfails.items()))


def skipped_counts(summary: BulkSummary) -> str:
    """``5 skipped``, ``5 xfailed`` or ``3 skipped, 2 xfailed``: for the summary line."""
    skips, xfails = skips_and_xfails(summary)
    told = [f"{sum(d.values()):,} {word}" for d, word in
            ((skips, "skipped"), (xfails, "xfailed")) if d]
    return ", ".join(told)


def skipped_text(summary: BulkSummary) -> str:
    """The seeds whose ``@dst.test`` body called ``pytest.skip()`` or ``pytest.xfail()``:
    how many of each, why, which."""
    skips, xfails = skips_and_xfails(summary)
    shown = sum(summary.skipped.values())
    seeds = " (" + ", ".join(map(str, summary.skipped_seeds)) + (", ..." if shown > 3 else "") + ")"
    both = bool(skips and xfails)  # the first seeds are of either kind: told once, after both
    told = []
    for reasons, word, call in ((skips, "skipped", "skip"), (xfails, "xfailed", "xfail")):
        if reasons:
            n = sum(reasons.values())
            why = "; ".join(reason + (f" x{k:,}" if len(reasons) > 1 else "")
                            for reason, k in reasons.items())
            told.append(f"{n:,} seed{'s' * (n != 1)} {word} by pytest.{call}() in the test "
                        f"body{'' if both else seeds}: {why}")
    if both:
        told.append(f"first seeds{seeds}")
    word = "a skipped or xfailed" if both else "an xfailed" if xfails else "a skipped"
    return "; ".join(told) + f"; {word} seed tested nothing and is not counted as passed"


def nothing_tested(scenario: str, summary: BulkSummary) -> str:
    """The error line of a run whose every seed skipped or xfailed: nothing was tested."""
    skips, xfails = skips_and_xfails(summary)
    said = [f"{word} (pytest.{call}(): {'; '.join(reasons)})" for reasons, word, call in
            ((skips, "skipped", "skip"), (xfails, "xfailed", "xfail")) if reasons]
    drop = " or ".join(call for reasons, call in ((skips, "skip"), (xfails, "xfail")) if reasons)
    return (f"error: {scenario}: every seed {' or '.join(said)}, so nothing was tested; run it "
            f"where it applies, or drop the {drop}")


def _declared_probes(scen: Scenario, summary: BulkSummary) -> None:
    """The scenario's probes declared up front (``scenario.sometimes``) count as declared,
    whether or not a run ever called them."""
    summary.probes_declared.update(scen.probes)


def _print_coverage(scen: Scenario, summary: BulkSummary) -> None:
    """What the runs reached: probes never reached, distinct states (``dst.coverage``)."""
    _declared_probes(scen, summary)
    declared = summary.probes_declared
    if declared:
        never = summary.probes_never_reached
        reached = len(declared) - len(never)
        _echo(f"probes: {reached} of {len(declared)} reached"
                   + (f"; never reached: {', '.join(visible(n) for n in never)}" if never
                      else ""))
    if scen.fingerprint_of is not None:
        _echo(f"states: {len(summary.states):,} distinct fingerprints "
                   "(taken at every step)")


def json_document(run: Invocation, scen: Scenario, config: dict[str, Any],
                  summary: BulkSummary, groups: list[Report], seconds: float,
                  resumed: int) -> str:
    """``dst run --json``: the run, its groups, and the failures whose traces are kept."""
    _declared_probes(scen, summary)
    again = run.command_line()
    kept = sorted((seed, steps, path, i, g) for i, g in enumerate(groups, 1)
                  for steps, seed, path in g.kept)
    shrunk_by_seed = {g.shrunk.seed: g.shrunk for g in groups if g.shrunk}
    skips, xfails = skips_and_xfails(summary)
    doc = {
        "scenario": scen.name, "config": config, "strategy": run.strategy,
        "seeds": [run.start, run.stop],
        "shard": list(run.shard) if run.shard else None,
        "runs": summary.runs,
        "reused": summary.reused,
        "seconds": round(seconds, 3),
        "failed": summary.failed,
        "groups": [_group_json(run, g, i) for i, g in enumerate(groups, 1)],
        "failures": [{"seed": seed, "violated": list(g.violated), "steps": steps,
                      "group": i, "trace": str(path), "replay": run.replay(path),
                      "shrunk": _shrunk_json(run, shrunk_by_seed.get(seed))}
                     for seed, steps, path, i, g in kept],
        "by_invariant": dict(sorted(summary.by_invariant.items())),
        "max_groups": run.max_groups,
        "not_kept": {"failed": summary.groups.not_kept_failed,
                     "by_invariant": dict(sorted(summary.groups.not_kept.items()))},
        "resumed": resumed, "interrupted": summary.interrupted,
        "stopped_early": summary.stopped_early,
        "bounded": summary.bounded,
        "skipped": sum(skips.values()), "skip_reasons": skips,
        "xfailed": sum(xfails.values()), "xfail_reasons": xfails,
        "nondeterministic": [{"seed": o.seed, "difference": o.nondeterminism}
                             for o in summary.nondeterministic],
        "not_run": [list(r) for r in summary.not_run],
        "stalled": summary.stalled,
        "resume": again if summary.interrupted or summary.not_run or summary.stopped_early
        or (run.stop is not None and run.status(summary) == "time-up") else None,
        "coverage": {"probes": sorted(summary.probes_declared),
                     "never_reached": summary.probes_never_reached,
                     "states": len(summary.states)
                     if scen.fingerprint_of is not None else None},
    }
    return json.dumps(doc, indent=2)


def _shrunk_json(run: Invocation, shrunk: Shrunk | None) -> dict[str, Any] | None:
    if shrunk is None:
        return None
    return {"trace": str(shrunk.path), "steps": shrunk.steps, "from_steps": shrunk.from_steps,
            "replay": run.replay(shrunk.path)}


def _group_json(run: Invocation, g: Report, number: int) -> dict[str, Any]:
    steps, seed = g.shortest
    lead = g.lead
    return {"group": number, "violated": list(g.violated), "message": lead.message,
            "action": lead.action, "count": g.count, "first_seed": g.first_seed,
            "shortest_seed": seed, "shortest_steps": steps,
            "traces": [str(p) for _, _, p in g.kept],
            "shrunk": _shrunk_json(run, g.shrunk),
            "signatures": [m.signature for m in g.members],
            "rerun": rerun_line(run, seed)}
