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
records; ``dst/launcher.py``, before this module is imported), and its worker
processes inherit it.

A command imports what it uses when it runs: the commands of ``dst.commands``
are imported only when asked for (``dst --help`` lists them from a table), and
the kernel, trio and structlog only by a command that runs or reads a scenario.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from . import __version__
from .commands import COMMANDS
from .commands import load as load_command
from .errors import DstError, ScenarioError, UsageError
from .launcher import (
    _PROGRAM,
    REEXEC,
    current_hash_seed,
    pin_hash_seed,
    program_name,
    started,
    wanted_hash_seed,
)
from .launcher import HASH_SEED as HASH_SEED

if TYPE_CHECKING:
    from .scenario import Scenario
    from .trace.model import Trace

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_DIVERGED = 0, 1, 2, 3
EXIT_BROKEN = ScenarioError.exit_code  # 4: the scenario itself is broken
EXIT_INTERRUPTED = 130


def _die(err: DstError) -> NoReturn:
    click.echo(f"error: {_one_line(str(err))}", err=True)
    sys.exit(err.exit_code)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Dst(click.Group):
    """click's group, but every usage error is one line: ``error: ...``, exit 2; and the
    commands of ``dst.commands`` are imported only when one of them is asked for.

    click prints a usage banner and ``Error: ...`` over several lines; dst's
    contract is one line on stderr that names the culprit and the way out, the
    same for an unknown ``-c`` switch as for an ill-formed one.
    """

    #: While ``--help`` lists the commands: a command not imported yet stands in
    #: with its line of ``COMMANDS`` (click shortens it as it would the real help).
    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is not None or cmd_name not in COMMANDS:
            return command
        if self._listing:
            return click.Command(cmd_name, help=COMMANDS[cmd_name])
        command = load_command(cmd_name)
        self.add_command(command, cmd_name)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if args is None:
            # Started as a program (not called with arguments from Python): pin
            # the hash seed before anything else runs, as dst/launcher.py does.
            args = sys.argv[1:]
            typed = os.environ.get(REEXEC) or program_name()
            pin_hash_seed(list(args), wanted_hash_seed(list(args)), typed)
            prog_name = prog_name or typed
            _PROGRAM[0] = True
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
    from .registry import all_scenarios, listed

    missing: dict[str, str] = {}
    try:  # a file of @dst.test functions: each as FILE.py::NAME
        named = listed(scenario_ref) if scenario_ref else \
            [(s.name, s) for s in all_scenarios(missing)]
    except DstError as err:
        _die(err)
    if as_json:
        click.echo(json.dumps({"scenarios": [{**_scenario_json(s), "name": name}
                                             for name, s in named],
                               "unavailable": [{"name": name, "needs": module}
                                               for name, module in missing.items()]},
                              indent=2))
        return
    for name, s in named:
        click.echo(f"{name}: {s.doc}")
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
    for name, module in missing.items():
        click.echo(f"{name}: not here: it imports {module}, which is not installed "
                   "(pip install 'dst[agents]' installs what the shipped agents use)")


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


# -- run: dst/commands/run.py ---------------------------------------------------------


def replay_command_line(path: Path, scenario_ref: str | None) -> str:
    """The one command that replays a failure (``--scenario`` for a user's own file)."""
    line = f"dst replay {shlex.quote(str(path))}"
    return line + (f" --scenario {shlex.quote(scenario_ref)}" if scenario_ref else "")


# -- replay / show --------------------------------------------------------------


def _load_trace(path: str, scenario_ref: str | None) -> tuple[Trace, Scenario]:
    from .registry import is_shipped, load
    from .trace.codec import read_trace

    trace = read_trace(path)
    name = trace.header["scenario"]
    if scenario_ref is None:
        if not is_shipped(name):
            # A trace is untrusted input (an attachment to a bug report): the file its
            # header names is shown, never imported; only --scenario names code to run.
            recorded = trace.header.get("scenario_file")
            if isinstance(recorded, str):  # as a path from here, when it is found
                from .project import recorded_file

                recorded = recorded_file(recorded, path) or recorded
            where = (f"--scenario {shlex.quote(f'{recorded}::{name}')} (the file it was "
                     "recorded from: dst runs no code a trace names)"
                     if isinstance(recorded, str)
                     else "--scenario path/to/file.py (or package.module)")
            raise UsageError(f"{path} is a trace of scenario {name!r}, which is not a "
                             f"shipped one; say where it lives with {where}")
        _check_hash_seed(trace, path, scenario_ref)
        return trace, load(name)
    _check_hash_seed(trace, path, scenario_ref)
    scen = load(scenario_ref)
    if scen.name != name:
        raise UsageError(f"{scenario_ref} defines scenario {scen.name!r}, "
                         f"but {path} is a trace of {name!r}")
    return trace, scen


T = TypeVar("T")


def replayed(work: Callable[[], T], scenario: Scenario, trace: Trace,
             scenario_ref: str | None) -> T:
    """``work`` (a replay of ``trace``, or a search from it); an exception from the
    scenario's own code (its setup or a check) is one line, exit 4, as in ``dst run``."""
    try:
        return work()
    except (DstError, KeyboardInterrupt):
        raise
    except BaseException as exc:
        raise scenario_broke(exc, scenario, trace, scenario_ref) from None


def scenario_broke(exc: BaseException, scenario: Scenario, trace: Trace,
                   scenario_ref: str | None) -> DstError:
    """The one line for ``exc``, raised by the scenario's own code as ``trace`` replayed."""
    from .runner.bulk import user_error

    return user_error(exc, scenario, scenario_ref or scenario.name,
                      scenario.checked_config(trace.header["config"]),
                      int(trace.header["seed"]))


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
    from .runner.single import replay_trace
    from .trace.escape import visible

    try:
        trace, scen = _load_trace(trace_path, scenario_ref)
        started()
        result = replayed(lambda: replay_trace(scen, trace), scen, trace, scenario_ref)
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
        click.echo(f"{diverged}\n  likely cause: {_random_hash_seed(trace)}the code under "
                   f"test, the scenario or dst changed since the trace was recorded"
                   f"{_recorded_by(trace)}, or it is nondeterministic (reads something dst "
                   "does not control); `dst run --check-determinism` tells which")
    if diverged is not None:
        sys.exit(EXIT_DIVERGED)
    sys.exit(EXIT_VIOLATION if verdict == "fail" else EXIT_OK)


def _random_hash_seed(trace: Trace) -> str:
    """The first likely cause of a divergence when the trace was recorded under a random
    hash seed (``hash_seed: null``: dst called from Python, pytest, without fixing it)."""
    if "hash_seed" not in trace.header or trace.header["hash_seed"] is not None:
        return ""
    return ("the trace was recorded under a random hash seed (its header says hash_seed: "
            "null), so code that iterates a set of strings may take another order here; "
            "rerun the test under PYTHONHASHSEED=0 to get a trace that replays; otherwise ")


def _recorded_by(trace: Trace) -> str:
    """`` (by dst 0.1.0 on Python 3.12.1; this is ...)`` when the versions differ."""
    import platform

    import trio

    from . import __version__

    h = trace.header
    then = (h.get("dst_version"), h.get("python"), h.get("trio"))
    now = (__version__, platform.python_version(), trio.__version__)
    if then == now:
        return ""
    return (f" (recorded by dst {then[0]} on Python {then[1]} with trio {then[2]}; this is "
            f"dst {now[0]} on Python {now[1]} with trio {now[2]})")


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
@click.option("--scenario", "scenario_ref", default=None, metavar="REF",
              help="Where the trace's scenario lives, for the replay command of markdown "
                   "and html: a .py file or a module (default: its pin's, else the file "
                   "the trace header records).")
def show_command(trace_path: str, fmt: str, verbose: bool, output: str | None,
                 scenario_ref: str | None = None) -> None:
    """Print TRACE as a timeline: step, virtual time, actor, what happened.

    Everything the trace says is shown escaped (control characters visibly,
    Markdown syntax inert, HTML escaped in a page that runs no script but dst's
    own), so a trace cannot drive the terminal or the page.

    \b
      dst show traces/failures/counter-3.jsonl --format markdown
      dst show traces/failures/counter-3.jsonl --format html -o counter-3.html
      dst show traces/failures/counter-3.jsonl --format perfetto -o counter-3.json
      dst show traces/failures/bank-3.jsonl --format markdown --scenario bank.py
    """
    from .trace.codec import read_trace

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
    switches: tuple[str, ...] = ()
    try:
        trace = read_trace(trace_path)
        if scenario_ref is not None:  # the replay command must run: REF defines the scenario
            from .registry import load

            scen = load(scenario_ref)
            if scen.name != trace.header["scenario"]:
                raise UsageError(f"{scenario_ref} defines scenario {scen.name!r}, but "
                                 f"{trace_path} is a trace of {trace.header['scenario']!r}")
            # Loaded anyway: its switches' order is the one dst run shows.  Without
            # --scenario none is loaded, not even a shipped one (importing it, and trio,
            # would cost ``dst show`` four times its time): the header's order.
            switches = tuple(scen.switches)
    except DstError as err:
        _die(err)
    if fmt == "html":
        from .testing import replay_command
        from .trace.html import render_html

        text = render_html(trace, replay=replay_command(trace_path, trace, scenario_ref),
                           switches=switches)
    elif fmt == "perfetto":
        from .trace.perfetto import render_perfetto

        text = render_perfetto(trace)
    elif fmt == "markdown":
        from .testing import replay_command
        from .trace.render import render_markdown

        text = render_markdown(trace, verbose=verbose,
                               replay=replay_command(trace_path, trace, scenario_ref),
                               switches=switches)
    else:
        from .trace.render import render_text

        text = render_text(trace, verbose=verbose, switches=switches)
    if output:
        try:
            Path(output).write_text(text, encoding="utf-8")
        except OSError as exc:
            _die(UsageError(f"cannot write -o {output}: {exc.strerror or exc}"))
    else:
        click.echo(text, nl=False)


__all__ = ["main"]
