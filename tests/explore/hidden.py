"""Small scenarios whose tasks share state the explorer must not miss.

Each builds one order bug: a reader task and a writer task each park at a choice
point that touches nothing the other touches (a read of its own store key); the
writer then sets a shared value, the reader reads it and stores what it saw.  The
invariant breaks when the reader runs after the writer; ``dst run`` finds it in
about half the seeds, and a search that takes the two steps as independent tries
only the order that passes.  The value lives where the explorer cannot see it from the tasks' frames
alone: in a module global, a class attribute, a function attribute, a mutable
default argument, a dict two tasks inherit through a ``ContextVar``, a field a class
leaves out of ``__getstate__``, an object from a module named ``loggingbox``, or a
dict two *processes* share.
"""

from __future__ import annotations

import builtins
import contextvars
import enum
import functools
import importlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

import trio

from dst import Env, FaultPlan, Scenario, Sim

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "mods"))

KINDS = ("global", "class_attr", "func_attr", "default_arg", "contextvar", "named",
         "getstate", "loggingbox", "plainbox", "processes", "cache", "local_class",
         "local_module", "environ", "logger", "store_attr", "enum_attr", "builtins",
         "sys_attr", "generator")

COUNT = 0


class Holder:
    count = 0


def bump() -> None:
    pass


bump.count = 0  # type: ignore[attr-defined]


def tally(box: list[int] = [0]) -> list[int]:  # noqa: B006 - the shared default is the point
    return box


@functools.cache
def session() -> dict[str, int]:
    return {"count": 0}


class Mode(enum.Enum):
    A = 1


def stepper() -> Iterator[int]:
    for _ in (None, None):
        yield 0


SHARED: contextvars.ContextVar[dict[str, int]] = contextvars.ContextVar("shared")


class Hidden:
    """Leaves ``count`` out of what pickle sees."""

    def __init__(self) -> None:
        self.count = 0
        self.name = "hidden"

    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name}


def reset() -> None:
    global COUNT
    COUNT = 0
    Holder.count = 0
    bump.count = 0  # type: ignore[attr-defined]
    tally()[0] = 0
    session.cache_clear()
    os.environ["DST_HIDDEN"] = "0"
    logging.getLogger("dst.hidden").setLevel(logging.INFO)
    Mode.A.box = [0]  # type: ignore[attr-defined]
    builtins.DST_HIDDEN = 0  # type: ignore[attr-defined]
    sys.dst_hidden = {"count": 0}  # type: ignore[attr-defined]


def build(kind: str) -> Scenario:
    """The lost-update scenario with the shared value kept as ``kind`` says."""
    scenario = Scenario(f"hidden_{kind}", doc=f"a lost update through {kind}",
                        faults=FaultPlan(preemptions=0))

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        reset()
        db = sim.store("db")
        named = {"count": 0}
        hidden = Hidden()
        box = importlib.import_module(kind).Box() if kind.endswith("box") else None

        class Local:
            count = 0

        hmod = importlib.import_module("hmod")
        hmod.COUNT = 0
        gen = stepper() if kind == "generator" else iter((0, 0))
        next(gen)

        def read() -> int:
            if kind == "global":
                return COUNT
            if kind == "class_attr":
                return Holder.count
            if kind == "func_attr":
                return bump.count  # type: ignore[attr-defined,no-any-return]
            if kind == "default_arg":
                return tally()[0]
            if kind == "contextvar":
                return SHARED.get({"count": -1})["count"]
            if kind in ("named", "processes"):
                return named["count"]
            if kind == "getstate":
                return hidden.count
            if kind == "cache":
                return session()["count"]
            if kind == "local_class":
                return Local.count
            if kind == "local_module":
                return int(hmod.COUNT)
            if kind == "environ":
                return int(os.environ["DST_HIDDEN"])
            if kind == "logger":
                return int(logging.getLogger("dst.hidden").level == logging.DEBUG)
            if kind == "store_attr":
                return int(getattr(db, "flag", 0))
            if kind == "enum_attr":
                return int(Mode.A.box[0])  # type: ignore[attr-defined]
            if kind == "builtins":
                return int(builtins.DST_HIDDEN)  # type: ignore[attr-defined]
            if kind == "sys_attr":
                return int(sys.dst_hidden["count"])  # type: ignore[attr-defined]
            if kind == "generator":
                return next(gen, 1)
            assert box is not None
            return int(box.value)

        def write(value: int) -> None:
            global COUNT
            if kind == "global":
                COUNT = value
            elif kind == "class_attr":
                Holder.count = value
            elif kind == "func_attr":
                bump.count = value  # type: ignore[attr-defined]
            elif kind == "default_arg":
                tally()[0] = value
            elif kind == "contextvar":
                SHARED.get()["count"] = value
            elif kind in ("named", "processes"):
                named["count"] = value
            elif kind == "getstate":
                hidden.count = value
            elif kind == "cache":
                session()["count"] = value
            elif kind == "local_class":
                Local.count = value
            elif kind == "local_module":
                hmod.COUNT = value
            elif kind == "environ":
                os.environ["DST_HIDDEN"] = str(value)
            elif kind == "logger":
                logging.getLogger("dst.hidden").setLevel(logging.DEBUG)
            elif kind == "store_attr":
                db.flag = value  # type: ignore[attr-defined]
            elif kind == "enum_attr":
                Mode.A.box[0] = value  # type: ignore[attr-defined]
            elif kind == "builtins":
                builtins.DST_HIDDEN = value  # type: ignore[attr-defined]
            elif kind == "sys_attr":
                sys.dst_hidden["count"] = value  # type: ignore[attr-defined]
            elif kind == "generator":
                next(gen, None)
            else:
                assert box is not None
                box.value = value

        async def reader(env: Env) -> None:
            await env.store.get("reader/1")
            seen = read()
            await env.store.put("saw", seen)

        async def writer(env: Env) -> None:
            await env.store.get("writer/1")
            write(1)
            await env.store.get("writer/2")

        ctx = {"count": 0}
        if kind == "contextvar":
            SHARED.set(ctx)  # the processes' tasks inherit it

        async def main(env: Env) -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader, env, name="reader")
                nursery.start_soon(writer, env, name="writer")

        if kind == "processes":
            sim.process("a", reader, stores=["db"])
            sim.process("b", writer, stores=["db"])
        else:
            sim.process("p", main, stores=["db"])
        return {"read": read, "db": db, "named": named, "ctx": ctx}

    @scenario.invariant("ReaderSawNoWrite")
    def saw_nothing(world: Any) -> Any:
        saw = world["db"].peek("saw")
        return saw in (None, 0) or "the reader saw the writer's value"

    @scenario.fingerprint(exact=True)
    def state(world: Any) -> Any:
        return world["named"]

    return scenario
