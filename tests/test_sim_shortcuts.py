"""The kernel's shortcuts give what the long ways give: trio waits, seeded generators,
copies of values crossing ``Env``, and structlog events."""

from __future__ import annotations

import collections
import copy
import enum
import json
import pickle
import random
from typing import Any

import pytest
import structlog
import trio
import trio.testing

from dst import Env, Sim
from dst.sim.seeding import SeededOnFirstUse, seeded
from dst.sim.trio_internals import park, wake
from dst.sim.values import canonical_text, canonical_value, json_copy

from .simkit import events, inline, one

# -- trio: park and wake ---------------------------------------------------------------


def _abort_ok(_: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.SUCCEEDED


def test_a_parked_task_wakes_with_none_unseen_by_task_scheduled_instruments() -> None:
    seen: list[str] = []
    scheduled: list[str] = []

    class Watch(trio.abc.Instrument):
        def task_scheduled(self, task: trio.lowlevel.Task) -> None:
            scheduled.append(task.name.rsplit(".", 1)[-1])

    async def main() -> None:
        parked: list[trio.lowlevel.Task] = []

        async def sleeper() -> None:
            parked.append(trio.lowlevel.current_task())
            seen.append(f"woke with {await park(_abort_ok)!r}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper)
            await trio.testing.wait_all_tasks_blocked()
            scheduled.clear()
            wake(parked[0])
            await trio.testing.wait_all_tasks_blocked()
            assert "sleeper" not in scheduled

    trio.run(main, instruments=[Watch()])
    assert seen == ["woke with None"]


def test_a_parked_task_is_cancelled_and_rescheduled_with_errors_as_trio_does() -> None:
    seen: list[str] = []

    class Boom(Exception):
        pass

    async def main() -> None:
        parked: list[trio.lowlevel.Task] = []

        async def cancelled() -> None:
            with trio.CancelScope() as scope:
                parked.append(trio.lowlevel.current_task())
                scope.cancel()
                await park(_abort_ok)
            seen.append(f"cancelled: {scope.cancelled_caught}")

        async def failed() -> None:
            parked.append(trio.lowlevel.current_task())
            try:
                await park(_abort_ok)
            except Boom:
                seen.append("raised Boom")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancelled)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(failed)
            await trio.testing.wait_all_tasks_blocked()
            import outcome

            trio.lowlevel.reschedule(parked[-1], outcome.Error(Boom()))

    trio.run(main)
    assert seen == ["cancelled: True", "raised Boom"]


# -- generators seeded from text ----------------------------------------------------------


def _draws(rng: random.Random) -> list[Any]:
    items = list(range(10))
    rng.shuffle(items)
    return [rng.random(), rng.randint(0, 100), rng.choice("abcdef"), rng.gauss(0, 1),
            rng.sample(range(50), 5), rng.randbytes(5), rng.getrandbits(70),
            rng.choices("abc", k=3), items]


@pytest.mark.parametrize("first", ["random", "randint", "choice", "shuffle", "gauss",
                                   "getstate", "randbytes", "getrandbits", "expovariate"])
def test_a_generator_seeded_on_first_use_draws_what_random_random_of_its_text_does(
    first: str,
) -> None:
    text = "dst/7/worker-1/0"
    args: dict[str, tuple[Any, ...]] = {
        "randint": (0, 9), "choice": ("xyz",), "shuffle": ([1, 2, 3],), "gauss": (0, 1),
        "randbytes": (4,), "getrandbits": (33,), "expovariate": (1.0,)}
    lazy, eager = SeededOnFirstUse(text), random.Random(text)
    assert getattr(lazy, first)(*args.get(first, ())) == getattr(eager, first)(
        *args.get(first, ())) or first == "shuffle"
    assert type(lazy) is random.Random
    assert _draws(lazy) == _draws(eager)


def test_a_generator_seeded_on_first_use_copies_pickles_and_reseeds_like_random() -> None:
    text = "dst/7/worker-1/0"
    assert copy.deepcopy(SeededOnFirstUse(text)).random() == random.Random(text).random()
    assert pickle.loads(pickle.dumps(SeededOnFirstUse(text))).random() == \
        random.Random(text).random()
    reseeded = SeededOnFirstUse(text)
    reseeded.seed(7)
    assert reseeded.random() == random.Random(7).random()
    restored = SeededOnFirstUse(text)
    restored.setstate(random.Random(3).getstate())
    assert restored.random() == random.Random(3).random()


@pytest.mark.parametrize("text", ["dst-schedule/0", "dst-schedule/123456789", "é/x", ""])
def test_a_generator_seeded_at_once_has_the_state_of_random_random_of_its_text(
    text: str,
) -> None:
    assert seeded(text).getstate() == random.Random(text).getstate()


# -- values crossing Env ------------------------------------------------------------------


class _Level(enum.IntEnum):
    LOW = 1


class _Text(str):
    pass


@pytest.mark.parametrize("value", [
    {"b": [1, 2, (3, 4)], "a": {"d": None, "e": True, "f": 1.5, "g": -0.0}},
    [1, "x", 2.5, None, False], "text", 3, None, ("t", 1), "\ud800",
    {1: "int key"}, {"1": 1, 1: 2}, _Level.LOW, {"x": _Level.LOW}, _Text("q"),
    {_Text("k"): 1}, collections.OrderedDict(a=1), 1 << 3000,
    {"nan": float("nan"), "inf": float("-inf")},
])
def test_a_copied_value_is_what_the_json_round_trip_gives(value: Any) -> None:
    copied, round_trip = json_copy(value), json.loads(json.dumps(value))
    assert json.dumps(copied) == json.dumps(round_trip)
    assert type(copied) is type(round_trip)
    if isinstance(value, (dict, list)):
        assert copied is not value


@pytest.mark.parametrize("value", [{1, 2}, {"a": object()}, b"bytes"])
def test_a_value_json_refuses_is_refused_with_the_same_error(value: Any) -> None:
    with pytest.raises(TypeError) as ours:
        json_copy(value)
    with pytest.raises(TypeError) as theirs:
        json.dumps(value)
    assert str(ours.value) == str(theirs.value)


def test_a_circular_value_is_refused_as_json_refuses_it() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        json_copy(loop)


_TEXTS = [
    {"b": [1, 2, (3, 4)], "a": {"d": None, "e": True, "f": 1.5, "g": -0.0}},
    [1, "x", 2.5, None, False], "text", "é\ud800\n\"", _Text("q"), 3, None, ("t", 1), [], {},
    {1: "int key"}, {True: 1}, _Level.LOW, {"x": _Level.LOW}, collections.OrderedDict(b=1, a=2),
    1 << 3000, 1e300, -1e-300, {"deep": [[[[{"x": [1]}]]]]},
]


@pytest.mark.parametrize("value", _TEXTS)
def test_canonical_text_is_json_dumps_with_sorted_keys_and_no_spaces(value: Any) -> None:
    assert canonical_text(value) == json.dumps(value, sort_keys=True, separators=(",", ":"),
                                               allow_nan=False)


@pytest.mark.parametrize("value", [
    {"x": float("nan")}, float("inf"), {"a": object()}, {(1, 2): 3}, {1, 2}, b"bytes",
    {1: "keys that do not sort", "2": 2},
])
def test_canonical_text_refuses_what_json_dumps_refuses_with_the_same_error(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as ours:
        canonical_text(value)
    with pytest.raises((TypeError, ValueError)) as theirs:
        json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        canonical_text(loop)


@pytest.mark.parametrize("value", _TEXTS)
def test_a_canonical_text_reads_back_as_json_loads_reads_it(value: Any) -> None:
    text = canonical_text(value)
    ours, theirs = canonical_value(text), json.loads(text)
    assert json.dumps(ours) == json.dumps(theirs)
    assert type(ours) is type(theirs)


@pytest.mark.parametrize("text", ["", " 1", "1 ", "[1,", "{}x", "\ufeff1", "nan", "[1]]"])
def test_a_text_that_is_not_canonical_json_reads_as_json_loads_reads_it(text: str) -> None:
    try:
        theirs: Any = ("value", json.loads(text))
    except json.JSONDecodeError as exc:
        theirs = ("error", str(exc))
    try:
        ours: Any = ("value", canonical_value(text))
    except json.JSONDecodeError as exc:
        ours = ("error", str(exc))
    assert ours == theirs


# -- structlog ------------------------------------------------------------------------------


def test_bound_and_plain_loggers_record_the_same_fields_and_the_proxy_is_restored() -> None:
    plain = structlog.get_logger()
    bound = structlog.get_logger(service="s")  # initial values: structlog's own path
    before = dict(vars(structlog._config.BoundLoggerLazyProxy))

    def setup(sim: Sim, _: dict[str, Any]) -> Any:
        async def worker(env: Env) -> None:
            await env.store.get("x")
            plain.info("plain", n=1, items=[1, 2])
            bound.info("bound", n=2)
            plain.warning("warned")
            plain.msg("as info")
            plain.info("%s formatted", "positionally")

        sim.process("worker", worker, stores=["db"])

    told = events(one(inline(setup)))
    assert told == [
        ("worker", "plain", {"n": 1, "items": [1, 2]}),
        ("worker", "bound", {"service": "s", "n": 2}),
        ("worker", "warned", {"level": "warning"}),
        ("worker", "as info", {}),
        ("worker", "positionally formatted", {}),
    ]
    assert dict(vars(structlog._config.BoundLoggerLazyProxy)) == before
