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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import UsageError
from .sim.faults import NO_FAULTS, FaultPlan
from .sim.kernel import DEFAULT_MAX_STEPS, Sim

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
                raise UsageError(
                    f"switch {self.name} of {scenario} takes a number, not {text!r}"
                ) from None
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
    _setup: Callable[[Sim, dict[str, Any]], Any] | None = None

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

    # -- using ------------------------------------------------------------------

    @property
    def all_checks(self) -> list[str]:
        return [*self.invariants, *self.end_checks]

    def default_config(self) -> dict[str, Any]:
        return {name: s.default for name, s in self.switches.items()}

    def config(self, overrides: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The full config: defaults with ``overrides`` (text from ``-c``) parsed in."""
        config = self.default_config()
        for key, text in (overrides or {}).items():
            switch = self.switches.get(key)
            if switch is None:
                known = sorted(self.switches)
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                raise UsageError(
                    f"{self.name} has no switch {key!r}; {hint}"
                    f"switches: {', '.join(known) or 'none'}"
                )
            config[key] = switch.parse(self.name, text)
        return config

    def checked_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Validate an already typed config (from a trace header)."""
        full = self.default_config()
        for key, value in config.items():
            switch = self.switches.get(key)
            if switch is None:
                raise UsageError(f"{self.name} has no switch {key!r} (the trace names it)")
            allowed = switch.allowed
            if allowed is not None and value not in allowed:
                raise UsageError(
                    f"switch {key} of {self.name} takes {switch.describe_allowed()}, "
                    f"not {value!r} (the trace names it)"
                )
            full[key] = value
        return full

    def fault_plan(self, config: Mapping[str, Any]) -> FaultPlan:
        return self.faults(dict(config)) if callable(self.faults) else self.faults

    def build(self, sim: Sim, config: Mapping[str, Any]) -> Any:
        """Start the system on ``sim`` and register the checks against its world."""
        if self._setup is None:
            raise UsageError(f"scenario {self.name} has no @scenario.setup function")
        world = self._setup(sim, config if isinstance(config, dict) else dict(config))
        for name, fn in self.invariants.items():
            sim.invariant(name, _bind(fn, world))
        for name, fn in self.end_checks.items():
            sim.at_end(name, _bind(fn, world))
        return world


def _bind(fn: Check, world: Any) -> Callable[[], object]:
    return lambda: fn(world)
