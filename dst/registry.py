"""Finding scenarios: by name among the shipped ones, or by file or module path."""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import ParamSpec, TypeVar

import trio

from .errors import DstError, ScenarioError, UsageError
from .scenario import Scenario

_PACKAGE = "scenarios"

P = ParamSpec("P")
R = TypeVar("R")


def shipped() -> dict[str, str]:
    """Scenario name -> module name, for every module of the ``scenarios`` package."""
    try:
        pkg = importlib.import_module(_PACKAGE)
    except ImportError:
        return {}
    names = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            names[info.name] = f"{_PACKAGE}.{info.name}"
    return names


def _from_module(module_name: str, shown: str) -> Scenario:
    return _scenario_of(_import(module_name, shown), shown)


def _import(module_name: str, shown: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name
                                     or module_name.startswith(exc.name + ".")):
            raise UsageError(f"no module {shown} (is it on PYTHONPATH?)") from None
        if module_name.startswith(_PACKAGE + ".") and exc.name \
                and exc.name.split(".")[0] not in ("dst", _PACKAGE):
            raise UsageError(f"scenario {shown} imports {exc.name}, which is not installed: "
                             "pip install 'dst[agents]' installs what the shipped agents "
                             "use") from None
        raise _import_failed(shown, exc) from None
    except DstError:
        raise
    except Exception as exc:
        raise _import_failed(shown, exc) from None


# -- errors in the user's own code ---------------------------------------------------

#: Where dst itself and the libraries it runs on live: a frame there is not the
#: user's line, however deep the traceback goes.
_NOT_USER = tuple(
    str(Path(p).resolve()) + os.sep
    for p in {
        Path(__file__).parent,
        Path(trio.__file__).parent,
        Path(sysconfig.get_paths()["stdlib"]),
        Path(sysconfig.get_paths()["platstdlib"]),
    }
)


def shown_path(filename: str) -> str:
    """``filename`` relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith(os.pardir) else rel


def user_frame(exc: BaseException) -> tuple[str, int] | None:
    """``(file, line)`` of the innermost frame of ``exc`` that is the user's code.

    Skips dst, trio and the standard library; prefers code outside site-packages
    (the user's own files) to a library the user called.
    """
    frames = [(f.f_code.co_filename, line) for f, line in traceback.walk_tb(exc.__traceback__)]
    mine = [(name, line) for name, line in frames
            if not str(Path(name).resolve()).startswith(_NOT_USER)
            and not name.startswith("<")]
    own = [(name, line) for name, line in mine if "site-packages" not in name]
    best = (own or mine)
    return (shown_path(best[-1][0]), best[-1][1]) if best else None


def describe_exception(exc: BaseException) -> str:
    """``ZeroDivisionError: division by zero``, on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def at_callers_line(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` (an API a test calls: ``check_seeds``, ``runs``) raising its usage errors and
    failed seeds from the caller's line: without dst's frames, so that pytest shows the
    test's line and the one-line message, not dst's internals."""
    @functools.wraps(fn)
    def told(*args: P.args, **kwargs: P.kwargs) -> R:
        __tracebackhide__ = True  # read by pytest
        try:
            return fn(*args, **kwargs)
        except (DstError, AssertionError) as err:
            raise err.with_traceback(None) from None

    return told


def _import_failed(shown: str, exc: BaseException) -> ScenarioError:
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{shown_path(exc.filename)}:{exc.lineno}"
        what = f"{type(exc).__name__} at {where}: {' '.join(str(exc.msg).split())}"
    else:
        found = user_frame(exc)
        at = f" at {found[0]}:{found[1]}" if found else ""
        what = f"{type(exc).__name__}{at}: {' '.join(str(exc).split())}"
    return ScenarioError(f"scenario {shown} failed to import: {what}; fix the file "
                         "(or install what it imports) and run again")


def _scenario_of(module: object, shown: str) -> Scenario:
    scenario = getattr(module, "scenario", None)
    if isinstance(scenario, Scenario):
        return scenario
    tests = _tests_in(module)
    if len(tests) == 1:  # a test file with one @dst.test
        return getattr(module, tests[0]).scenario  # type: ignore[no-any-return]
    if tests:
        raise UsageError(f"{shown} holds the dst tests {', '.join(tests)}; name one as "
                         f"{shown}::{tests[0]}")
    raise UsageError(f"{shown} has no module-level 'scenario = dst.Scenario(...)'")


#: Modules loaded from scenario files, by (resolved path, sha256 of the source): a
#: bulk run loads its scenario once per chunk, and a file edited between two loads
#: (a replay after a change) must be executed afresh.
_FILE_CACHE: dict[tuple[str, str], ModuleType] = {}


def _from_file(ref: str) -> Scenario:
    return _scenario_of(_file_module(ref), ref)


def _file_module(ref: str) -> ModuleType:
    path = Path(ref)
    try:
        source = path.read_bytes()
    except FileNotFoundError:
        raise _missing_file(ref, [Path.cwd()]) from None
    except OSError as exc:
        raise UsageError(f"cannot read scenario file {ref} ({exc.strerror})") from None
    key = (str(path.resolve()), hashlib.sha256(source).hexdigest())
    cached = _FILE_CACHE.get(key)
    if cached is not None:
        return cached
    name = f"dst_user_scenario_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {ref} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up here
    _import_as_pytest_does(path)
    try:
        spec.loader.exec_module(module)
    except DstError:
        raise
    except Exception as exc:
        del sys.modules[name]
        raise _import_failed(ref, exc) from None
    _FILE_CACHE[key] = module
    return module


def _import_as_pytest_does(path: Path) -> None:
    """Put on ``sys.path`` what pytest would before importing the file at ``path`` (its
    ini file's ``pythonpath``, the basedirs of the file and its conftests; see
    :func:`dst.project.import_dirs`), so that a test file imports its project's
    packages from any working directory, as the replay line pytest printed says."""
    from .project import import_dirs

    for directory in reversed(import_dirs(path)):
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))


def _named(ref: str) -> Scenario:
    """``FILE.py::NAME`` or ``package.module::NAME``: the ``@dst.test`` named NAME in
    that file or module, or its module-level scenario when that is named NAME."""
    where, _, name = ref.partition("::")
    module = _file_module(where) if where.endswith(".py") else _import(where, where)
    held = getattr(getattr(module, name, None), "scenario", None)
    if isinstance(held, Scenario):
        return held
    main = getattr(module, "scenario", None)
    if isinstance(main, Scenario) and main.name == name:
        return main
    tests = _tests_in(module)
    raise UsageError(f"{where} has no @dst.test or scenario named {name!r}; "
                     f"its dst tests: {', '.join(tests) or 'none'}")


def _tests_in(module: object) -> list[str]:
    """The names of the ``@dst.test`` functions a module holds."""
    return sorted(k for k, v in vars(module).items()
                  if callable(v) and isinstance(getattr(v, "scenario", None), Scenario))


def is_shipped(ref: str) -> bool:
    return ref in shipped()


#: dst's own package: frames here are not the caller that named a scenario.
_DST_DIR = str(Path(__file__).resolve().parent) + os.sep


def caller_file() -> str | None:
    """The file of the innermost frame outside dst: the test that named a scenario."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and not str(Path(name).resolve()).startswith(_DST_DIR):
            return name
        frame = frame.f_back
    return None


def near(ref: str, anchor: str | os.PathLike[str] | None) -> str:
    """A scenario file ``ref`` found beside ``anchor`` (the test file that names it), else
    ``ref`` as it is (relative to the working directory, as on the command line).

    Only a relative ``.py`` path is looked up so; a shipped name, a module or an
    absolute path is returned unchanged.  A file found beside the anchor is
    returned as an absolute path (:func:`shown_path` shortens it for a message).
    """
    if anchor is None or not ref.endswith(".py") or os.path.isabs(ref):
        return ref
    beside = Path(os.path.abspath(anchor)).parent / ref
    if beside.is_file():
        return os.path.normpath(beside)
    if not os.path.isfile(ref):
        raise _missing_file(ref, [Path(os.path.abspath(anchor)).parent, Path.cwd()],
                            beside_of=anchor)
    return ref


def _missing_file(ref: str, dirs: list[Path],
                  beside_of: str | os.PathLike[str] | None = None) -> UsageError:
    """No scenario file ``ref`` (relative to each of ``dirs``): where it was looked for,
    and a near name of a ``.py`` file there."""
    where = f"in the working directory {os.getcwd()}"
    if os.path.isabs(ref):  # looked for where it says, nowhere else
        parent = os.path.dirname(ref)
        where = (f"(no such file in {parent})" if os.path.isdir(parent)
                 else f"(no directory {parent})")
    elif beside_of is not None:
        where = f"beside {shown_path(os.fspath(beside_of))} or {where}"
    names = sorted({os.path.normpath(Path(ref).parent / found.name) for base in dirs
                    for found in (base / ref).parent.glob("*.py")})
    close = difflib.get_close_matches(os.path.normpath(ref), names, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return UsageError(f"no scenario file {ref} {where}{hint}")


def load(ref: str) -> Scenario:
    """A scenario by shipped name, ``path/to/file.py`` or ``package.module``, or a
    ``@dst.test`` as ``path/to/test_file.py::test_name``."""
    known = shipped()
    if ref in known:
        return _from_module(known[ref], ref)
    if "::" in ref:
        return _named(ref)
    if ref.endswith(".py"):
        return _from_file(ref)
    if "." in ref:
        return _from_module(ref, ref)
    close = difflib.get_close_matches(ref, list(known), n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UsageError(
        f"unknown scenario {ref!r}; {hint}known: {', '.join(known) or 'none'} "
        "(or give a path to a .py file; see `dst list`)"
    )


def listed(ref: str) -> list[tuple[str, Scenario]]:
    """What ``dst list REF`` tells: the scenario ``ref`` names, by its name, or, for a
    file or module of ``@dst.test`` functions, each of them as ``REF::NAME``."""
    if "::" not in ref and not is_shipped(ref) and (ref.endswith(".py") or "." in ref):
        module = _file_module(ref) if ref.endswith(".py") else _import(ref, ref)
        tests = _tests_in(module)
        if tests and not isinstance(getattr(module, "scenario", None), Scenario):
            return [(f"{ref}::{name}", getattr(module, name).scenario) for name in tests]
    scenario = load(ref)
    return [(ref if "::" in ref else scenario.name, scenario)]


def all_scenarios(missing: dict[str, str] | None = None) -> list[Scenario]:
    """Every shipped scenario this environment can import.

    A shipped scenario that needs a library an install left out (the real-SDK
    agents need ``dst[agents]``) is left out too, and named in ``missing`` with the
    module it lacks, when given; with no ``missing``, its import error is raised."""
    out = []
    for name, module in shipped().items():
        if missing is not None:
            try:
                importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name and exc.name.split(".")[0] not in ("dst", _PACKAGE):
                    missing[name] = exc.name
                    continue
            except Exception:  # told as it is below
                pass
        out.append(_from_module(module, name))
    return out
