"""Finding scenarios: by name among the shipped ones, or by file or module path."""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

from .errors import UsageError
from .scenario import Scenario

_PACKAGE = "scenarios"


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
    module = importlib.import_module(module_name)
    return _scenario_of(module, shown)


def _scenario_of(module: object, shown: str) -> Scenario:
    scenario = getattr(module, "scenario", None)
    if not isinstance(scenario, Scenario):
        raise UsageError(f"{shown} has no module-level 'scenario = dst.Scenario(...)'")
    return scenario


#: Scenarios loaded from files, by (resolved path, sha256 of the source): a bulk
#: run loads its scenario once per chunk, and a file edited between two loads
#: (a replay after a change) must be executed afresh.
_FILE_CACHE: dict[tuple[str, str], Scenario] = {}


def _from_file(ref: str) -> Scenario:
    path = Path(ref)
    try:
        source = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"no scenario file {ref}") from None
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
    spec.loader.exec_module(module)
    scenario = _FILE_CACHE[key] = _scenario_of(module, ref)
    return scenario


def is_shipped(ref: str) -> bool:
    return ref in shipped()


def load(ref: str) -> Scenario:
    """A scenario by shipped name, ``path/to/file.py`` or ``package.module``."""
    known = shipped()
    if ref in known:
        return _from_module(known[ref], ref)
    if ref.endswith(".py"):
        return _from_file(ref)
    if "." in ref:
        try:
            return _from_module(ref, ref)
        except ModuleNotFoundError:
            raise UsageError(f"no module {ref} (is it on PYTHONPATH?)") from None
    close = difflib.get_close_matches(ref, list(known), n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UsageError(
        f"unknown scenario {ref!r}; {hint}known: {', '.join(known) or 'none'} "
        "(or give a path to a .py file; see `dst list`)"
    )


def all_scenarios() -> list[Scenario]:
    return [_from_module(m, n) for n, m in shipped().items()]
