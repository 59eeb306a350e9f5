"""``dst run SCENARIO``: many seeds on worker processes, failures grouped, a summary.

The command line of ``dst.runner``: it parses the options, records the run in
the results database as it goes (``dst.runner.recorder``), draws the progress
display (``dst.runner.progress``), shrinks each failure group's shortest trace
(``dst.commands.shrink``), and tells the groups (``dst.commands.run_summary``),
in JSON, Markdown (``--summary-md``) and JUnit XML (``--junit``) too.

Importing this module (``dst run --help``) loads no kernel, trio or structlog:
what runs seeds is imported when the command runs.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import click

from ..errors import DstError, UsageError
from ..explore.pct import DEFAULT_DEPTH
from ..runner.groups import MAX_GROUPS
from ..runner.progress import Progress, interactive
from ..runner.results import DB_NAME
from ..runner.workers import SEED_TIMEOUT
from .arguments import Seed, out_dir

if TYPE_CHECKING:
    from ..runner.recorder import Recorder


class SwitchParam(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """``-c key=value``: split here, typed against the scenario's switches later."""

    name = "key=value"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, str]:
        if isinstance(value, tuple):
            return value
        key, sep, text = str(value).partition("=")
        if not sep or not key.strip():
            self.fail(f"{value!r} is not key=value (e.g. -c cas=false)", param, ctx)
        return key.strip(), text.strip()


class SeedRange(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    name = "A:B"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(value))
        if not m or int(m.group(1)) >= int(m.group(2)):
            self.fail(f"{value!r} is not a seed range A:B with A < B (e.g. 0:1000)", param, ctx)
        return int(m.group(1)), int(m.group(2))


class ClusterAddress(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """``--cluster tcp://HOST:PORT``: the form, and that Dask distributed is installed."""

    name = "tcp://HOST:PORT"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        from ..runner.cluster import parse_address

        try:
            return parse_address(str(value))
        except UsageError as err:
            self.fail(str(err), param, ctx)


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    name = "DURATION"
    _UNITS: ClassVar[dict[str, int]] = {"s": 1, "m": 60, "h": 3600, "d": 86400}

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, float):
            return value
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if not m or float(m.group(1)) <= 0:
            self.fail(f"{value!r} is not a duration like 90s, 15m, 8h", param, ctx)
        return float(m.group(1)) * self._UNITS[m.group(2) or "s"]


class Shard(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """``K/N``: the K-th (from 1) of N shards of the seeds asked for."""

    name = "K/N"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            self.fail(f"{value!r} is not a shard K/N with 1 <= K <= N (e.g. --shard 1/4)",
                      param, ctx)
        return int(m.group(1)), int(m.group(2))


class KeepTraces(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """``all`` or a count: failing traces kept per failure group."""

    name = "all|N"

    def convert(self, value: Any, param: Any, ctx: Any) -> int | None:
        if value is None or isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text == "all":
            return None
        if not text.isdigit():
            self.fail(f"{value!r} is neither all nor a count of traces (e.g. --keep-traces 3)",
                      param, ctx)
        return int(text)


class GroupCount(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """``--max-groups N``: a count of failure groups, at least 1."""

    name = "N"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
        text = str(value).strip()
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            self.fail(f"{value!r} is not a count of failure groups of at least 1 (e.g. "
                      f"--max-groups {MAX_GROUPS})", param, ctx)
        return int(text)


def default_workers() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def shard_of(start: int, stop: int, k: int, n: int) -> tuple[int, int]:
    """Shard ``k`` of ``n`` of ``[start, stop)``: the k-th contiguous slice, sizes within one.

    Contiguous, not every n-th seed: chunks of a run are contiguous seeds (one
    ``trio.run`` and one results-database row each), so seeds ``s % n == k-1``
    would make chunks of one seed; and the done ranges of the shards' databases
    then simply add up to the whole range.
    """
    size = stop - start
    return start + (k - 1) * size // n, start + k * size // n


def _seed_bounds(seeds: int | None, one_seed: int | None, seed_range: tuple[int, int] | None,
                 duration: float | None) -> tuple[int, int | None]:
    """``[start, stop)`` of the seeds asked for; ``stop`` None: until --for runs out."""
    if sum(x is not None for x in (seeds, one_seed, seed_range)) > 1:
        raise UsageError("give one of --seeds, --seed, --seed-range")
    if one_seed is not None:
        return one_seed, one_seed + 1
    if seed_range is not None:
        return seed_range
    if seeds is not None:
        return 0, seeds
    return (0, None) if duration is not None else (0, 1000)


def check_report(option: str, target: str | None) -> None:
    """A report file (``--summary-md``, ``--junit``) must be writable before any seed runs."""
    if target is None:
        return
    path, parent = Path(target), Path(target).parent
    problem = None
    if not parent.is_dir():
        problem = f"directory {parent} does not exist; create it first"
    elif path.is_dir():
        problem = "it is a directory; name a file"
    elif not os.access(path if path.exists() else parent, os.W_OK):
        problem = "permission denied; choose a path you can write"
    if problem is not None:
        raise UsageError(f"cannot write {option} {target}: {problem}")


def _nothing_to_resume(recorder: Recorder, name: str, config: dict[str, Any]) -> str:
    """The line ``--resume`` prints when no seed of this run key is recorded: no run of
    the scenario, or what the nearest recorded one differs in."""
    shown = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                     for k, v in config.items())
    what = f"{name} [{shown}]" if shown else name
    where = recorder.out_dir / DB_NAME
    differs = recorder.db.nearest_key(recorder.key)
    if differs is None:
        return f"--resume: no earlier run of {what} in {where}; running every seed"
    return (f"--resume: no earlier run of {what} with these settings in {where} (the "
            f"nearest recorded one has {', '.join(differs) or 'none done'}); running "
            "every seed")


@click.command("run")
@click.argument("scenario")
@click.option("-c", "switches", type=SwitchParam(), multiple=True, metavar="KEY=VALUE",
              help="Set a scenario switch (repeatable); `dst list` shows them.")
@click.option("--seeds", type=click.IntRange(min=1), default=None,
              help="Run seeds 0..N-1 (default 1000).")
@click.option("--seed", "one_seed", type=Seed("--seed-range A:B or --seeds N"), default=None,
              help="Run just this seed.")
@click.option("--seed-range", type=SeedRange(), default=None, help="Run seeds A..B-1.")
@click.option("--shard", type=Shard(), default=None,
              help="Run only the K-th of N contiguous slices of the seeds asked for "
                   "(e.g. --shard 3/8 on the third of eight machines); the slices are "
                   "disjoint and cover the seeds.")
@click.option("--strategy", default="random", show_default=True, metavar="NAME",
              help="How choices are made: random (a seeded random walk), pct (priority "
                   "scheduling with d-1 random change points, for ordering bugs), swarm "
                   "(each seed draws its own mix of the scenario's faults).")
@click.option("--pct-depth", type=click.IntRange(min=1), default=None, metavar="D",
              help="With --strategy pct: the bug depth, d-1 change points "
                   f"(default {DEFAULT_DEPTH}).")
@click.option("--pct-steps", type=click.IntRange(min=1), default=None, metavar="K",
              help="With --strategy pct: steps over which change points are drawn "
                   "(default: estimated from a few runs of the scenario).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help=f"Worker processes (default: the cores this process may use, "
                   f"{default_workers()} here); one seed is never split.")
@click.option("--cluster", type=ClusterAddress(), default=None, metavar="tcp://HOST:PORT",
              help="Run the seeds on the workers of this Dask scheduler instead of local "
                   "worker processes (pip install 'dst[cluster]'; start the workers as "
                   "docs/cluster.md says).")
@click.option("--for", "duration", type=Duration(), default=None,
              help="Stop after this long (e.g. 8h) and summarise; without --seeds or "
                   "--seed-range, keep running new seeds until then.")
@click.option("-x", "--max-failures", "max_failures", type=click.IntRange(min=1),
              default=None, is_flag=False, flag_value=1, metavar="N",
              help="Stop after N failing seeds (-x alone: the first) and summarise.")
@click.option("--keep-traces", "keep", type=KeepTraces(), default="1", show_default=True,
              help="Failing traces kept per failure group: the N shortest, or all.")
@click.option("--max-groups", "max_groups", type=GroupCount(), default=MAX_GROUPS,
              show_default=True,
              help="Failure groups kept: the first N found, in seed order; the failing "
                   "seeds of any other group are only counted, per invariant.")
@click.option("--seed-timeout", type=Duration(), default=None,
              help=f"Stop a worker whose seed has not finished after this long and report "
                   f"the seed (default {SEED_TIMEOUT:g}s).")
@click.option("--resume", is_flag=True,
              help=f"Skip seeds already done for this scenario file, its code, config and "
                   f"strategy (recorded in OUT/{DB_NAME}); report the combined results.")
@click.option("--out", default="traces/failures", show_default=True,
              help="Directory for the kept traces and the results database.")
@click.option("--check-determinism", is_flag=True,
              help="Run each seed twice in a row in one process and once more in each of "
                   "two processes under other hash seeds, and report the first record that "
                   "differs.")
@click.option("--every-seed", is_flag=True,
              help="Run every seed, even one whose decisions an earlier seed already took "
                   "(by default that run, once a second seed confirmed it, stands for it).")
@click.option("--shrink/--no-shrink", "shrink", default=None,
              help="Shrink the shortest trace of each failure group to its shortest story "
                   "(OUT/<trace>.min.jsonl, when one is shorter) and tell that one; on by "
                   "default, off by default with --json.")
@click.option("--summary-md", "summary_md", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Also write a Markdown summary to paste into an issue.")
@click.option("--junit", "junit_xml", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Also write JUnit XML: a test case for the scenario "
                                   "and config, a failure per group.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def command(scenario: str, switches: tuple[tuple[str, str], ...], seeds: int | None,
            one_seed: int | None, seed_range: tuple[int, int] | None,
            shard: tuple[int, int] | None, strategy: str, pct_depth: int | None,
            pct_steps: int | None, workers: int | None, cluster: str | None,
            duration: float | None,
            max_failures: int | None, keep: int | None, max_groups: int,
            seed_timeout: float | None,
            resume: bool, out: str, check_determinism: bool, every_seed: bool,
            shrink: bool | None, summary_md: str | None, junit_xml: str | None,
            as_json: bool) -> None:
    """Run SCENARIO over many seeds and report every invariant violated.

    SCENARIO is a name from `dst list`, a path to a .py file, or a module.
    Failures are grouped by what broke (the invariant, its message, the action
    that broke it); each group tells its count, first seed and shortest seed,
    and keeps the trace of its shortest seed (--keep-traces) with the one
    command that replays it, as OUT/<scenario>-<seed>.jsonl (a non-default
    config or strategy is named before the seed: counter-cas=false-5.jsonl; a
    @dst.test is MODULE.NAME); the first --max-groups groups are kept, and the
    failing seeds of any other are counted per invariant.  The shortest trace
    of each group is shrunk to its shortest story, written beside it as
    OUT/<trace>.min.jsonl when that is shorter (--no-shrink skips it).  Finished seeds are recorded
    in OUT/results.sqlite, so an interrupted run continues with --resume (a
    run of another file, edited code or other settings starts afresh); `dst
    runs` lists past runs.

    \b
      dst run counter -c cas=false --seeds 2000
      dst run approval --for 8h -x --summary-md bug.md
      dst run counter --seeds 1000000 --shard 2/4 --junit shard-2.xml

    A seed whose decisions an earlier seed took (and a second confirmed) is
    answered with that run, as the summary says; --every-seed runs each.

    Exit status: 0 nothing violated, 1 an invariant violated, 2 bad input,
    3 a seed did not repeat itself (--check-determinism, or two seeds of one
    schedule told it differently), 4 the scenario itself is broken, 5 every
    seed skipped (a @dst.test body's pytest.skip()), 130 interrupted.
    """
    from ..cli import _die  # the core, loaded first
    from ..explore import strategies
    from ..launcher import started
    from ..registry import is_shipped, load
    from ..runner.bulk import BulkSummary, SeedOutcome, run_bulk
    from ..runner.groups import GroupBook, reports
    from ..runner.names import identity, qualified_name, trace_stem
    from ..runner.recorder import Recorder
    from ..runner.results import missing, run_key
    from ..runner.workers import CtrlC
    from ..trace.escape import encodable
    from .run_summary import (
        Invocation,
        all_skipped,
        json_document,
        nothing_tested,
        print_summary,
        rerun_line,
        shrink_groups,
        skipped_text,
    )

    try:
        scen = load(scenario)
        config = scen.config(dict(switches))
        strategy = strategies.parse(strategy, depth=pct_depth, steps=pct_steps)
        start, stop = _seed_bounds(seeds, one_seed, seed_range, duration)
        if shard is not None:
            if stop is None:
                raise UsageError("--shard needs a finite range of seeds to split; give "
                                 "--seeds N or --seed-range A:B (with --for too)")
            whole = (start, stop)
            start, stop = shard_of(start, stop, *shard)
            if stop <= start:
                raise UsageError(f"--shard {shard[0]}/{shard[1]} of the {whole[1] - whole[0]:,} "
                                 f"seeds {whole[0]}..{whole[1] - 1} holds none: split them "
                                 "into fewer shards, or run more seeds")
        if cluster is not None and workers is not None:
            raise UsageError("--workers counts local processes; with --cluster the "
                             "scheduler's workers run the seeds: drop --workers")
        if cluster is not None and check_determinism:
            raise UsageError("--check-determinism runs seeds under other hash seeds in "
                             "local processes: drop --cluster")
        out_dir(out)  # in one line now, never after the seeds ran
        check_report("--summary-md", summary_md)
        check_report("--junit", junit_xml)
    except DstError as err:
        _die(err)
    ref = None if is_shipped(scenario) else scenario  # how workers and replay find it
    from ..trace.model import scenario_file

    shown_file = scenario_file(ref)  # in every trace header: the file, relative to here
    try:  # pct with nothing to order runs as random: said in one line, never silently
        pct_fallback = strategies.fallback(strategy, scen, config)
    except Exception:  # the scenario's own failure: the workers report it
        pct_fallback = None
    run = Invocation(scenario, switches, seeds, one_seed, seed_range, shard, strategy,
                     workers, duration, max_failures, keep, seed_timeout, out,
                     check_determinism, start, stop, ref, cluster, max_groups, every_seed,
                     shrink)
    # From here until the workers are gone, Ctrl-C is counted, not raised: pressed
    # before the run is recorded, while workers start or before the first results,
    # it stops the run like a press mid-run (summary, --resume, exit 130).  A second
    # press outside the loop that watches the workers stops at once.
    with CtrlC(escalate=True) as ctrl_c:
        try:
            key = run_key(scen.name, config, strategy, **identity(ref, scen, config, out))
            stem = trace_stem(scen, config, name=qualified_name(ref, scen), strategy=strategy)
            recorder = Recorder(out, scen.name, key, record=not check_determinism, stem=stem)
            # Closed when the command ends, however it ends (an error, exit, an exception):
            # never left to the collector (Python 3.13 warns: ResourceWarning).
            click.get_current_context().call_on_close(recorder.close)
            # The recorder writes the traces it keeps as chunks come back.
            summary = BulkSummary(keep_traces=False, groups=GroupBook(keep, max_groups))
            done = recorder.resume(summary, start, stop) if resume else []
            if resume and not done:
                click.echo(encodable(_nothing_to_resume(recorder, scen.name, config)),
                           err=True)
            recorder.start(config, strategy, run.seeds_text(), run.shard_text(),
                           run.command_line(), summary.runs)
        except (sqlite3.Error, OSError) as exc:
            _die(UsageError(f"cannot use the results database {Path(out) / DB_NAME} ({exc}); "
                            "move it away or give another --out"))
        resumed = summary.runs
        began = time.monotonic()
        deadline = began + duration if duration is not None else None
        progress = Progress(stop - start if stop is not None else None, resumed, deadline,
                            enabled=not as_json and interactive())

        def on_chunk(s: BulkSummary, outcomes: list[SeedOutcome]) -> None:
            recorder.chunk_done(s, outcomes)
            progress.update(s)

        try:
            timeout = seed_timeout if seed_timeout is not None else SEED_TIMEOUT
            if cluster is not None:
                from ..runner.cluster import run_on_cluster

                run_on_cluster(cluster, ref or scen.name, config, missing(done, start, stop),
                               deadline=deadline, on_chunk=on_chunk, summary=summary,
                               seed_timeout=timeout, strategy=strategy,
                               keep=summary.keep_policy, max_failures=max_failures,
                               scenario_file=shown_file)
            else:
                started()  # before the workers fork
                run_bulk(ref or scen.name, config, missing(done, start, stop),
                         workers=workers or default_workers(), deadline=deadline,
                         check_determinism=check_determinism, on_chunk=on_chunk,
                         summary=summary, seed_timeout=timeout, strategy=strategy,
                         keep=summary.keep_policy, max_failures=max_failures,
                         scenario_file=shown_file, reuse=not every_seed)
        except DstError as err:
            progress.close()
            recorder.finish(summary, "error", len(summary.groups))
            recorder.close()
            _die(err)
        except (sqlite3.Error, OSError) as exc:
            progress.close()
            recorder.close()
            _die(UsageError(f"cannot record results in {out} ({exc}); free the disk or give "
                            "another --out, then continue with --resume"))
        finally:
            progress.close()
    summary.interrupted = summary.interrupted or bool(ctrl_c.count)
    seconds = time.monotonic() - began
    if (not as_json if shrink is None else shrink) and not (
            check_determinism or summary.interrupted or summary.stalled):
        shrink_groups(ref or scen.name, summary.groups, recorder)
    groups = reports(summary.groups)
    status = run.status(summary)
    recorder.finish(summary, status, len(groups))
    recorder.close()
    if pct_fallback is not None:
        click.echo(encodable(pct_fallback), err=True)
    if as_json:
        document = json_document(run, scen, config, summary, groups, seconds, resumed)
        if strategy.startswith("pct"):
            document = json.dumps({**json.loads(document), "pct_fallback": pct_fallback},
                                  indent=2)
        click.echo(document)
    else:
        print_summary(run, scen, config, summary, groups, recorder.paths, seconds, resumed)
    if summary_md or junit_xml:
        from ..runner.reports import RunFacts, junit, markdown, write_report

        facts = RunFacts(scen.name, config, strategy, run.seeds_text(), run.shard_text(),
                         summary.runs, resumed, summary.failed, seconds, status, groups,
                         replay=run.replay, rerun=lambda seed: rerun_line(run, seed),
                         stalled=summary.stalled, by_invariant=dict(summary.by_invariant),
                         not_kept=dict(summary.groups.not_kept),
                         not_kept_failed=summary.groups.not_kept_failed,
                         max_groups=max_groups,
                         skipped=skipped_text(summary) if summary.skipped else None,
                         skipped_all=all_skipped(summary),
                         nondeterministic=[(o.seed, o.nondeterminism or "")
                                           for o in summary.nondeterministic])
        try:
            if summary_md:
                write_report(summary_md, markdown(facts))
            if junit_xml:
                write_report(junit_xml, junit(facts), xml=True)
        except OSError as exc:
            _die(UsageError(f"cannot write a report ({exc.strerror or exc}); the run itself "
                            "is recorded: rerun with --resume and another path"))
    if summary.stalled:
        alone = "" if summary.stalled_seed is None else (
            f"; run it alone with: {rerun_line(run, summary.stalled_seed)}")
        click.echo(encodable(f"error: {scenario}: {summary.stalled}{alone}"), err=True)
        sys.exit(4)
    if summary.interrupted:
        sys.exit(130)
    if summary.nondeterministic:
        sys.exit(3)
    if all_skipped(summary):
        click.echo(encodable(nothing_tested(scenario, summary)), err=True)
        sys.exit(5)
    sys.exit(1 if summary.failed else 0)
