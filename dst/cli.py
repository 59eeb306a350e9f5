"""The ``dst`` command line.

Exit status: 0 nothing violated; 1 an invariant was violated (for ``replay``:
the recorded violation reproduced exactly); 2 bad input or usage; 3 a replay
diverged (or ``run --check-determinism`` found a seed that did not repeat
itself); 4 the scenario itself is broken (its file does not import, its setup or
a check raised, or a seed hung its worker); 130 interrupted by Ctrl-C.
``--json`` prints one JSON document on stdout for machines; humans get a
progress line on a terminal and a short summary.

Every simulation runs under one hash seed (``HASH_SEED``), whatever the
caller's ``PYTHONHASHSEED``: iterating a set of strings follows their hashes, so
a seed names one trace only under one hash seed.  The command re-executes itself
under it before doing anything else (``dst replay`` under the seed its trace
records), and its worker processes inherit it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import click

from . import __version__
from .commands.shrink import Shrunk, shrink_failures
from .errors import DstError, ScenarioError, UsageError
from .explore import strategies
from .registry import all_scenarios, is_shipped, load
from .runner.bulk import SEED_TIMEOUT, BulkSummary, SeedOutcome, run_bulk
from .runner.results import DB_NAME, Recorder, missing, run_key
from .runner.single import replay_trace
from .scenario import Scenario
from .trace.codec import read_trace
from .trace.escape import visible
from .trace.model import Trace, current_hash_seed
from .trace.render import format_time, render_markdown, render_text, story

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_DIVERGED = 0, 1, 2, 3
EXIT_BROKEN = ScenarioError.exit_code  # 4: the scenario itself is broken
EXIT_INTERRUPTED = 130

#: The hash seed every simulation of the ``dst`` command runs under.
HASH_SEED = 0
#: Set in the environment of a re-executed ``dst`` (to the program name the user
#: typed): it never re-executes a second time, and ``--help`` names the same program.
_REEXEC = "DST_REEXECUTED_AS"

#: Failing seeds whose full story `dst run` prints; the rest are listed by seed.
STORIES_SHOWN = 1


def _die(err: DstError) -> NoReturn:
    click.echo(f"error: {_one_line(str(err))}", err=True)
    sys.exit(err.exit_code)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Dst(click.Group):
    """click's group, but every usage error is one line: ``error: ...``, exit 2.

    click prints a usage banner and ``Error: ...`` over several lines; dst's
    contract is one line on stderr that names the culprit and the way out, the
    same for an unknown ``-c`` switch as for an ill-formed one.
    """

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if args is None:
            # Started as a program (not called with arguments from Python): pin
            # the hash seed before anything else runs.
            args = sys.argv[1:]
            typed = os.environ.get(_REEXEC) or _program_name()
            _pin_hash_seed(list(args), _wanted_hash_seed(self, list(args)), typed)
            prog_name = prog_name or typed
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            click.echo(f"error: {_one_line(exc.format_message())}{where}", err=True)
            sys.exit(EXIT_USAGE)
        except click.ClickException as exc:
            click.echo(f"error: {_one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)


def _program_name() -> str:
    """What the user typed to start dst: ``dst`` or ``python -m dst``."""
    first = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "dst"
    return "python -m dst" if first == "__main__.py" else first


def _wanted_hash_seed(group: click.Group, argv: list[str]) -> int:
    """``HASH_SEED``, but for ``dst replay TRACE`` the hash seed TRACE was recorded under.

    The arguments are parsed leniently here (a bad command line is reported by
    the real parse, after the re-execution): any doubt means ``HASH_SEED``.
    """
    words = [a for a in argv if not a.startswith("-")]
    command = group.commands.get("replay")
    if not words or words[0] != "replay" or command is None:
        return HASH_SEED
    try:
        ctx = command.make_context("replay", argv[argv.index("replay") + 1:],
                                   resilient_parsing=True)
        first = next(p.name for p in command.params if isinstance(p, click.Argument))
        path = ctx.params.get(first or "")
        if not isinstance(path, str):
            return HASH_SEED
        with open(path, "rb") as fh:
            header = json.loads(fh.readline(1 << 20))
        seed = header.get("hash_seed") if isinstance(header, dict) else None
    except Exception:
        return HASH_SEED
    if isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32:
        return seed
    return HASH_SEED


def _pin_hash_seed(argv: list[str], wanted: int, typed: str) -> None:
    """Re-execute this command under ``PYTHONHASHSEED=wanted`` unless it already runs so.

    ``os.execv`` keeps the process id, the open standard streams, the working
    directory and so the exit status the caller sees.  A re-executed dst that
    still does not run under ``wanted`` (python told to ignore the environment)
    stops with one line instead of re-executing again.
    """
    if current_hash_seed() == wanted:
        os.environ.pop(_REEXEC, None)
        return
    rerun = " ".join(shlex.quote(a) for a in ["dst", *argv])
    if _REEXEC in os.environ:
        _die(UsageError(f"python ignores PYTHONHASHSEED here (started with -E or -I?), so dst "
                        f"cannot run under hash seed {wanted}; run without those flags: "
                        f"PYTHONHASHSEED={wanted} {rerun}"))
    os.environ["PYTHONHASHSEED"] = str(wanted)
    os.environ[_REEXEC] = typed
    flags: list[str] = getattr(subprocess, "_args_from_interpreter_flags", list)()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, *flags, "-m", "dst", *argv])
    except OSError as exc:
        _die(UsageError(f"cannot restart dst under PYTHONHASHSEED={wanted} ({exc.strerror}); "
                        f"run: PYTHONHASHSEED={wanted} {rerun}"))


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


@click.group(cls=_Dst, context_settings={"help_option_names": ["-h", "--help"]})
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

    \b
    Exit status:
      0    nothing was violated
      1    an invariant was violated
      2    bad input or usage (one line on stderr says what to change)
      3    a replay diverged, or a seed did not repeat itself
      4    the scenario itself is broken: it does not import, its setup or a
           check raised, or a seed hung its worker
      130  interrupted by Ctrl-C (dst run: --resume continues)
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
        "eventually": [{"name": n, "within": w} for n, (_, w) in s.eventual_checks.items()],
        "faults": _faults_text(s),
        "planted_bugs": [
            {"config": dict(b.config), "breaks": list(b.breaks), "doc": b.doc}
            for b in s.planted_bugs
        ],
    }


def _faults_text(s: Scenario) -> str:
    """The default config's fault plan in a few words (``crashes<=1, drops<=1``)."""
    try:
        return s.fault_plan(s.default_config()).describe()
    except Exception:  # a plan that needs more than the defaults: say nothing wrong
        return "set by the config"


@main.command("list")
@click.argument("scenario_ref", metavar="[SCENARIO]", required=False)
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def list_command(scenario_ref: str | None, as_json: bool) -> None:
    """List scenarios, their switches, checks, faults and planted bugs.

    With SCENARIO (a shipped name, a file such as bank.py, or a module), list
    that one: what dst sees in your own scenario file.

    \b
      dst list
      dst list bank.py --json
    """
    try:
        scenarios = [load(scenario_ref)] if scenario_ref else all_scenarios()
    except DstError as err:
        _die(err)
    if as_json:
        click.echo(json.dumps({"scenarios": [_scenario_json(s) for s in scenarios]}, indent=2))
        return
    for s in scenarios:
        click.echo(f"{s.name}: {s.doc}")
        settings = [f"-c {w.name}={_show(w.default)}" for w in s.switches.values()]
        allowed = [_short(w.describe_allowed()) for w in s.switches.values()]
        w1 = max(map(len, settings), default=0)
        w2 = max(map(len, allowed), default=0)
        for setting, allow, w in zip(settings, allowed, s.switches.values(), strict=True):
            click.echo(f"    {setting:<{w1}}  {allow:<{w2}}  {w.doc}".rstrip())
        click.echo(f"    invariants: {', '.join(s.invariants) or 'none'}")
        if s.end_checks:
            click.echo(f"    at end: {', '.join(s.end_checks)}")
        for name, (_, within) in s.eventual_checks.items():
            click.echo(f"    eventually: {name} within {within:g}s after faults stop")
        click.echo(f"    faults: {_faults_text(s)}")
        for b in s.planted_bugs:
            click.echo(f"    planted bug: -c {_config_text(b.config)} breaks {', '.join(b.breaks)}")


def _short(allowed: str) -> str:
    """``1, 2, ..., 20`` for a long run of integers, so `dst list` stays one line a switch."""
    parts = allowed.split(", ")
    if len(parts) > 6 and all(p.lstrip("-").isdigit() for p in parts):
        return f"{parts[0]}..{parts[-1]}"
    return allowed


def _show(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _config_text(config: Any) -> str:
    return " ".join(f"{k}={_show(v)}" for k, v in config.items())


# -- run ------------------------------------------------------------------------


def _interactive() -> bool:
    """A progress line only for a human watching: both streams on a terminal."""
    return sys.stdout.isatty() and sys.stderr.isatty()


class _Progress:
    """A one-line progress display on stderr, redrawn after each chunk."""

    def __init__(self, total: int | None, base: int, enabled: bool) -> None:
        self.total, self.base, self.enabled = total, base, enabled
        self.start = time.monotonic()

    def update(self, summary: BulkSummary, _chunk: list[SeedOutcome]) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.start
        rate = (summary.runs - self.base) / elapsed if elapsed > 0 else 0.0
        done = f"{summary.runs:,}/{self.total:,}" if self.total else f"{summary.runs:,}"
        fails = len(summary.failures)
        line = (f"  {done} seeds  {rate:,.0f} seeds/s  {fails} failure{'s' * (fails != 1)}"
                f"  {format_time(elapsed)[:-4]}")
        click.echo(f"\r{line:<78}", nl=False, err=True)

    def close(self) -> None:
        if self.enabled:
            click.echo("", err=True)


def replay_command_line(path: Path, scenario_ref: str | None) -> str:
    """The one command that replays a failure (``--scenario`` for a user's own file)."""
    line = f"dst replay {shlex.quote(str(path))}"
    return line + (f" --scenario {shlex.quote(scenario_ref)}" if scenario_ref else "")


def _print_failure(o: SeedOutcome, scenario: Scenario, config: dict[str, Any], path: Path,
                   ref: str | None, full: bool, shrunk: Shrunk | None = None) -> None:
    """One failure; the first (``full``) with its story, the shrunk one when there is one."""
    trace = None
    if full:
        try:
            trace = read_trace(shrunk.path if shrunk else path)
        except DstError:
            trace = None  # a resumed failure whose trace has gone: tell it without a story
    vio = next((r for r in trace.records if r["type"] == "violation"), None) if trace else None
    where = (f"seed {o.seed}, step {vio['step']}, virtual {format_time(vio['t'])}"
             if vio else f"seed {o.seed}")
    click.echo(f"FAIL {scenario.name} [{_config_text(config)}]: "
               f"{', '.join(o.violated)} violated ({where})")
    if full and trace is not None:
        lines = story(trace)
        width = max([len(actor) for _, _, actor, _ in lines] + [8])
        time_w = max([len(t) for _, t, _, _ in lines] + [0])  # "1d 00:00:00.000" is wider
        steps = (f"shrunk from {shrunk.from_steps} to {shrunk.steps} steps" if shrunk
                 else f"{o.steps} steps")
        click.echo(f"  story ({len(lines)} lines, {steps}):")
        for i, (_step, t, actor, told) in enumerate(lines, 1):
            click.echo(f"    {i:>3}  {t:>{time_w}}  {actor:<{width}}  {told}")
    if shrunk:
        click.echo(f"  shrunk: {shrunk.path} ({shrunk.steps} steps, from {shrunk.from_steps})")
        click.echo(f"  replay: {replay_command_line(shrunk.path, ref)}")
    click.echo(f"  trace:  {path}")
    click.echo(f"  replay: {replay_command_line(path, ref)}")


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


def _check_out(out: str) -> None:
    """Fail now, in one line, if ``--out`` cannot hold traces: never after the seeds ran."""
    path = Path(out)
    way_out = "give --out a directory dst can create and write to"
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out} is a file, not a directory; {way_out}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            why = "a part of the path is a file"
        raise UsageError(f"--out {out} cannot be created ({why}); {way_out}") from None
    probe = path / f".dst-write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out {out} is not writable ({exc.strerror or exc}); "
                         f"{way_out}") from None


def _duration_text(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _ranges_text(ranges: list[tuple[int, int]]) -> str:
    return ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in sorted(ranges))


@main.command("run")
@click.argument("scenario")
@click.option("-c", "switches", type=SwitchParam(), multiple=True, metavar="KEY=VALUE",
              help="Set a scenario switch (repeatable); `dst list` shows them.")
@click.option("--seeds", type=click.IntRange(min=1), default=None,
              help="Run seeds 0..N-1 (default 1000).")
@click.option("--seed", "one_seed", type=click.IntRange(min=0), default=None,
              help="Run just this seed.")
@click.option("--seed-range", type=SeedRange(), default=None, help="Run seeds A..B-1.")
@click.option("--strategy", default="random", show_default=True, metavar="NAME",
              help="How choices are made: random (a seeded random walk), pct (priority "
                   "scheduling with d-1 random change points, for ordering bugs), swarm "
                   "(each seed draws its own mix of the scenario's faults).")
@click.option("--pct-depth", type=click.IntRange(min=1), default=None, metavar="D",
              help="With --strategy pct: the bug depth, d-1 change points "
                   f"(default {strategies.DEFAULT_DEPTH}).")
@click.option("--pct-steps", type=click.IntRange(min=1), default=None, metavar="K",
              help="With --strategy pct: steps over which change points are drawn "
                   "(default: estimated from a few runs of the scenario).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes (one seed is never split).")
@click.option("--for", "duration", type=Duration(), default=None,
              help="Stop after this long (e.g. 8h) and summarise; without --seeds or "
                   "--seed-range, keep running new seeds until then.")
@click.option("--seed-timeout", type=Duration(), default=None,
              help=f"Stop a worker whose seed has not finished after this long and report "
                   f"the seed (default {SEED_TIMEOUT:g}s).")
@click.option("--resume", is_flag=True,
              help=f"Skip seeds already done for this scenario and config (recorded in "
                   f"OUT/{DB_NAME}); report the combined results.")
@click.option("--out", default="traces/failures", show_default=True,
              help="Directory for the traces of failing seeds and the results database.")
@click.option("--check-determinism", is_flag=True,
              help="Run each seed twice in one process and once more in a process with "
                   "another hash seed, and report the first record that differs.")
@click.option("--shrink/--no-shrink", "shrink", default=None,
              help="Shrink the first failure of each invariant to its shortest story "
                   "(OUT/<scenario>-<seed>.min.jsonl) and tell that one; on by default, "
                   "off by default with --json.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def run_command(scenario: str, switches: tuple[tuple[str, str], ...], seeds: int | None,
                one_seed: int | None, seed_range: tuple[int, int] | None, strategy: str,
                pct_depth: int | None, pct_steps: int | None, workers: int,
                duration: float | None, seed_timeout: float | None, resume: bool, out: str,
                check_determinism: bool, as_json: bool, shrink: bool | None = None) -> None:
    """Run SCENARIO over many seeds and report every invariant violated.

    SCENARIO is a name from `dst list`, a path to a .py file, or a module.
    Traces of failing seeds are written under --out as they are found, each
    with the one command that replays it; finished seeds are recorded in
    OUT/results.sqlite, so an interrupted run continues with --resume.  The
    first failure of each invariant is shrunk to its shortest story, written
    beside it as OUT/<scenario>-<seed>.min.jsonl (--no-shrink skips it).

    Exit status: 0 nothing violated, 1 an invariant violated, 2 bad input,
    3 a seed did not repeat itself (--check-determinism), 4 the scenario
    itself is broken, 130 interrupted.
    """
    try:
        scen = load(scenario)
        config = scen.config(dict(switches))
        strategy = strategies.parse(strategy, depth=pct_depth, steps=pct_steps)
        start, stop = _seed_bounds(seeds, one_seed, seed_range, duration)
        _check_out(out)
    except DstError as err:
        _die(err)
    ref = None if is_shipped(scenario) else scenario  # how workers and replay find it
    try:
        recorder = Recorder(out, scen.name, run_key(scen.name, config, strategy),
                            record=not check_determinism)
        summary = BulkSummary(keep_traces=False)  # the recorder writes them as they come
        done = recorder.resume(summary, start, stop) if resume else []
    except (sqlite3.Error, OSError) as exc:
        _die(UsageError(f"cannot use the results database {Path(out) / DB_NAME} ({exc}); "
                        "move it away or give another --out"))
    resumed = summary.runs
    progress = _Progress(stop - start if stop is not None else None, resumed,
                         enabled=not as_json and _interactive())

    def on_chunk(s: BulkSummary, outcomes: list[SeedOutcome]) -> None:
        recorder.chunk_done(outcomes)
        progress.update(s, outcomes)

    began = time.monotonic()
    deadline = began + duration if duration is not None else None
    try:
        run_bulk(ref or scen.name, config, missing(done, start, stop), workers=workers,
                 deadline=deadline, check_determinism=check_determinism,
                 on_chunk=on_chunk, summary=summary,
                 seed_timeout=seed_timeout if seed_timeout is not None else SEED_TIMEOUT,
                 strategy=strategy)
    except DstError as err:
        progress.close()
        _die(err)
    except (sqlite3.Error, OSError) as exc:
        progress.close()
        _die(UsageError(f"cannot record results in {out} ({exc}); free the disk or give "
                        "another --out, then continue with --resume"))
    finally:
        recorder.close()
        progress.close()
    seconds = time.monotonic() - began
    summary.failures.sort(key=lambda o: o.seed)
    paths = recorder.paths
    shrunk: dict[int, Shrunk] = {}
    if (not as_json if shrink is None else shrink) and not (
            check_determinism or summary.interrupted or summary.stalled):
        # Failures found by this invocation only: a resumed one was shrunk when found.
        new = [o for o in summary.failures if not any(a <= o.seed < b for a, b in done)]
        shrunk = shrink_failures(ref or scen.name, new, paths)
    again = _command_line(scenario, switches, seeds, one_seed, seed_range, workers, duration,
                          seed_timeout, out, check_determinism, strategy=strategy)
    if as_json:
        doc = {
            "scenario": scen.name, "config": config, "strategy": strategy,
            "runs": summary.runs,
            "seconds": round(seconds, 3),
            "failures": [{"seed": o.seed, "violated": list(o.violated),
                          "trace": str(paths[o.seed]),
                          "replay": replay_command_line(paths[o.seed], ref),
                          "shrunk": shrunk[o.seed].as_json(ref) if o.seed in shrunk else None}
                         for o in summary.failures],
            "by_invariant": dict(sorted(summary.by_invariant.items())),
            "resumed": resumed, "interrupted": summary.interrupted,
            "bounded": summary.bounded,
            "nondeterministic": [{"seed": o.seed, "difference": o.nondeterminism}
                                 for o in summary.nondeterministic],
            "not_run": [list(r) for r in summary.not_run],
            "stalled": summary.stalled,
            "resume": again if summary.interrupted or summary.not_run else None,
            "coverage": {"probes": sorted(summary.probes_declared),
                         "never_reached": summary.probes_never_reached,
                         "states": len(summary.states)
                         if scen.fingerprint_of is not None else None},
        }
        click.echo(json.dumps(doc, indent=2))
    else:
        _print_summary(scen, config, summary, paths, ref, out, seconds, resumed,
                       check_determinism, again, strategy, shrunk=shrunk)
    if summary.stalled:
        alone = "" if summary.stalled_seed is None else (
            "; run it alone with: " + " ".join(shlex.quote(a) for a in [
                "dst", "run", scenario, *[w for k, v in switches for w in ("-c", f"{k}={v}")],
                *(["--strategy", strategy] if strategy != "random" else []),
                "--seed", str(summary.stalled_seed)]))
        click.echo(f"error: {scenario}: {summary.stalled}{alone}", err=True)
        sys.exit(EXIT_BROKEN)
    if summary.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if summary.nondeterministic:
        sys.exit(EXIT_DIVERGED)
    sys.exit(EXIT_VIOLATION if summary.failures else EXIT_OK)


def _command_line(scenario: str, switches: tuple[tuple[str, str], ...], seeds: int | None,
                  one_seed: int | None, seed_range: tuple[int, int] | None, workers: int,
                  duration: float | None, seed_timeout: float | None, out: str,
                  check_determinism: bool, *, strategy: str = "random") -> str:
    """The command that continues this run: the same one, with ``--resume``.

    A determinism check records nothing, so it is continued by running it again.
    """
    argv = ["dst", "run", scenario]
    for key, value in switches:
        argv += ["-c", f"{key}={value}"]
    if seeds is not None:
        argv += ["--seeds", str(seeds)]
    if one_seed is not None:
        argv += ["--seed", str(one_seed)]
    if seed_range is not None:
        argv += ["--seed-range", f"{seed_range[0]}:{seed_range[1]}"]
    if strategy != "random":
        argv += ["--strategy", strategy]
    if workers != 1:
        argv += ["--workers", str(workers)]
    if duration is not None:
        argv += ["--for", _duration_text(duration)]
    if seed_timeout is not None:
        argv += ["--seed-timeout", _duration_text(seed_timeout)]
    argv += ["--out", out]
    argv += ["--check-determinism"] if check_determinism else ["--resume"]
    return " ".join(shlex.quote(a) for a in argv)


def _print_summary(scen: Scenario, config: dict[str, Any], summary: BulkSummary,
                   paths: dict[int, Path], ref: str | None, out: str, seconds: float,
                   resumed: int, check_determinism: bool, again: str,
                   strategy: str = "random", shrunk: dict[int, Shrunk] | None = None) -> None:
    shown = STORIES_SHOWN + 4
    for i, o in enumerate(summary.failures[:shown]):
        _print_failure(o, scen, config, paths[o.seed], ref, full=i < STORIES_SHOWN,
                       shrunk=(shrunk or {}).get(o.seed))
    hidden = len(summary.failures) - shown
    if hidden > 0:
        click.echo(f"... and {hidden:,} more failing seeds (traces in {out}/)")
    for o in summary.nondeterministic:
        click.echo(f"NONDETERMINISTIC seed {o.seed}: {o.nondeterminism}")
    new = summary.runs - resumed
    rate = new / seconds if seconds > 0 else 0.0
    by = ", ".join(f"{k} x{v}" for k, v in sorted(summary.by_invariant.items()))
    earlier = f" ({resumed:,} done earlier, resumed)" if resumed else ""
    how = f" under {strategy}" if strategy != "random" else ""
    click.echo(f"{scen.name} [{_config_text(config)}]{how}: {summary.runs:,} runs{earlier}, "
               f"{len(summary.failures):,} failed{' (' + by + ')' if by else ''}, "
               f"{rate:,.0f} runs/s ({seconds:.1f}s)")
    _print_coverage(scen, summary)
    if summary.bounded:
        first = next((paths[s] for s in summary.bounded_seeds if s in paths), None)
        click.echo(f"{summary.bounded:,} runs hit the step bound ({scen.max_steps:,} steps) "
                   "before the system came to rest, so their end-of-run checks did not run"
                   + (f"; see one with: dst show {first}" if first else ""))
    if summary.not_run:
        click.echo(f"not run: seeds {_ranges_text(summary.not_run)} were in flight on a worker "
                   "that had to be stopped; they are not recorded as done")
    if summary.interrupted or summary.not_run:
        if check_determinism:
            click.echo("interrupted: a determinism check records nothing; check the seeds "
                       f"not done with: {again}" if summary.interrupted else
                       f"check them again with: {again}")
        else:
            click.echo(f"{'interrupted: ' if summary.interrupted else ''}the seeds finished "
                       f"so far are recorded; continue with: {again}")
    if check_determinism:
        click.echo(f"determinism: {summary.runs - len(summary.nondeterministic):,} of "
                   f"{summary.runs:,} seeds replayed identically")


def _print_coverage(scen: Scenario, summary: BulkSummary) -> None:
    """What the runs reached: probes never reached, distinct states (``dst.coverage``)."""
    declared = summary.probes_declared
    if declared:
        never = summary.probes_never_reached
        reached = len(declared) - len(never)
        click.echo(f"probes: {reached} of {len(declared)} reached"
                   + (f"; never reached: {', '.join(visible(n) for n in never)}" if never
                      else ""))
    if scen.fingerprint_of is not None:
        click.echo(f"states: {len(summary.states):,} distinct fingerprints "
                   "(taken at every step)")


# -- replay / show --------------------------------------------------------------


def _load_trace(path: str, scenario_ref: str | None) -> tuple[Trace, Scenario]:
    trace = read_trace(path)
    name = trace.header["scenario"]
    if scenario_ref is None:
        if not is_shipped(name):
            raise UsageError(
                f"{path} is a trace of scenario {name!r}, which is not a shipped one; "
                "say where it lives with --scenario path/to/file.py (or package.module)")
        _check_hash_seed(trace, path, scenario_ref)
        return trace, load(name)
    _check_hash_seed(trace, path, scenario_ref)
    scen = load(scenario_ref)
    if scen.name != name:
        raise UsageError(f"{scenario_ref} defines scenario {scen.name!r}, "
                         f"but {path} is a trace of {name!r}")
    return trace, scen


def _check_hash_seed(trace: Trace, path: str, scenario_ref: str | None) -> None:
    """Refuse a replay under another hash seed than the trace's: set order could differ.

    The ``dst`` command re-executes itself under the recorded seed; this holds
    when it is called from Python, in a process whose hash seed is already set.
    A trace from before hash seeds were recorded replays under any.
    """
    recorded = trace.header.get("hash_seed")
    here = current_hash_seed()
    if not isinstance(recorded, int) or here == recorded:
        return
    again = replay_command_line(Path(path), scenario_ref)
    raise UsageError(
        f"{path} was recorded under hash seed {recorded}, and this process runs under "
        f"{'a random one' if here is None else here}, which can change the order of sets; "
        f"rerun as: PYTHONHASHSEED={recorded} {again}")


@main.command("replay")
@click.argument("trace_path", metavar="TRACE")
@click.option("--scenario", "scenario_ref", default=None, metavar="REF",
              help="Where the trace's scenario lives when it is not a shipped one: "
                   "a .py file or a module (what `dst run` was given).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def replay_command(trace_path: str, scenario_ref: str | None, as_json: bool) -> None:
    """Re-run TRACE, forcing its choices, and compare every record.

    Exit 0 or 1 when the replay is identical (by the recorded verdict), 3 when
    it diverged: then the first differing step is shown, with its likely cause.
    """
    try:
        trace, scen = _load_trace(trace_path, scenario_ref)
        result = replay_trace(scen, trace)
    except DstError as err:
        _die(err)
    # The first record that differs (replay_trace compares them all), made visible:
    # it quotes the trace and the code under test.
    diverged = result.divergence
    verdict = trace.footer.get("verdict")
    if as_json:
        click.echo(json.dumps({"trace": trace_path, "identical": diverged is None,
                               "verdict": verdict, "violated": trace.violated,
                               "divergence": diverged}, indent=2))
    elif diverged is None:
        vio = visible(", ".join(trace.violated))
        what = f"{vio} violated again" if vio else "no invariant violated"
        click.echo(f"identical: {len(trace.records)} records replayed byte for byte; "
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
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "html", "perfetto"]),
              default="text", show_default=True,
              help="text: a timeline; markdown: a bug report to paste; html: one "
                   "self-contained page of swimlanes; perfetto: Trace Event JSON for "
                   "ui.perfetto.dev or chrome://tracing.")
@click.option("--verbose", "-v", is_flag=True, help="Also show the scheduler's decisions.")
@click.option("-o", "output", type=click.Path(dir_okay=False), default=None,
              help="Write to this file instead of stdout.")
def show_command(trace_path: str, fmt: str, verbose: bool, output: str | None) -> None:
    """Print TRACE as a timeline: step, virtual time, actor, what happened.

    Everything the trace says is shown escaped (control characters visibly,
    Markdown syntax inert, HTML escaped in a page that runs no script), so a
    trace cannot drive the terminal or the page.

    \b
      dst show traces/failures/counter-3.jsonl --format markdown
      dst show traces/failures/counter-3.jsonl --format html -o counter-3.html
      dst show traces/failures/counter-3.jsonl --format perfetto -o counter-3.json
    """
    from .testing import replay_command
    from .trace.html import render_html
    from .trace.perfetto import render_perfetto

    if output:
        # Checked before any work, and never created: a typo in -o should not
        # leave a new directory tree behind.
        target, parent = Path(output), Path(output).parent
        problem = None
        if not parent.exists():
            problem = f"directory {parent} does not exist; create it first"
        elif not parent.is_dir():
            problem = f"{parent} is not a directory"
        elif target.is_dir():
            problem = "it is a directory; name a file"
        elif not os.access(target if target.exists() else parent, os.W_OK):
            problem = "permission denied; choose a path you can write"
        if problem is not None:
            _die(UsageError(f"cannot write -o {output}: {problem}"))
    try:
        trace = read_trace(trace_path)
    except DstError as err:
        _die(err)
    if fmt == "html":
        text = render_html(trace, replay=replay_command(trace_path, trace))
    elif fmt == "perfetto":
        text = render_perfetto(trace)
    elif fmt == "markdown":
        text = render_markdown(trace, verbose=verbose, replay=replay_command(trace_path, trace))
    else:
        text = render_text(trace, verbose=verbose)
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            _die(UsageError(f"cannot write -o {output}: {exc.strerror or exc}"))
    else:
        click.echo(text, nl=False)


__all__ = ["main"]


# -- table ----------------------------------------------------------------------

from .verdict_table import table_command  # noqa: E402 - registered after the core commands

main.add_command(table_command)

from .commands import register  # noqa: E402 - one module a command, added after the core

register(main)
