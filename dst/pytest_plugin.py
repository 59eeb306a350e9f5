"""dst's pytest plugin: every pinned trace is a test, and ``@pytest.mark.dst`` checks seeds.

Installed with dst (the ``pytest11`` entry point), so a project that pins traces
with ``dst pin`` gets them replayed by a plain ``pytest``:

- Every ``*.jsonl`` in the directories of the ini option ``dst_traces``
  (default ``traces/regressions``, relative to the rootdir) is a test item,
  ``<trace>::identical``: its replay must reproduce it exactly
  (:func:`dst.testing.check_pinned`).  With ``--dst-fixed`` the item is
  ``<trace>::fixed`` and the run, following the recorded choices where they
  still apply, must pass: the way to confirm a fix before removing its pin.
- ``@pytest.mark.dst("counter", seeds=200, cas=True)`` runs the seeds before the
  test body (:func:`dst.testing.check_seeds`); the test fails at the first seed
  that breaks a check, with its story and replay command.  A scenario file
  (``"bank.py"``) is looked for beside the test's file, then in the working
  directory, so the test passes from wherever pytest runs.

Pinned traces are added when pytest collects its default paths (no path given on
the command line), and whenever a path given reaches one (``pytest
traces/regressions``); a trace file or a directory of traces given on the command
line is collected wherever it is (``pytest sub/traces/regressions``, a corpus
``dst pin`` made outside the rootdir); ``pytest tests/test_x.py`` runs just that file.  The
testing API (and with it the kernel) is imported only when a pinned trace or a
marked test runs.

Everything runs in the pytest process when it runs under hash seed 0, as the
``dst`` command does (``PYTHONHASHSEED=0 pytest``).  Under another (pytest's
default is a random one), seeds still run in this process, under its hash seed,
and a pinned trace recorded under another hash seed is replayed in a child
interpreter started under that one; a line at the end of the session says what
ran so (``dst.testing.hash_seed_note``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: Where pinned traces are looked for when ``dst_traces`` is not set.
DEFAULT_DIRS = ("traces/regressions",)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dst", "dst: deterministic simulation testing")
    group.addoption(
        "--dst-fixed", action="store_true", default=False,
        help="pinned traces must pass after their fix: follow the recorded choices where "
             "they still apply and require no violation (default: replay identically)")
    parser.addini(
        "dst_traces", type="paths", default=[],
        help=f"directories whose *.jsonl pinned traces run as tests (default: "
             f"{', '.join(DEFAULT_DIRS)})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "dst(scenario, seeds=500, config=None, **switches): run the seeds of a dst scenario "
        "before the test; fail at the first seed that breaks a check")


def _trace_dirs(config: pytest.Config) -> list[Path]:
    configured = config.getini("dst_traces")
    dirs = configured or [config.rootpath / d for d in DEFAULT_DIRS]
    return [Path(d).resolve() for d in dirs]


def _given(config: pytest.Config) -> set[Path]:
    """The paths given on the command line (without ``::`` node parts), resolved."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return set()
    base = config.invocation_params.dir
    return {(base / arg.partition("::")[0]).resolve() for arg in config.args}


def _is_trace(path: Path) -> bool:
    """Whether ``path`` starts with a dst trace header (a directory given may hold other
    ``.jsonl`` files)."""
    try:
        with path.open(encoding="utf-8") as f:
            header = json.loads(f.readline(1 << 20))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(header, dict) and header.get("format") == "dst-trace"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A ``.jsonl`` in a pin directory (``dst_traces``), or given on the command line
    (``pytest path/to/pin.jsonl``), or a trace in a directory given (``pytest
    sub/traces/regressions``, wherever it is, under the rootdir or not)."""
    if file_path.suffix != ".jsonl":
        return None
    given = _given(parent.config)
    where = file_path.parent.resolve()
    if (where in _trace_dirs(parent.config) or file_path.resolve() in given
            or (where in given and _is_trace(file_path))):
        return PinnedTraceFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect: pinned traces can be selected
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return  # paths given: pytest_collect_file found whatever pinned trace they reach
    seen = {item.path.resolve() for item in items if isinstance(item, PinnedTrace)}
    for directory in _trace_dirs(config):
        for path in sorted(directory.glob("*.jsonl")):
            if path.resolve() not in seen:
                items.extend(PinnedTraceFile.from_parent(session, path=path).collect())


class PinnedTraceFile(pytest.File):
    """A pinned trace file: one item, replayed identically or checked after the fix."""

    def collect(self) -> Iterator[pytest.Item]:
        fixed = bool(self.config.getoption("dst_fixed"))
        yield PinnedTrace.from_parent(self, name="fixed" if fixed else "identical", fixed=fixed)


class PinnedTrace(pytest.Item):
    def __init__(self, *, fixed: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fixed = fixed

    def runtest(self) -> None:
        from dst.testing import check_pinned, read_pin

        pin = read_pin(_shown(self.path))
        found = _imported(self.config, pin.scenario) if pin.scenario else None
        check_pinned(pin, fixed=self.fixed, scenario=found[0] if found else None)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        """The replay's own words (what differed, or what still fails), not a traceback
        through the plugin."""
        if isinstance(excinfo.value, AssertionError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        how = "after the fix" if self.fixed else "replayed identically"
        return self.path, None, f"pinned trace {self.path.name}, {how}"


def _imported(config: pytest.Config, ref: str) -> tuple[Any, str] | None:
    """The scenario a file reference names (``FILE.py``, or ``FILE.py::NAME`` for a
    ``@dst.test``), from the file imported as pytest imports a test file, and the
    reference shortened for a replay line; None when ``ref`` is no file or the module
    holds no such scenario (dst's own loader then says what is wrong, in one line).

    Under the import mode pytest runs in (``--import-mode``, ``prepend`` by default)
    and by the name pytest gives the file: a test file pytest collected is the module
    its tests run in, not a second copy of it with its own state, and a scenario file
    is imported once, by the name a test importing it gets.  In ``importlib`` mode,
    nothing is put on ``sys.path`` that pytest would not put there.
    """
    from dst.registry import shown_path
    from dst.scenario import Scenario

    file, _, name = ref.partition("::")
    path = Path(file)
    if path.suffix != ".py" or not path.is_file():
        return None
    try:
        module = _import_path(config, path)
    except Exception:  # a file that does not import: told by dst's loader, in one line
        return None
    held = getattr(module, name, None) if name else None
    scenario = getattr(held, "scenario", None) if name else getattr(module, "scenario", None)
    if name and not isinstance(scenario, Scenario):
        main = getattr(module, "scenario", None)
        scenario = main if isinstance(main, Scenario) and main.name == name else None
    if not isinstance(scenario, Scenario):
        return None
    return scenario, shown_path(str(path)) + (f"::{name}" if name else "")


def _import_path(config: pytest.Config, path: Path) -> Any:
    """The module at ``path`` as pytest imports a test file: pytest's own ``import_path``
    under the session's ``importmode`` and rootdir (the one private hook of pytest this
    plugin uses; ``consider_namespace_packages`` exists from pytest 8.1)."""
    from _pytest.pathlib import import_path

    options: dict[str, Any] = {}
    try:
        options["consider_namespace_packages"] = config.getini("consider_namespace_packages")
    except ValueError:  # pytest 8.0
        pass
    return import_path(Path(os.path.abspath(path)), mode=config.getoption("importmode"),
                       root=config.rootpath, **options)


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory when below it: messages stay short."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """A test marked ``dst`` runs its seeds first; a failing seed fails the test."""
    marker = item.get_closest_marker("dst")
    if marker is None:
        return
    from dst.errors import DstError
    from dst.testing import check_seeds

    kwargs = dict(marker.kwargs)
    args = list(marker.args)
    scenario = kwargs.pop("scenario", args.pop(0) if args else None)
    if scenario is None or args:
        pytest.fail(f"{item.nodeid}: @pytest.mark.dst takes a scenario, then keywords "
                    "(seeds=..., config=..., switch=value): @pytest.mark.dst('counter', "
                    "seeds=200)", pytrace=False)
    try:
        if isinstance(scenario, str):  # a file beside the test's own file, else in the cwd
            from dst.registry import near

            scenario = near(scenario, item.path)
            found = _imported(item.config, scenario)
            if found is not None:  # imported as pytest imports it (its import mode)
                scenario, kwargs["scenario_ref"] = found[0], kwargs.get(
                    "scenario_ref", found[1])
        check_seeds(scenario, **kwargs)
        failure = None
    except AssertionError as exc:
        failure = str(exc)
    except DstError as err:  # a usage error: one line, not dst's frames
        failure = f"@pytest.mark.dst: {' '.join(str(err).split())}"
    if failure is not None:  # outside the except: the message alone, not a chain of two
        pytest.fail(failure, pytrace=False)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line when a seed or a pin ran otherwise than in ``dst`` for the hash seed, and
    one for each ``@dst.test`` that passed while some of its seeds skipped."""
    small = sys.modules.get("dst.small")
    for line in small.partly_skipped() if small is not None else ():
        terminalreporter.write_line(line)
    testing = sys.modules.get("dst.testing")  # not imported by a session that never used it
    note = testing.hash_seed_note() if testing is not None else None
    if note:
        terminalreporter.write_line(note)
