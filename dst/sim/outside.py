"""The outside world as installed libraries see it inside a run: virtual time, seeded entropy.

The guard (``dst.sim.guard``) traps every read of the real world inside a run.
Who made the read decides what happens: the user's own code is refused (a
``Nondeterminism`` finding: the read is a bug in code written against ``Env``),
while an installed library's read is plumbing (an SDK stamping a request,
httpx's connection pool expiring a connection, a retry's jitter) and is answered
from the simulation instead, by the functions here:

* **Clocks.**  Wall clocks read :data:`EPOCH` plus the run's virtual seconds
  (``time.time``, ``time_ns``, ``datetime.now()``/``utcnow()``/``today()``,
  ``date.today()``, ``time.localtime()``/``gmtime()``/``ctime()``/``asctime()``/
  ``strftime(fmt)`` without a time); monotonic clocks (``monotonic``,
  ``perf_counter``, ``process_time``, ``thread_time`` and their ``_ns`` forms)
  read the virtual seconds themselves, as ``trio.current_time()`` and
  ``env.clock.now()`` do.  The virtual machine's local time zone is UTC.
* **Entropy.**  ``os.urandom``, ``os.getrandom``, ``random.SystemRandom`` (and
  ``secrets``, which draws through it), the global ``random`` module's
  functions, an unseeded ``random.Random()``, ``uuid.uuid1``/``uuid4``/
  ``getnode`` and ``os.getpid`` draw from generators seeded by the run's seed,
  the process and its incarnation (``dst/{seed}/{process}/{incarnation}/outside/
  {kind}``), one per kind, so an added ``uuid4()`` does not shift what
  ``random.random()`` returns.  Nothing is recorded: a replay of the same seed
  makes the same choices, so each process draws the same values in the same
  order.  Code outside any process (a scenario's ``setup``, its checks) draws
  as process ``-``.
* **Threads.**  ``trio.to_thread.run_sync`` runs its function inline, in a copy
  of the caller's context, as one step of the caller: a checkpoint before it (a
  cancellation already pending is raised there, as trio's does) and a
  cancel-shielded checkpoint after it, as trio's own waits for a thread that
  cannot be abandoned.  The function must not wait for another task (it would
  wait for ever: nothing else runs meanwhile) nor call back into trio with
  ``trio.from_thread`` (it raises: there is no thread).

Which code is the user's is decided per call by :class:`CodeOwners`, from the
first frame outside the standard library (``secrets.token_hex`` reads for
whoever called it), and declared per scenario (``Scenario(user_code=...,
strict=...)``); ``docs/scenarios.md`` ("Real libraries: what dst virtualises")
says what the default is and why.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import hashlib
import os
import random
import sysconfig
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import outcome
import trio

from .active import ACTIVE
from .seeding import SeededOnFirstUse
from .trio_internals import RUN_CONTEXT

#: The virtual wall clock's time 0: 2025-01-01T00:00:00Z.  A library's
#: ``time.time()`` reads ``EPOCH + virtual seconds``.
EPOCH = 1_735_689_600
_EPOCH_NS = EPOCH * 1_000_000_000

# The real functions, taken before the guard replaces them with its traps.
_GMTIME = time.gmtime
_ASCTIME = time.asctime
_STRFTIME = time.strftime
_DATETIME = _dt.datetime
_DATE = _dt.date
_UTC = _dt.UTC
_RANDOM_SEED = random.Random.seed
_CLOCK_REALTIME = getattr(time, "CLOCK_REALTIME", None)


# -- whose code --------------------------------------------------------------------------

#: Directories packages are installed in (site-packages, dist-packages).
_INSTALLED = tuple(sorted({
    os.path.realpath(sysconfig.get_paths()[key]) + os.sep for key in ("purelib", "platlib")
}))


def installed(path: str) -> bool:
    """Whether a source file was installed by a package manager (site- or dist-packages)."""
    real = os.path.realpath(path)
    return (real.startswith(_INSTALLED) or f"{os.sep}site-packages{os.sep}" in real
            or f"{os.sep}dist-packages{os.sep}" in real)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root.rstrip(os.sep) or path.startswith(root) for root in roots)


def _in_package(module: str, names: Iterable[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


#: dst's packages whose code is written against ``Env`` as a user's is, and whose
#: globals are part of the system under test: the runtime, fakes and agents it ships.
WRITTEN_AGAINST_ENV = ("dst.runtime", "dst.fakes", "dst.agents")


def dst_machinery(module: str) -> bool:
    """Whether ``module`` is dst's own machinery (the kernel, the small form's wrapper,
    the runners, the commands): nobody's line in a report and no state of the system
    under test, unlike dst's runtime, fakes and agents (:data:`WRITTEN_AGAINST_ENV`)."""
    return _in_package(module, ("dst",)) and not _in_package(module, WRITTEN_AGAINST_ENV)


class CodeOwners:
    """Which code is the user's (its reads of the real world are refused) and which is
    a library's (its reads are answered from the simulation).

    Without a declaration (``declared`` False) the user's code is the scenario's
    module and its top-level package, dst's own runtime, fakes and agents, and any
    code not installed by a package manager (the scenario's directory, a project's
    source tree, an editable install); code installed in site-packages is a
    library, even in a virtual environment under the scenario's directory.  With a
    declaration, the user's code is the scenario's module, dst's own, and exactly
    the modules (dotted names, each with its submodules) and paths (files, or
    directories with everything under them) declared; everything else is a
    library, wherever it lives.  ``strict=False``
    answers the user's reads from the simulation too.  The standard library is
    never the owner: a read is judged by the first frame outside it.
    """

    def __init__(self, *, origin: tuple[str, str] | None = None,
                 modules: Iterable[str] = (), paths: Iterable[str] = (),
                 declared: bool = False, strict: bool = True) -> None:
        self.declared = declared
        self.strict = strict
        self.modules = tuple(modules)
        self.paths = tuple(os.path.realpath(p) + (os.sep if os.path.isdir(p) else "")
                           for p in paths)
        self._origin_module: str | None = None
        self._origin_file: str | None = None
        if origin is not None:
            module, filename = origin
            self._origin_module = module
            if filename and not filename.startswith("<"):
                self._origin_file = os.path.realpath(filename)
        self._known: dict[tuple[str, str], bool] = {}

    def strict_for(self, module: str, filename: str) -> bool:
        """Whether a read of the real world made by this code is refused."""
        return self.strict and self.is_users(module, filename)

    def is_users(self, module: str, filename: str) -> bool:
        key = (module, filename)
        known = self._known.get(key)
        if known is None:
            known = self._known[key] = self._judge(module, filename)
        return known

    def _judge(self, module: str, filename: str) -> bool:
        if _in_package(module, ("dst",)):
            return True  # dst's runtime, fakes and agents: written against Env
        real = os.path.realpath(filename) if filename and not filename.startswith("<") else ""
        origin = self._origin_module
        if (origin is not None and module == origin) or (real and real == self._origin_file):
            return True
        if self.declared:
            return _in_package(module, self.modules) or bool(real and _under(real, self.paths))
        if origin is not None and origin != "__main__" and _in_package(
                module, (origin.partition(".")[0],)):
            return True
        if real and installed(real):
            return False  # even under the scenario's directory (a project's .venv)
        return True  # the scenario's directory, a source tree, an editable install


#: The rule of a run that declares none (a ``Sim`` built without a scenario).
DEFAULT_OWNERS = CodeOwners()


def owners_for(origin: tuple[str, str] | None, user_code: Iterable[str | os.PathLike[str]]
               | None, strict: bool) -> CodeOwners:
    """The rule a scenario declares: ``user_code`` entries that are paths (a
    ``PathLike``, or a string with a path separator or ending in ``.py``) are files or
    directories, relative ones to the scenario's directory; the rest are modules."""
    if user_code is None:
        return CodeOwners(origin=origin, strict=strict)
    base = Path(origin[1]).parent if origin is not None and origin[1] else Path.cwd()
    modules, paths = [], []
    for entry in user_code:
        if isinstance(entry, os.PathLike) or (isinstance(entry, str) and (
                "/" in entry or os.sep in entry or entry.endswith(".py"))):
            path = Path(entry)
            paths.append(str(path if path.is_absolute() else base / path))
        elif isinstance(entry, str) and entry:
            modules.append(entry)
        else:
            raise ValueError(f"Scenario(user_code=...) takes module names and paths, "
                             f"not {entry!r}")
    return CodeOwners(origin=origin, modules=modules, paths=paths, declared=True,
                      strict=strict)


# -- the run, its process, its generators -----------------------------------------------


def _sim() -> Any:
    return ACTIVE[-1]


def _now() -> float:
    # Through the clock's ``current_time``, as trio reads it: the explorer watches that
    # to know which steps read the time (``dst.explore.footprint.ClockTap``).
    clock = _sim()._clock
    return float(clock.current_time()) if clock is not None else 0.0


def state(sim: Any) -> tuple[Any, ...]:
    """What libraries' draws have left in ``sim`` so far, as a value (for the explorer's
    state keys): each generator's position, and the per-process values drawn."""
    drawn = sim._outside
    if not drawn:
        return ()
    out = []
    for key, value in sorted(drawn.items(), key=repr):
        if isinstance(value, random.Random):
            text = value.__dict__.get("_text")
            value = ("unused", text) if text is not None else hashlib.blake2b(
                repr(value.getstate()).encode(), digest_size=16).hexdigest()
        out.append((key, value))
    return tuple(out)


def _whose() -> tuple[str, int]:
    """The process (and incarnation) whose task runs now; ``("-", 0)`` outside any."""
    sim = _sim()
    task = getattr(RUN_CONTEXT, "task", None)
    inc = sim._incarnation_of.get(task) if task is not None else None
    return (inc.name, inc.number) if inc is not None else ("-", 0)


def generator(kind: str) -> random.Random:
    """The generator of ``kind`` for the process running now, in this run."""
    sim = _sim()
    rngs = sim._outside
    if rngs is None:
        rngs = sim._outside = {}
    name, number = _whose()
    key = (name, number, kind)
    rng: random.Random | None = rngs.get(key)
    if rng is None:
        rng = rngs[key] = SeededOnFirstUse(f"dst/{sim._seed}/{name}/{number}/outside/{kind}")
    return rng


# -- clocks ------------------------------------------------------------------------------


def wall() -> float:
    return EPOCH + _now()


def wall_ns() -> int:
    return _EPOCH_NS + round(_now() * 1_000_000_000)


def monotonic() -> float:
    return _now()


def monotonic_ns() -> int:
    return round(_now() * 1_000_000_000)


def clock_gettime(clk_id: int) -> float:
    return wall() if clk_id == _CLOCK_REALTIME else monotonic()


def clock_gettime_ns(clk_id: int) -> int:
    return wall_ns() if clk_id == _CLOCK_REALTIME else monotonic_ns()


def struct_time(*_: Any) -> time.struct_time:
    """``localtime()``/``gmtime()`` with no time given: the virtual time, in UTC."""
    return _GMTIME(wall())


def ctime(*_: Any) -> str:
    return _ASCTIME(_GMTIME(wall()))


def asctime(*_: Any) -> str:
    return _ASCTIME(_GMTIME(wall()))


def strftime(fmt: str, *_: Any) -> str:
    return _STRFTIME(fmt, _GMTIME(wall()))


def now(make: Any, tz: _dt.tzinfo | None = None) -> Any:
    """``make.now(tz)`` at the virtual time (a naive one in UTC, the virtual zone), for
    ``make`` the real ``datetime`` or a subclass of it."""
    if tz is None:
        return make.fromtimestamp(wall(), _UTC).replace(tzinfo=None)
    return make.fromtimestamp(wall(), tz)


def today() -> _dt.date:
    return _DATETIME.fromtimestamp(wall(), _UTC).date()


# -- entropy -----------------------------------------------------------------------------


def urandom(size: int, *_: Any) -> bytes:
    return generator("entropy").randbytes(size)


def system_random(name: str) -> Callable[..., Any]:
    """``SystemRandom.<name>`` (``random``, ``getrandbits``, ``randbytes``) drawing from
    the process's entropy generator; the instance it is called on is ignored."""

    def draw(_self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(generator("entropy"), name)(*args, **kwargs)

    return draw


def global_random(name: str) -> Callable[..., Any]:
    """The global ``random`` module's ``name`` on the process's own generator."""

    def draw(*args: Any, **kwargs: Any) -> Any:
        return getattr(generator("random"), name)(*args, **kwargs)

    return draw


def seed_random(self: random.Random, a: Any = None, version: int = 2) -> None:
    """An unseeded ``random.Random()`` (or ``seed()``): seeded from the process's generator."""
    _RANDOM_SEED(self, generator("random").getrandbits(128), version)


def uuid4() -> uuid.UUID:
    return uuid.UUID(bytes=generator("uuid").randbytes(16), version=4)


def getnode() -> int:
    """The virtual machine's node: a random 48-bit number with the multicast bit set
    (RFC 4122 4.5), the same for a process's incarnation throughout the run."""
    return _per_incarnation("node", lambda draw: draw.getrandbits(48) | (1 << 40))


def uuid1(node: int | None = None, clock_seq: int | None = None) -> uuid.UUID:
    """``uuid.uuid1`` from the virtual clock, as the standard library builds it."""
    sim = _sim()
    state = sim._outside
    if state is None:
        state = sim._outside = {}
    timestamp = wall_ns() // 100 + 0x01B21DD213814000
    last = state.get("uuid1-last")
    if last is not None and timestamp <= last:
        timestamp = last + 1
    state["uuid1-last"] = timestamp
    if clock_seq is None:
        clock_seq = generator("uuid").getrandbits(14)
    if node is None:
        node = getnode()
    fields = (timestamp & 0xFFFFFFFF, (timestamp >> 32) & 0xFFFF, (timestamp >> 48) & 0x0FFF,
              (clock_seq >> 8) & 0x3F, clock_seq & 0xFF, node)
    return uuid.UUID(fields=fields, version=1)


def getpid() -> int:
    """The process's virtual pid: drawn once per incarnation (a restart is a new one)."""
    return _per_incarnation("pid", lambda draw: draw.randrange(1000, 32768))


def _per_incarnation(kind: str, make: Callable[[SeededOnFirstUse], int]) -> int:
    """A value drawn once per process incarnation (``kind``: "node", "pid"), from a
    generator of its own seeded by the run, the process and the incarnation."""
    sim = _sim()
    kept = sim._outside
    if kept is None:
        kept = sim._outside = {}
    name, number = _whose()
    key = (name, number, kind)
    value = kept.get(key)
    if value is None:
        text = f"dst/{sim._seed}/{name}/{number}/outside/{kind}"
        value = kept[key] = make(SeededOnFirstUse(text))
    return int(value)


# -- threads -----------------------------------------------------------------------------


async def run_inline(sync_fn: Callable[..., Any], *args: Any, **_how: Any) -> Any:
    """``trio.to_thread.run_sync(sync_fn, *args, ...)``, with the function run here and now.

    The thread's options (``thread_name``, ``abandon_on_cancel``, ``limiter``) have
    nothing to act on: there is no thread, and nothing else runs meanwhile.
    """
    await trio.lowlevel.checkpoint_if_cancelled()
    result = outcome.capture(contextvars.copy_context().run, sync_fn, *args)
    await trio.lowlevel.cancel_shielded_checkpoint()
    return result.unwrap()
