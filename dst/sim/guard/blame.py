"""Whom a trapped call is charged to: which code counts as the user's, which is exempt
(trio, dst's own machinery, the test runner) or a library's, and the refusal that voids
the run and names the user's line.  See :mod:`dst.sim.guard` for the design."""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from typing import NoReturn

from ...errors import NondeterminismError
from .. import outside
from ..kernel import ACTIVE

#: Top-level packages and subpackages whose calls are let through: trio runs the
#: simulation, and the libraries dst is made of read nothing a run observes.
#: Matched by exact name or at a dot boundary: ``trio_x`` or ``outcomes`` are user code.
_EXEMPT = frozenset({
    "trio", "outcome", "sniffio", "structlog", "click", "hypothesis", "_hypothesis_globals",
    "_hypothesis_pytestplugin", "_hypothesis_ftz_detector", "_pytest", "pytest", "pluggy",
    "coverage", "dst.sim", "dst.trace", "dst.runner", "dst.explore", "dst.cli",
})

_EXEMPT_CACHE: dict[str, bool] = {}


def _exempt(module: str) -> bool:
    known = _EXEMPT_CACHE.get(module)
    if known is None:
        name = module
        while name not in _EXEMPT:
            dot = name.rfind(".")
            if dot < 0:
                break
            name = name[:dot]
        known = _EXEMPT_CACHE[module] = name in _EXEMPT
    return known


_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep
#: Third-party packages installed next to the standard library are not part of it.
_SITE = tuple(
    {os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")}
)

_IN_STDLIB: dict[str, bool] = {}
#: ``os.path.realpath`` of each directory asked about: a few dozen directories hold
#: the hundreds of modules a process has loaded when the guard is first installed.
_REAL_DIRS: dict[str, str] = {}


def _realpath(path: str) -> str:
    """``os.path.realpath(path)``, resolving each directory once (a file that is not a
    symbolic link resolves to its resolved directory and its own name)."""
    head, tail = os.path.split(path)
    if not os.path.isabs(head) or tail in ("", ".", "..") or os.path.islink(path):
        return os.path.realpath(path)
    real = _REAL_DIRS.get(head)
    if real is None:
        real = _REAL_DIRS[head] = os.path.realpath(head)
    return os.path.join(real, tail)


def _in_stdlib(path: str) -> bool:
    """Whether a source file belongs to the standard library (memoized: realpath is slow)."""
    known = _IN_STDLIB.get(path)
    if known is None:
        if path.startswith("<"):
            # Frozen stdlib modules and generated code (``<string>``, attrs'
            # ``__init__``) speak for whoever called them.
            known = True
        else:
            real = _realpath(path)
            known = (real.startswith(_STDLIB) and not real.startswith(_SITE)
                     and "site-packages" not in real)
        _IN_STDLIB[path] = known
    return known


def _module_of(frame: types.FrameType) -> str:
    name = frame.f_globals.get("__name__")
    return name if isinstance(name, str) else "?"


def _culprit(
    frame: types.FrameType | None, entry_point: bool
) -> tuple[types.FrameType, types.FrameType | None] | None:
    """Whom to blame for a trapped call: (their frame, the frame they called), or None.

    The first caller outside the standard library decides: a stdlib helper
    (``secrets.token_hex``, ``email.utils.formatdate``) reads the real world on
    behalf of whoever called it.  None means the call is let through: an exempt
    library made it, and it is not an entry point, or ``platform`` asks the machine's
    processor (``_processor_probe``).  For an entry point the blame
    walks on past trio to the user's code (``AsyncIOWrapper.read`` is trio
    calling ``to_thread.run_sync`` for the user).
    """
    direct = frame
    inner: types.FrameType | None = None
    while frame is not None and _in_stdlib(frame.f_code.co_filename):
        if _processor_probe(frame.f_code):
            return None
        inner, frame = frame, frame.f_back
    if frame is not None and _exempt(_module_of(frame)):
        if not entry_point:
            return None
        while frame is not None and (
            _in_stdlib(frame.f_code.co_filename) or _exempt(_module_of(frame))
        ):
            inner, frame = frame, frame.f_back
    if frame is None:  # nothing but the stdlib and exempt code: blame the direct caller
        assert direct is not None
        return direct, None
    return frame, inner


def _virtualised(frame: types.FrameType, libraries_only: bool = False) -> bool:
    """Whether a read blamed on ``frame`` gets the simulation's value instead of being
    refused: a library's read, or (unless ``libraries_only``) any read under a scenario
    that is not strict."""
    owners = ACTIVE[-1].code_owners or outside.DEFAULT_OWNERS
    module, filename = _module_of(frame), frame.f_code.co_filename
    if libraries_only:
        return not owners.is_users(module, filename)
    return not owners.strict_for(module, filename)


def _asked_by(frame: types.FrameType) -> types.FrameType | None:
    """The user's own line a library was running for when it made a refused call (the
    agent's ``stdio_client(...)`` under the MCP SDK's ``open_process``), or None when
    ``frame`` is the user's already.  dst's own machinery (the kernel, the runners) is
    nobody's line; its runtime, fakes and agents are code written against ``Env``."""
    owners = (ACTIVE[-1].code_owners if ACTIVE else None) or outside.DEFAULT_OWNERS
    at: types.FrameType | None = frame
    while at is not None:
        module, filename = _module_of(at), at.f_code.co_filename
        if (not outside.dst_machinery(module) and not _in_stdlib(filename)
                and owners.is_users(module, filename)):
            return None if at is frame else at
        at = at.f_back
    return None


def _file(frame: types.FrameType) -> str:
    """A frame's file by name, as every other finding shows it (the same in any checkout
    and working directory, so a trace replays there); a package's ``__init__.py`` with
    its package's directory."""
    path = frame.f_code.co_filename
    name = os.path.basename(path)
    if name == "__init__.py":
        return f"{os.path.basename(os.path.dirname(path))}/{name}"
    return name


def _fire(
    what: str, instead: str, frame: types.FrameType, inner: types.FrameType | None
) -> NoReturn:
    """Void the active run, then raise: ``except Exception`` cannot turn it back into a pass."""
    via = f" (through {_module_of(inner)})" if inner is not None else ""
    mine = _asked_by(frame)
    if mine is not None:
        via += f", from {_file(mine)}:{mine.f_lineno} in {mine.f_code.co_name},"
    message = (
        f"{what} called at {_file(frame)}:{frame.f_lineno}{via} inside a simulated run; "
        f"use {instead} instead"
    )
    if ACTIVE:
        ACTIVE[-1].trapped(message)
    raise NondeterminismError(message)


def refuse(what: str, instead: str, frame: types.FrameType) -> NoReturn:
    """Refuse a call made at ``frame`` (on a library's stand-in socket, ``dst.sim.sockets.
    stdlib``) as a trap refuses one, blaming the first code past the stdlib and trio."""
    blame = _culprit(frame, True)
    assert blame is not None  # an entry point always has someone to blame
    _fire(what, instead, *blame)


def _processor_probe(code: types.CodeType) -> bool:
    """Whether ``code`` is ``platform``'s own ``uname -p`` (what ``uname().processor`` runs).

    ``platform.uname().processor`` runs ``uname -p`` in a subprocess the first time
    it is asked (``platform.platform()`` asks it), and keeps the answer: one more
    constant of the machine, as ``platform.machine()`` already is.  An SDK computing
    its platform headers inside a run (openai's ``get_platform``, in a worker thread
    that runs inline) gets it, rather than the refusal of a subprocess that anyone
    else asking for one gets; asked when first needed, it costs a run that never
    asks nothing (it used to be asked at every first install: a fork and an exec).
    """
    if not _PROBE:
        found = getattr(getattr(sys.modules.get("platform"), "_Processor", None),
                        "from_subprocess", None)
        if found is None:
            return False
        _PROBE.append(found.__code__)
    return code is _PROBE[0]


#: The code of ``platform._Processor.from_subprocess``, once platform is imported.
_PROBE: list[types.CodeType] = []
