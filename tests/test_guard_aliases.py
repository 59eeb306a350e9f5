"""Clock aliases of datetime bound at import are trapped inside a run like ``time.time``.

``NOW = datetime.datetime.now`` at a module's top level is a pre-bound alias
just as ``from time import time`` is: called inside a simulated run it must
stop the run with the built-in violation ``Nondeterminism`` and the same
message shape (the call, the user's file and line, what to use instead), not
slip through to be noticed only by ``--check-determinism``.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from dst import Env, NondeterminismError, Sim

from . import guarded_clock_aliases as aliases
from .simkit import inline, one

#: name -> (the user's call, what the message must name).
ALIASES: dict[str, tuple[Callable[[], object], str]] = {
    "NOW = datetime.datetime.now": (aliases.now, "datetime.datetime.now()"),
    "UTCNOW = datetime.datetime.utcnow": (aliases.utcnow, "datetime.datetime.utcnow()"),
    "TODAY = datetime.date.today": (aliases.today, "datetime.date.today()"),
    "DT_TODAY = DateTime.today": (aliases.datetime_today, "datetime.datetime.today()"),
    "DATE_TODAY = date.today": (aliases.date_today, "datetime.date.today()"),
}

#: The shape of every trapped call's message, ``time.time``'s included.
SHAPE = re.compile(r"(?P<what>\S+\(\)) called at (?P<file>.+):(?P<line>\d+) inside a "
                   r"simulated run; use (?P<instead>.+) instead")


def trapped(call: Callable[[], object]) -> tuple[list[str], str, str]:
    """Run ``call`` inside a simulated run: (violations, the violation's message, what the
    user's code caught)."""
    caught: list[str] = []

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def culprit(env: Env) -> None:
            await env.store.get("x")
            try:
                call()
            except NondeterminismError as err:
                caught.append(str(err))
                raise

        sim.process("culprit", culprit, stores=["db"])

    result = one(inline(setup))
    messages = [r["message"] for r in result.trace().records if r["type"] == "violation"]
    assert len(messages) == 1, messages
    assert len(caught) == 1
    return result.violated, messages[0], caught[0]


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_a_datetime_clock_alias_is_refused_as_time_time_is(name: str) -> None:
    call, what = ALIASES[name]
    violated, message, raised = trapped(call)
    reference_violated, reference, _ = trapped(lambda: time.time())

    assert violated == reference_violated == ["Nondeterminism"]
    assert raised == message  # the error the user's code sees is the violation's message
    got, want = SHAPE.fullmatch(message), SHAPE.fullmatch(reference)
    assert got is not None and want is not None, (message, reference)
    assert got["what"] == what
    assert got["file"].endswith("guarded_clock_aliases.py")  # the alias's caller, not dst
    assert got["instead"] == want["instead"] == "env.clock.now()"


def test_aliases_read_the_real_clock_outside_a_run_and_are_put_back() -> None:
    names = ("NOW", "UTCNOW", "TODAY", "DT_TODAY", "DATE_TODAY", "FROM_ISO")
    before = {name: getattr(aliases, name) for name in names}

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def fine(env: Env) -> None:
            await env.store.put("x", str(aliases.from_iso()))  # reads no clock: allowed

        sim.process("fine", fine, stores=["db"])

    assert one(inline(setup)).verdict == "pass"
    assert all(getattr(aliases, name) is before[name] for name in names)
    assert isinstance(aliases.now(), datetime.datetime)
    assert isinstance(aliases.today(), datetime.date)
