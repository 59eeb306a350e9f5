"""The scenario API: what a user writes to put their own code under dst.

A scenario declares its switches (defaults = the correct design), the planted
bugs (switch settings that reintroduce a known bug, with the invariants each
must break, so dst can check it still finds every bug it claims to), a
``setup`` that starts processes and fakes on a :class:`~dst.sim.kernel.Sim`
and returns the *world* (whatever the checks need to look at), and the
invariants (checked after every step) and end-of-run properties.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MethodType
from typing import Any, overload

from .errors import UsageError
from .sim.faults import NO_FAULTS, FaultPlan
from .sim.kernel import Sim
from .sim.outside import CodeOwners, owners_for
from .sim.state import DEFAULT_MAX_STEPS

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True)
class Switch:
    name: str
    default: Any
    choices: tuple[Any, ...] | None = None
    doc: str = ""

    @property
    def allowed(self) -> tuple[Any, ...] | None:
        if self.choices is not None:
            return self.choices
        if isinstance(self.default, bool):
            return (False, True)
        return None

    @property
    def kind(self) -> str:
        """The type of value the switch takes, as a user would name it."""
        return _KIND_NAMES.get(type(self.default), f"a {type(self.default).__name__}")

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` (typed, e.g. from a trace header) is a value of this switch.

        The type must be exactly the default's: ``True`` is not an integer and
        ``2.0`` is not one either, although Python compares them equal to ``1`` and
        ``2``; an integer is not a number for a float switch, because ``-c`` and
        the trace writer always give a float there.  A switch whose default is of
        another type also takes a string, which is what ``-c`` gives it.
        """
        expected = type(self.default)
        if expected in _KIND_NAMES:
            ok = type(value) is expected
        else:
            ok = type(value) is expected or type(value) is str
        if ok and isinstance(value, float) and not math.isfinite(value):
            return False
        return ok and (self.choices is None or value in self.choices)

    def describe_allowed(self) -> str:
        allowed = self.allowed
        if allowed is not None:
            return ", ".join(_show(v) for v in allowed)
        return f"any {type(self.default).__name__}"

    def parse(self, scenario: str, text: str) -> Any:
        """Turn the text of ``-c name=text`` into a value, or say what is allowed."""
        value: Any
        if isinstance(self.default, bool):
            low = text.strip().lower()
            if low in _TRUE:
                value = True
            elif low in _FALSE:
                value = False
            else:
                raise UsageError(
                    f"switch {self.name} of {scenario} takes true or false, not {text!r}"
                )
        elif isinstance(self.default, int):
            try:
                value = int(text)
            except ValueError:
                raise UsageError(
                    f"switch {self.name} of {scenario} takes an integer, not {text!r}"
                ) from None
        elif isinstance(self.default, float):
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not math.isfinite(value):  # a trace cannot hold NaN or infinity
                raise UsageError(
                    f"switch {self.name} of {scenario} takes a finite number, not {text!r}"
                )
        else:
            value = text
        if self.choices is not None and value not in self.choices:
            raise UsageError(
                f"switch {self.name} of {scenario} takes one of "
                f"{self.describe_allowed()}, not {text!r}"
            )
        return value


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


#: Switch types checked exactly, and how a message names each.
_KIND_NAMES: dict[type, str] = {
    bool: "true or false", int: "an integer", float: "a number", str: "a string",
}


def _found(value: Any) -> str:
    """``value`` and its JSON type, for a message: ``2.0 (a number)``, ``true (a boolean)``."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    kinds = {int: "an integer", float: "a number", str: "a string", type(None): "null",
             list: "a list", dict: "an object"}
    return f"{value!r} ({kinds.get(type(value), type(value).__name__)})"


@dataclass(frozen=True)
class PlantedBug:
    config: Mapping[str, Any]
    breaks: tuple[str, ...]
    doc: str = ""


Check = Callable[[Any], object]


@dataclass
class Scenario:
    """A named system under test with its switches, bugs and checks."""

    name: str
    doc: str
    faults: FaultPlan | Callable[[dict[str, Any]], FaultPlan] = NO_FAULTS
    max_steps: int = DEFAULT_MAX_STEPS
    switches: dict[str, Switch] = field(default_factory=dict)
    planted_bugs: list[PlantedBug] = field(default_factory=list)
    invariants: dict[str, Check] = field(default_factory=dict)
    end_checks: dict[str, Check] = field(default_factory=dict)
    eventual_checks: dict[str, tuple[Check, float]] = field(default_factory=dict)
    #: Coverage probes declared up front (:meth:`sometimes`), name -> what reaching it
    #: means: reported as never reached when no run calls ``dst.sometimes`` with them.
    probes: dict[str, str] = field(default_factory=dict)
    #: ``fn(world)`` naming the abstract state the system is in (see :meth:`fingerprint`).
    fingerprint_of: Check | None = None
    #: ``fn(world)`` naming the objects the processes share, an *exact* fingerprint:
    #: with the kernel's state and every task's memory it determines what the
    #: system does next (``@scenario.fingerprint(exact=True)``).
    state_of: Check | None = None
    _setup: Callable[[Sim, dict[str, Any]], Any] | None = None
    #: Which code is the user's: its reads of the real world (clocks, entropy,
    #: threads) inside a run are refused, while an installed library's get the
    #: simulation's values (``docs/scenarios.md``, "Real libraries").  None: the
    #: scenario's module, its package and directory, and code not installed in
    #: site-packages; else module names (with their submodules) and paths (files
    #: or directories, relative to the scenario's file), and nothing else.
    user_code: Sequence[str | os.PathLike[str]] | None = None
    #: False: the user's reads get the simulation's values too, instead of failing
    #: the run with ``Nondeterminism``.
    strict: bool = True

    # -- declaring -----------------------------------------------------------

    def switch(
        self, name: str, default: Any, *, choices: Sequence[Any] | None = None, doc: str = ""
    ) -> None:
        self.switches[name] = Switch(name, default, tuple(choices) if choices else None, doc)

    def planted_bug(self, config: Mapping[str, Any], breaks: Sequence[str], doc: str = "") -> None:
        for key in config:
            if key not in self.switches:
                raise ValueError(f"planted bug of {self.name} names unknown switch {key!r}")
        self.planted_bugs.append(PlantedBug(dict(config), tuple(breaks), doc))

    def sometimes(self, *names: str, doc: str = "") -> None:
        """Declare coverage probes: each must be reached (``dst.sometimes(True, name)``
        in some run) or the run summary lists it as never reached.

        A probe ``dst.sometimes`` calls is declared by the call itself, so a probe
        whose code no run ever executes would go unreported; declared here, it is
        reported however far the runs got.  ``doc`` says what reaching it means.
        """
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"a probe of {self.name} is named by a non-empty string, "
                                 f"not {name!r}")
            self.probes[name] = doc

    def setup(
        self, fn: Callable[[Sim, dict[str, Any]], Any]
    ) -> Callable[[Sim, dict[str, Any]], Any]:
        """Decorator: ``fn(sim, config) -> world`` starts the system."""
        self._setup = fn
        return fn

    def invariant(self, name: str) -> Callable[[Check], Check]:
        """Decorator: ``fn(world)`` checked after every step (True holds; False/str breaks)."""

        def register(fn: Check) -> Check:
            self.invariants[name] = fn
            return fn

        return register

    def at_end(self, name: str) -> Callable[[Check], Check]:
        """Decorator: ``fn(world)`` checked once, when the run reaches quiescence."""

        def register(fn: Check) -> Check:
            self.end_checks[name] = fn
            return fn

        return register

    def eventually(self, name: str, *, within: float) -> Callable[[Check], Check]:
        """Decorator: ``fn(world)`` must hold within ``within`` virtual seconds after the
        faults stop, whether or not the system ever comes to rest (see ``Sim.eventually``)."""
        if within <= 0:
            raise ValueError(f"eventually({name!r}) needs within > 0 seconds, not {within!r}")

        def register(fn: Check) -> Check:
            self.eventual_checks[name] = (fn, float(within))
            return fn

        return register

    @overload
    def fingerprint(self, fn: Check) -> Check: ...

    @overload
    def fingerprint(self, *, exact: bool = False) -> Callable[[Check], Check]: ...

    def fingerprint(self, fn: Check | None = None, *,
                    exact: bool = False) -> Check | Callable[[Check], Check]:
        """Decorator: ``fn(world)`` returns a value naming the state the system is in.

        ``@scenario.fingerprint``: an abstraction, a JSON value or a hashable of
        tuples, frozensets, strings and numbers, the same for the same state in
        every process.  Tools that count or compare the states a search went
        through use it (``dst run`` takes it at every step).  ``dst explore
        --prune-states`` goes further and skips a state it has explored before,
        which is sound only when the value, with the stores, the network, the
        enabled options and the memory of every task (which the explorer reads
        off the tasks' frames), determines everything the system will do next.

        ``@scenario.fingerprint(exact=True)`` declares that it does: ``fn``
        returns the objects shared outside processes and their stores (fakes,
        probes, screens; any Python objects, read in full), and ``dst explore``
        then skips explored states by default.  An exact fingerprint is a state,
        not an abstraction, so ``dst run`` does not count it (see
        ``docs/design.md``, "States", for what it must cover).
        """

        def register(fn: Check) -> Check:
            if exact:
                self.state_of = fn
            else:
                self.fingerprint_of = fn
            return fn

        return register(fn) if fn is not None else register

    # -- using ------------------------------------------------------------------

    @property
    def all_checks(self) -> list[str]:
        return [*self.invariants, *self.end_checks, *self.eventual_checks]

    def default_config(self) -> dict[str, Any]:
        return {name: s.default for name, s in self.switches.items()}

    def config(self, overrides: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The full config: defaults with ``overrides`` (text from ``-c``) parsed in."""
        config = self.default_config()
        for key, text in (overrides or {}).items():
            switch = self.switches.get(key)
            if switch is None:
                raise self._no_switch(key)
            config[key] = switch.parse(self.name, text)
        return config

    def _no_switch(self, key: str) -> UsageError:
        """The error for a switch this scenario lacks: its switches, and a near name."""
        known = sorted(self.switches)
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return UsageError(f"{self.name} has no switch {key!r}; {hint}"
                          f"switches: {', '.join(known) or 'none'}")

    def checked_config(self, config: Mapping[str, Any], *,
                       from_trace: bool = True) -> dict[str, Any]:
        """Validate an already typed config (from a trace header, or with ``from_trace``
        false from code: ``check_seeds``, the pytest marker, ``runs()``); missing
        switches default.

        Each value is checked against its switch's type exactly (see
        :meth:`Switch.accepts`), so that a replay runs the scenario with the
        values ``dst run`` would have given it, or not at all: ``"workers": 2.0``
        passes ``== 2`` but makes ``range(workers)`` fail deep inside the setup.
        """
        full = self.default_config()
        for key, value in config.items():
            switch = self.switches.get(key)
            if switch is None:
                if from_trace:
                    raise UsageError(f"{self.name} has no switch {key!r} (the trace names it)")
                raise self._no_switch(key)
            if not switch.accepts(value):
                allowed = switch.allowed
                what = switch.kind if allowed is None or isinstance(switch.default, bool) \
                    else f"{switch.kind}, one of {switch.describe_allowed()}"
                why = ("the trace names it: replay a trace dst wrote for this scenario"
                       if from_trace else "give it a value of that type")
                raise UsageError(
                    f"switch {key} of {self.name} takes {what}, not {_found(value)}; {why}"
                )
            full[key] = value
        return full

    def fault_plan(self, config: Mapping[str, Any]) -> FaultPlan:
        return self.faults(dict(config)) if callable(self.faults) else self.faults

    def code_owners(self) -> CodeOwners:
        """Which code is the user's in this scenario's runs (see ``user_code``)."""
        user = self.user_code
        key = (_origin(self._setup), None if user is None else tuple(map(str, user)),
               self.strict)
        owners = _OWNERS.get(key)
        if owners is None:
            owners = _OWNERS[key] = owners_for(key[0], user, self.strict)
        return owners

    def build(self, sim: Sim, config: Mapping[str, Any]) -> Any:
        """Start the system on ``sim`` and register the checks against its world."""
        if self._setup is None:
            raise UsageError(f"scenario {self.name} has no @scenario.setup function")
        sim.code_owners = self.code_owners()
        world = self._setup(sim, config if isinstance(config, dict) else dict(config))
        bind = _binder(world)
        for name, fn in self.invariants.items():
            sim.invariant(name, bind(fn, world))
        for name, fn in self.end_checks.items():
            sim.at_end(name, bind(fn, world))
        for name, (fn, within) in self.eventual_checks.items():
            sim.eventually(name, bind(fn, world), within)
        if self.fingerprint_of is not None:
            # Taken at every step, so that `dst run` can count the distinct states.
            from .coverage import watch_states

            watch_states(sim, self.name, bind(self.fingerprint_of, world))
        return world


#: Each scenario's rule, by where it lives and what it declares (made once per process).
_OWNERS: dict[tuple[Any, ...], CodeOwners] = {}


def _origin(setup: Callable[..., Any] | None) -> tuple[str, str] | None:
    """Where the scenario lives: its ``setup``'s module and file."""
    code = getattr(setup, "__code__", None)
    module = getattr(setup, "__module__", None)
    if code is None or not isinstance(module, str):
        return None
    return module, code.co_filename


def _binder(world: Any) -> Callable[[Check, Any], Callable[[], object]]:
    """What makes ``fn(world)`` a callable of no arguments, called after every step.

    A bound method, not a lambda or a partial: its call adds no Python frame,
    and it is the cheapest such callable both to make (once per check per seed)
    and to call.  A method cannot be bound to None, so a world of None gets
    partials.
    """
    return functools.partial if world is None else MethodType
