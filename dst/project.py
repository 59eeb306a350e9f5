"""What pytest sees of a project: its ini file, rootdir, ``pythonpath`` and import paths.

A test file imports what pytest put on ``sys.path`` for it: the ``pythonpath``
entries of the ini file (relative to that file: ``pythonpath = ["src"]`` of a
``src/`` layout) and, in pytest's default import mode (``prepend``), the
*basedir* of the test file and of each ``conftest.py`` above it (the first
directory up that is not a package: ``tests/`` for ``tests/test_x.py``, the
project root for ``tests/test_x.py`` when ``tests/__init__.py`` exists).
:func:`import_dirs` lists those directories, so that ``dst replay --scenario
tests/test_x.py::test_y`` (or ``dst run tests/test_x.py``) imports the file as
pytest did, from any working directory and with no ``PYTHONPATH``.

The ini file is found as pytest finds it, going up from a directory:
``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` with
``[tool.pytest.ini_options]``, ``tox.ini`` with ``[pytest]``, ``setup.cfg``
with ``[tool:pytest]``.  Only reading is done here: nothing is imported.
"""

from __future__ import annotations

import configparser
import os
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["IniFile", "find_ini", "import_dirs", "pin_dirs", "pytest_rootdir", "recorded_file"]

_INI_NAMES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
_SECTIONS = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest",
             "setup.cfg": "tool:pytest"}


@dataclass(frozen=True)
class IniFile:
    """pytest's ini file: where it is, and its options as written."""

    path: Path
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.path.parent

    def paths(self, name: str) -> list[Path]:
        """An option of pytest's ``paths`` type: each entry relative to the ini file."""
        value = self.options.get(name)
        if value is None:
            return []
        entries = shlex.split(value) if isinstance(value, str) else list(value)
        return [Path(os.path.normpath(self.dir / str(entry))) for entry in entries]


def _read(path: Path) -> dict[str, Any] | None:
    """The pytest options ``path`` holds, or None when it is no pytest ini file."""
    try:
        if path.name == "pyproject.toml":
            with path.open("rb") as f:
                doc = tomllib.load(f)
            options = doc.get("tool", {}).get("pytest", {}).get("ini_options")
            return dict(options) if isinstance(options, dict) else None
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(path, encoding="utf-8")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, configparser.Error):
        return None
    section = _SECTIONS[path.name]
    if parser.has_section(section):
        return dict(parser.items(section))
    return {} if path.name in ("pytest.ini", ".pytest.ini") else None


def find_ini(start: str | os.PathLike[str]) -> IniFile | None:
    """The ini file pytest would use for ``start`` (a directory), or None."""
    here = Path(os.path.abspath(start))
    for directory in (here, *here.parents):
        for name in _INI_NAMES:
            candidate = directory / name
            if candidate.is_file():
                options = _read(candidate)
                if options is not None:
                    return IniFile(candidate, options)
    return None


def pytest_rootdir(start: str | os.PathLike[str]) -> tuple[Path, IniFile | None]:
    """pytest's rootdir when it runs in ``start`` with no path given, and its ini file."""
    ini = find_ini(start)
    return (ini.dir if ini is not None else Path(os.path.abspath(start))), ini


def _basedir(path: Path) -> Path:
    """The directory pytest's ``prepend`` import mode puts on ``sys.path`` for ``path``:
    the parent of its top package, or its own directory when it is in no package."""
    directory = path.parent
    while (directory / "__init__.py").is_file() and directory.parent != directory:
        directory = directory.parent
    return directory


def import_dirs(file: str | os.PathLike[str]) -> list[Path]:
    """The directories pytest puts on ``sys.path`` before it imports the test ``file``,
    first the one it would find first: the file's basedir, those of the
    ``conftest.py`` files between the ini file's directory and the file (the
    nearest first), then the ini file's ``pythonpath`` entries."""
    path = Path(os.path.abspath(file))
    ini = find_ini(path.parent)
    top = ini.dir if ini is not None else path.parent
    conftests = []
    directory = path.parent
    while True:
        if (directory / "conftest.py").is_file():
            conftests.append(_basedir(directory / "conftest.py"))
        if directory == top or directory.parent == directory:
            break
        directory = directory.parent
    if top not in path.parents:  # the ini file is not above the file: no conftest walk
        conftests = []
    found = [_basedir(path), *conftests, *(ini.paths("pythonpath") if ini else [])]
    return list(dict.fromkeys(found))


def pin_dirs(start: str | os.PathLike[str]) -> tuple[list[Path], Path, IniFile | None]:
    """The directories whose pins a plain ``pytest`` run in ``start`` collects (its ini
    file's ``dst_traces``, else ``traces/regressions`` of its rootdir), the rootdir
    and the ini file."""
    rootdir, ini = pytest_rootdir(start)
    dirs = ini.paths("dst_traces") if ini is not None else []
    return (dirs or [rootdir / "traces" / "regressions"]), rootdir, ini


def recorded_file(recorded: str, trace_path: str | os.PathLike[str]) -> str | None:
    """The file a header's ``scenario_file`` names (relative to where ``dst run`` or pytest
    ran), as a path from the working directory, when it is found: relative to the
    working directory, else to the trace's directory or one above it.  Only looked
    at, for a replay line to show: never imported."""
    if os.path.isabs(recorded):
        return recorded if os.path.isfile(recorded) else None
    trace_dir = Path(os.path.abspath(trace_path)).parent
    for base in (Path.cwd(), trace_dir, *trace_dir.parents):
        candidate = base / recorded
        if candidate.is_file():
            return os.path.relpath(candidate)
    return None
