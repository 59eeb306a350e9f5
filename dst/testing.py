"""Testing with dst from pytest (or any test runner): seeds of a scenario, and pinned traces.

Two promises a project wants its test suite to keep:

- **A scenario holds over many seeds.**  :func:`check_seeds` runs seeds of a
  scenario and, at the first one that breaks a check, writes its trace and
  raises ``AssertionError`` with the story of that run and the one command that
  replays it; otherwise it returns a summary.
- **A bug once found stays found, or stays fixed.**  A *pinned* trace is a
  failing trace kept in the repository (``dst pin`` puts it under
  ``traces/regressions/``), with a note and, for a scenario that is not a
  shipped one, where its scenario lives.  :func:`check_pinned` replays it: by
  default it must reproduce *exactly* (every record byte for byte, the same
  verdict); with ``fixed=True`` the run follows the recorded choices where they
  still apply (``dst.explore.follow.Follow``) and must now pass.  dst's pytest
  plugin (``dst/pytest_plugin.py``) makes every pinned trace a test item.

A pin is two files: ``NAME.jsonl``, the trace as ``dst run`` wrote it, and
``NAME.json`` beside it, ``{"note": ..., "scenario": ...}``, where
``scenario`` is null for a shipped scenario and otherwise the file (relative to
the pin's directory, so the pin works from any working directory) or the
module that defines it.

A trace names the hash seed it was recorded under, and a run that iterates a
set of strings depends on it.  In a process under hash seed 0, the one the
``dst`` command runs under (``PYTHONHASHSEED=0 pytest``), everything runs in
this process: no child interpreter, no re-execution.  A test runner runs under
a random hash seed unless told otherwise; there :func:`check_seeds` still runs
the seeds in this process, under its hash seed (which their traces record:
null when random), and a pinned trace recorded under another hash seed than
this process's is checked in a child interpreter started under the recorded
one, an interpreter start for each.  :func:`hash_seed_note` says so in one
line, which dst's pytest plugin prints at the end of the session.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import DivergenceError, DstError, UsageError
from .project import recorded_file
from .registry import at_callers_line, caller_file, is_shipped, load, near, shown_path
from .runner.names import trace_stem
from .runner.single import RunResult, replay_trace, run_seeds
from .scenario import Scenario
from .trace.codec import read_trace, write_trace
from .trace.escape import visible
from .trace.model import Trace, current_hash_seed, scenario_file
from .trace.render import counted, format_time, replay_line, story

__all__ = [
    "DEFAULT_OUT",
    "DEFAULT_PIN_DIR",
    "Pin",
    "SeedFailed",
    "SeedsChecked",
    "check_pinned",
    "check_seeds",
    "hash_seed_note",
    "pin_trace",
    "pinned_traces",
    "read_pin",
]

#: Where :func:`check_seeds` writes the trace of a failing seed (as ``dst run`` does).
DEFAULT_OUT = Path("traces") / "failures"
#: Where ``dst pin`` puts pinned traces, and where the pytest plugin looks by default.
DEFAULT_PIN_DIR = Path("traces") / "regressions"

#: Seeds run in one ``trio.run``; a failing seed stops its batch as it ends.
_BATCH = 50
#: Story lines an assertion message tells; a longer story keeps its end.
_STORY_LINES = 40
#: A pin's name is a file name: no directories, nothing hidden.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: What ran differently from the ``dst`` command because of the hash seed:
#: pins checked in a child interpreter, seeds run here under another one than 0.
_AWAY = {"pins": 0, "seeds": 0}


# -- seeds -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeedsChecked:
    """What :func:`check_seeds` ran when no check broke."""

    scenario: str
    config: dict[str, Any]
    runs: int
    #: Seeds whose run was cut at the scenario's step bound: they broke no
    #: invariant, but their end-of-run checks never ran.
    bounded: tuple[int, ...] = ()

    def __str__(self) -> str:
        cut = (f"; {len(self.bounded)} cut at the step bound before the end-of-run checks "
               f"(seeds {', '.join(map(str, self.bounded[:5]))}"
               f"{', ...' if len(self.bounded) > 5 else ''})" if self.bounded else "")
        return (f"{self.scenario} [{_config_text(self.config)}]: {counted(self.runs, 'run')}, "
                f"no violation{cut}")


class _FirstFailure(Exception):
    """Raised as a batch's run ends with a violation: :func:`check_seeds` stops there."""


class SeedFailed(AssertionError):
    """What :func:`check_seeds` raises: the failure told, with the seed and its trace."""

    def __init__(self, message: str, seed: int, path: Path) -> None:
        super().__init__(message)
        self.seed = seed
        self.path = path


@at_callers_line
def check_seeds(
    scenario: Scenario | str,
    seeds: int | Iterable[int] = range(500),
    config: Mapping[str, Any] | None = None,
    *,
    out: str | os.PathLike[str] | None = None,
    scenario_ref: str | None = None,
    verbose: bool = False,
    trace_name: str | None = None,
    **switches: Any,
) -> SeedsChecked:
    """Run ``seeds`` of ``scenario``; raise ``AssertionError`` at the first that breaks a check.

    ``scenario`` is a shipped name, a ``.py`` file, a module, or a
    :class:`~dst.Scenario`; a relative file is looked for beside the file that
    calls ``check_seeds`` (the test), then in the working directory.  ``seeds``
    is a count (``200`` is seeds 0..199) or any seeds.  ``config`` and keyword
    ``switches`` set switches with typed values (``cas=False``), checked as a
    trace header's are; the rest keep their defaults.  The failing seed's trace
    is written under ``out`` (``traces/failures/`` by default) before the error
    is raised, and the message ends with the command that replays it.
    ``scenario_ref`` says how ``dst replay --scenario`` finds a :class:`~dst.Scenario`
    that no module holds as ``scenario`` (``path/to/test_x.py::test_name`` for a
    ``@dst.test``); its file goes in the trace header.  ``verbose``: the story
    tells the scheduler's decisions too (as ``dst show --verbose``).  ``trace_name``:
    the failing trace's name before ``-SEED.jsonl`` (default: the scenario's name); a
    config other than the default adds the switches that differ (``sw-n=2-SEED.jsonl``),
    as ``dst run`` names its traces, so that two configs never write one file.
    """
    if isinstance(scenario, str):  # a file beside the calling test, else in the cwd
        scenario = near(scenario, caller_file())
    scen, ref = _resolve(scenario)
    ref = scenario_ref or ref
    cfg = scen.checked_config({**dict(config or {}), **switches}, from_trace=False)
    todo = range(seeds) if isinstance(seeds, int) else seeds
    where = Path(out if out is not None else DEFAULT_OUT)
    stem = trace_stem(scen, cfg, name=trace_name)  # a config of its own, a name of its own
    runs, bounded = 0, []

    def run(batch: list[int]) -> None:
        nonlocal runs
        results: list[RunResult] = []

        def ended(r: RunResult) -> None:
            results.append(r)
            if r.violated:  # the first failing seed: the batch's later seeds do not run
                raise _FirstFailure

        try:
            run_seeds(scen, cfg, batch, ended)
        except _FirstFailure:
            pass
        if current_hash_seed() != 0:
            _AWAY["seeds"] += len(results)
        for r in results:
            runs += 1
            if r.ended == "bound":
                bounded.append(r.seed)
            if r.violated:
                # In the header: the file, from here (FILE.py of FILE.py::NAME).
                r.scenario_file = scenario_file(ref.partition("::")[0] if ref else ref)
                trace = r.trace()
                path = write_trace(trace, where / f"{stem}-{r.seed}.jsonl")
                raise SeedFailed(_failure(trace, path, ref, runs, verbose), r.seed, path)

    batch: list[int] = []
    for seed in todo:
        batch.append(seed)
        if len(batch) == _BATCH:
            run(batch)
            batch = []
    if batch:
        run(batch)
    return SeedsChecked(scen.name, cfg, runs, tuple(bounded))


def _failure(trace: Trace, path: Path, ref: str | None, runs: int,
             verbose: bool = False) -> str:
    """The first failure told as ``dst run`` tells it: what broke, the story, the replay."""
    h = trace.header
    vio = next(r for r in trace.records if r["type"] == "violation")
    lines = story(trace, verbose=verbose)
    shown = lines[-_STORY_LINES:]
    width = max([len(actor) for _, _, actor, _ in shown] + [8])
    config = f" [{_config_text(h['config'])}]" if h["config"] else ""  # a @dst.test has none
    out = [visible(f"{h['scenario']}{config}: {vio['invariant']} "
                   f"violated (seed {h['seed']}, the {_ordinal(runs)} seed run; step "
                   f"{vio['step']}, virtual {format_time(vio['t'])}): {vio['message']}"),
           f"  story ({counted(len(lines), 'line')}, {counted(trace.footer.get('steps'), 'step')}"
           + (f"; the last {len(shown)} shown" if len(shown) < len(lines) else "") + "):"]
    first = len(lines) - len(shown) + 1
    out += [f"    {n:>3}  {t}  {actor:<{width}}  {text}"
            for n, (_, t, actor, text) in enumerate(shown, first)]
    out += [f"  trace:  {path}", f"  replay: {replay_line(str(path), ref)}"]
    return "\n".join(out)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _config_text(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                    for k, v in config.items())


def _resolve(scenario: Scenario | str) -> tuple[Scenario, str | None]:
    """The scenario, and how ``dst replay --scenario`` finds it (None: a shipped name)."""
    if isinstance(scenario, str):
        if is_shipped(scenario):
            return load(scenario), None
        return load(scenario), shown_path(scenario) if scenario.endswith(".py") else scenario
    if is_shipped(scenario.name) and load(scenario.name) is scenario:
        return scenario, None
    for module in list(sys.modules.values()):
        if getattr(module, "scenario", None) is scenario:
            path = getattr(module, "__file__", None)
            return scenario, str(path) if path else module.__name__
    return scenario, None


# -- pins --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """A pinned trace: its file, the note it was pinned with, where its scenario lives."""

    path: Path
    note: str = ""
    #: The scenario's file or module when it is not a shipped one (a file as a path
    #: usable from here), else None.
    scenario: str | None = None

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def sidecar(self) -> Path:
        return self.path.with_suffix(".json")


def read_pin(path: str | os.PathLike[str]) -> Pin:
    """The pin of the trace at ``path``: its sidecar's note and scenario, if it has one."""
    trace_path = Path(path)
    sidecar = trace_path.with_suffix(".json")
    if not sidecar.is_file():
        return Pin(trace_path)
    try:
        doc = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{sidecar}: not a readable pin note ({exc}); fix or remove it") \
            from None
    note, ref = (doc.get("note", ""), doc.get("scenario")) if isinstance(doc, dict) \
        else (None, None)
    if not isinstance(note, str) or not (ref is None or isinstance(ref, str)):
        raise UsageError(f"{sidecar}: a pin note is {{\"note\": text, \"scenario\": "
                         "null or text}; fix or remove it")
    file, named, test = (ref or "").partition("::")  # FILE.py::NAME: a @dst.test
    if file.endswith(".py") and not os.path.isabs(file):
        ref = os.path.normpath(trace_path.parent / file) + named + test
    return Pin(trace_path, note, ref)


def pinned_traces(*directories: str | os.PathLike[str]) -> list[Pin]:
    """Every pinned trace (``*.jsonl``) in ``directories`` (default ``traces/regressions``),
    in name order; a directory that does not exist holds none."""
    found: list[Pin] = []
    for directory in directories or (DEFAULT_PIN_DIR,):
        found += [read_pin(p) for p in sorted(Path(directory).glob("*.jsonl"))]
    return found


def check_pinned(pin: Pin | str | os.PathLike[str], *, fixed: bool = False,
                 out: str | os.PathLike[str] | None = None, scenario: Scenario | None = None,
                 _here: bool = False, _pinning: bool = False) -> str:
    """Replay a pinned trace; raise ``AssertionError`` when it no longer holds.

    By default the replay must be identical: every record byte for byte, so the
    recorded verdict too.  With ``fixed``, the run follows the recorded choices
    where they are still enabled (elsewhere the calm default) and must pass:
    the bug it pinned is fixed; when it does not, its trace is written under
    ``out`` (``traces/failures/`` by default) as ``NAME-after-fix.jsonl``.
    Returns one line saying what held.  ``scenario``: the pin's scenario, when the
    caller imported its file already (pytest's plugin imports it as pytest imports a
    test file, under the import mode pytest runs in); else dst imports what the pin
    names.  ``_pinning``: the trace is not pinned yet (:func:`pin_trace` asks), so a
    divergence says why it cannot be, not what to do about a pin.
    """
    p = pin if isinstance(pin, Pin) else read_pin(pin)
    try:
        trace = read_trace(p.path)
        scenario = _pinned_scenario(p, trace, given=scenario)
    except DstError as err:
        raise AssertionError(" ".join(str(err).split())) from None
    recorded = trace.header.get("hash_seed")
    where = Path(out if out is not None else DEFAULT_OUT)
    if isinstance(recorded, int) and recorded != current_hash_seed() and not _here:
        return _check_in_child(p, fixed, where, recorded, _pinning)
    ok, message = _after_fix(p, trace, scenario, where) if fixed else \
        _identical(p, trace, scenario, _pinning)
    if not ok:
        raise AssertionError(message)
    return message


#: How the check made before pinning ends when the replay gave no verdict.
_NOT_PINNED = "; a pin must reproduce its bug exactly, so it was not pinned"


def _pinned_scenario(pin: Pin, trace: Trace, *, pinning: bool = False,
                     given: Scenario | None = None) -> Scenario:
    name = trace.header["scenario"]
    if pin.scenario is None:
        if not is_shipped(name):
            recorded = trace.header.get("scenario_file")  # shown, never imported
            ref = f"{recorded_file(recorded, pin.path) or recorded}::{name}" \
                if isinstance(recorded, str) else "FILE.py"
            raise UsageError(
                f"{pin.path} is a trace of scenario {name!r}, which is not a shipped one"
                + ("; say where it lives: " if pinning else
                   ", and its pin does not say where it lives; pin it again: ")
                + f"dst pin {pin.path} --scenario {ref}")
        return load(name)
    scenario = given if given is not None else load(pin.scenario)
    if scenario.name != name:
        raise UsageError(f"{pin.scenario} defines scenario {scenario.name!r}, but {pin.path} "
                         f"is a trace of {name!r}")
    return scenario


def _identical(pin: Pin, trace: Trace, scenario: Scenario,
               pinning: bool = False) -> tuple[bool, str]:
    result = replay_trace(scenario, trace)
    if result.divergence is not None and pinning:
        return False, (f"{pin.path} does not replay against this code, so it was not "
                       "pinned (a pin must reproduce its bug exactly): "
                       f"{result.divergence}; record a new trace of the bug with "
                       f"{_rerun(pin, trace, scenario)} (the seed it came from) and pin that "
                       "one, or pin this trace against the code it was recorded with")
    if result.divergence is not None:
        return False, (f"{pin.path}: {result.divergence}; the code under test (or the "
                       "scenario) changed since the trace was pinned: if the bug is fixed, "
                       "check it with --dst-fixed and then remove the pin")
    vio = visible(", ".join(trace.violated)) or "no invariant"
    return True, (f"{pin.path}: identical, {len(trace.records)} records replayed byte for "
                  f"byte ({vio} violated again)")


def _after_fix(pin: Pin, trace: Trace, scenario: Scenario, out: Path) -> tuple[bool, str]:
    from .explore.follow import Follow  # the exploring package is needed only here
    from .runner.single import plan_from_dict

    config = scenario.checked_config(trace.header["config"])
    recorded = trace.header.get("faults")
    plan = scenario.fault_plan(config)
    if isinstance(recorded, dict) and recorded != plan.as_dict():
        plan = plan_from_dict(recorded)
    follow = Follow(trace.decisions)
    results: list[RunResult] = []
    run_seeds(scenario, config, [int(trace.header["seed"])], results.append,
              strategy=lambda _seed: follow, faults=plan)
    result = results[0]
    applied = (f"{follow.followed} of {len(trace.decisions)} recorded choices still applied, "
               f"{follow.defaulted} steps took the default")
    if result.violated or result.ended == "bound":
        what = (f"{', '.join(result.violated)} violated" if result.violated
                else f"cut at the step bound ({counted(result.steps, 'step')})")
        path = write_trace(result.trace(), out / f"{pin.name}-after-fix.jsonl")
        return False, visible(f"{pin.path}: still fails after the fix: {what} ({applied}); "
                              f"see it with: dst show {path}")
    return True, f"{pin.path}: passes after the fix ({applied})"


def _rerun(pin: Pin, trace: Trace, scenario: Scenario) -> str:
    """``dst run REF [-c K=V ...] --seed N``: the trace's seed and config run anew."""
    config = scenario.checked_config(trace.header["config"])
    switches = "".join(
        f" -c {shlex.quote(f'{k}={str(v).lower() if isinstance(v, bool) else v}')}"
        for k, v in sorted(config.items())
        if k in scenario.switches and v != scenario.switches[k].default)
    ref = pin.scenario or scenario.name
    return visible(f"dst run {shlex.quote(ref)}{switches} --seed {trace.header['seed']}")


def _check_in_child(pin: Pin, fixed: bool, out: Path, hash_seed: int,
                    pinning: bool = False) -> str:
    """:func:`check_pinned` in a fresh interpreter under the trace's hash seed."""
    job = json.dumps({"path": str(pin.path), "note": pin.note, "scenario": pin.scenario,
                      "fixed": fixed, "out": str(out), "pinning": pinning})
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed))
    _AWAY["pins"] += 1
    done = subprocess.run(
        [sys.executable, "-c", "from dst.testing import _child; _child()", job],
        capture_output=True, text=True, env=env, check=False)
    lines = done.stdout.strip().splitlines()
    try:
        ok, message = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise AssertionError(f"{pin.path}: the replay under hash seed {hash_seed} "
                             f"stopped without a verdict: {visible(tail)}"
                             + _NOT_PINNED * pinning) from None
    if not ok:
        raise AssertionError(message)
    return str(message)


def hash_seed_note() -> str | None:
    """One line on what ran otherwise than in the ``dst`` command because this process
    runs under another hash seed than 0; None when nothing did."""
    here = current_hash_seed()
    pins, seeds = _AWAY["pins"], _AWAY["seeds"]
    if not pins and not seeds:
        return None
    what = []
    if pins:
        what.append(f"{pins} pinned trace{'s' * (pins != 1)} replayed in a child interpreter"
                    f"{' each' * (pins != 1)}, under the hash seed "
                    f"{'they were' if pins != 1 else 'it was'} recorded under")
    if seeds:
        what.append(f"{seeds:,} seed{'s' * (seeds != 1)} run in this process under its "
                    "hash seed, as their traces record")
    if here == 0:
        return f"dst: {'; '.join(what)}"
    under = "a random hash seed" if here is None else f"hash seed {here}"
    return (f"dst: this process runs under {under}, the dst command under 0: "
            f"{'; '.join(what)}; under PYTHONHASHSEED=0 pytest, seeds and pins recorded "
            "under 0 run in this process, as in dst")


def _child() -> None:
    """The child's side of :func:`_check_in_child`: one JSON line, ``[ok, message]``."""
    job = json.loads(sys.argv[1])
    pin = Pin(Path(job["path"]), job["note"], job["scenario"])
    try:
        # _here: even if the interpreter ignored PYTHONHASHSEED, never start another.
        print(json.dumps([True, check_pinned(pin, fixed=job["fixed"], out=job["out"],
                                             _here=True, _pinning=job["pinning"])]))
    except AssertionError as exc:
        print(json.dumps([False, str(exc)]))


# -- pinning -----------------------------------------------------------------------------


def pin_trace(
    trace_path: str | os.PathLike[str],
    *,
    name: str | None = None,
    note: str = "",
    directory: str | os.PathLike[str] = DEFAULT_PIN_DIR,
    scenario: str | None = None,
) -> tuple[Pin, bool]:
    """Copy a failing trace into the regression corpus; ``(pin, False)`` if already there.

    Refused (``UsageError``, one line): a passing trace, a scenario that cannot be
    found, a name that is not a plain file name, a name already taken by another
    trace.  A trace that does not replay identically here is refused too
    (``DivergenceError``): a pin that cannot reproduce its bug guards nothing.
    """
    source = Path(trace_path)
    trace = read_trace(source)
    h = trace.header
    if trace.footer.get("verdict") != "fail":
        raise UsageError(f"{trace_path} passed (nothing violated); only a failing trace is "
                         "pinned: dst run writes those under traces/failures/")
    pin_name = name if name is not None else f"{h['scenario']}-{h['seed']}"
    if not _NAME.fullmatch(pin_name):
        raise UsageError(f"--name {visible(pin_name)!r} is not a plain file name; use "
                         "letters, digits, '.', '_' and '-' (e.g. bank-overdraft)")
    folder = Path(directory)
    target = folder / f"{pin_name}.jsonl"
    if target.is_file():
        if target.read_bytes() == source.read_bytes():
            return read_pin(target), False
        raise UsageError(f"{target} already holds another trace; choose another --name")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--dir {folder} is a file, not a directory")
    pin = Pin(source, note, scenario)
    try:
        _pinned_scenario(pin, trace, pinning=True)
        check_pinned(pin, _pinning=True)
    except AssertionError as exc:  # its message says that it was not pinned, and why
        raise DivergenceError(str(exc)) from None
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    stored = scenario
    file, named, test = (scenario or "").partition("::")
    if file.endswith(".py"):
        stored = os.path.relpath(os.path.abspath(file), os.path.abspath(folder)) + named + test
    sidecar = {"note": note, "scenario": stored}
    target.with_suffix(".json").write_text(
        json.dumps(sidecar, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
        encoding="utf-8")
    return read_pin(target), True


def replay_command(path: str, trace: Trace, scenario_ref: str | None = None) -> str:
    """The command that replays the trace at ``path``, with the ``--scenario`` of a
    scenario that is not a shipped one: ``scenario_ref`` when given (``dst show
    --scenario``), else its pin's note, else the file its header records
    (``scenario_file``: where ``dst run`` found it, relative to where it ran) as found
    from here (:func:`recorded_file`), else the recorded or a placeholder path with a
    shell comment that says what to fill in."""
    ref = scenario_ref
    if ref is None:
        try:
            ref = read_pin(path).scenario
        except DstError:
            ref = None
    name = str(trace.header["scenario"])
    if ref is not None or is_shipped(name):
        return replay_line(path, ref)
    recorded = trace.header.get("scenario_file")
    if not isinstance(recorded, str):
        # The name is not repeated here: it is the trace's text, shown escaped elsewhere.
        return (replay_line(path, "SCENARIO_FILE.py") + "  # SCENARIO_FILE.py: the file (or "
                "module) that defines the trace's scenario; the trace does not say")
    # FILE.py::NAME: the file may hold several scenarios (@dst.test functions), and
    # NAME picks the trace's one in a file of one as well.
    found = recorded_file(recorded, path)
    if found is not None:
        return replay_line(path, f"{found}::{name}")
    return (replay_line(path, f"{recorded}::{name}") + "  # the file the trace was recorded "
            "from, not found from here: give its path from here")

