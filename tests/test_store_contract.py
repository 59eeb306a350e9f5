"""The Store contract of dst.env, checked against every real store.

One suite, parametrized over the stores, so that the stores cannot drift apart:
whatever a test here says of one store it says of all of them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import trio

from dst.env import Json, Store
from dst.runtime.store import MemoryStore, SQLiteStore, _prefix_upper_bound


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return trio.run(fn)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        with SQLiteStore(tmp_path / "store.db") as s:
            yield s


def test_get_of_a_missing_key_is_none(store: Store) -> None:
    assert run(lambda: store.get("nope")) is None


def test_put_then_get_round_trips_nested_json(store: Store) -> None:
    value: Json = {"b": [1, 2.5, "x", None, True, {"c": []}], "a": {"é": "ü", "n": -3}}

    async def main() -> Any:
        await store.put("k", value)
        return await store.get("k")

    assert run(main) == value


def test_put_overwrites_the_previous_value(store: Store) -> None:
    async def main() -> Any:
        await store.put("k", 1)
        await store.put("k", [2])
        return await store.get("k")

    assert run(main) == [2]


def test_cas_writes_only_when_the_expected_value_matches(store: Store) -> None:
    async def main() -> None:
        assert await store.cas("k", None, {"v": 1})  # None means absent
        assert not await store.cas("k", None, {"v": 2})  # no longer absent
        assert not await store.cas("k", {"v": 9}, {"v": 3})
        assert await store.get("k") == {"v": 1}
        assert await store.cas("k", {"v": 1}, {"v": 4})
        assert await store.get("k") == {"v": 4}
        assert not await store.cas("missing", {"v": 4}, 1)
        assert await store.get("missing") is None

    run(main)


def test_cas_compares_json_values_not_dict_order(store: Store) -> None:
    async def main() -> None:
        await store.put("k", {"a": 1, "b": 2})
        assert await store.cas("k", {"b": 2, "a": 1}, "next")
        assert await store.get("k") == "next"

    run(main)


def test_cas_tells_numbers_and_booleans_apart(store: Store) -> None:
    async def main() -> None:
        await store.put("k", 1)
        assert not await store.cas("k", True, 2)
        assert not await store.cas("k", 1.0, 2)
        assert await store.cas("k", 1, 2)

    run(main)


def test_storing_none_means_the_key_is_absent(store: Store) -> None:
    async def main() -> None:
        await store.put("a", 1)
        await store.put("a", None)
        assert await store.scan("") == []
        await store.put("b", 1)
        assert await store.cas("b", 1, None)
        assert await store.scan("") == []
        assert await store.cas("b", None, 2)

    run(main)


def test_delete_removes_the_key_and_ignores_a_missing_one(store: Store) -> None:
    async def main() -> None:
        await store.put("k", 1)
        await store.delete("k")
        await store.delete("never-there")
        assert await store.get("k") is None
        assert await store.scan("") == []

    run(main)


def test_scan_returns_the_keys_with_the_prefix_sorted_and_nothing_else(
    store: Store,
) -> None:
    async def main() -> None:
        for key in ["b", "ab", "a/2", "a/1", "a"]:
            await store.put(key, key.upper())
        assert await store.scan("a/") == [("a/1", "A/1"), ("a/2", "A/2")]
        assert await store.scan("a") == [
            ("a", "A"),
            ("a/1", "A/1"),
            ("a/2", "A/2"),
            ("ab", "AB"),
        ]
        assert [k for k, _ in await store.scan("")] == ["a", "a/1", "a/2", "ab", "b"]
        assert await store.scan("c") == []

    run(main)


def test_scan_bounds_hold_for_characters_beyond_the_basic_plane(store: Store) -> None:
    keys = ["p\uffff", "p\U0001f600", "p\U0010ffff", "q", "p\U0010ffffz", "o\U0010ffff"]

    async def main() -> None:
        for key in keys:
            await store.put(key, 0)
        assert [k for k, _ in await store.scan("p")] == sorted(
            k for k in keys if k[0] == "p"
        )
        assert [k for k, _ in await store.scan("p\U0010ffff")] == [
            "p\U0010ffff",
            "p\U0010ffffz",
        ]
        assert [k for k, _ in await store.scan("\U0010ffff")] == []

    run(main)


def test_the_prefix_upper_bound_is_the_successor_string() -> None:
    assert _prefix_upper_bound("a/") == "a0"
    assert _prefix_upper_bound("a\U0010ffff") == "b"
    assert _prefix_upper_bound("\U0010ffff") is None
    assert _prefix_upper_bound("") is None
    assert _prefix_upper_bound("\ud7ff") == "\ue000"


def test_returned_values_do_not_alias_the_stored_ones(store: Store) -> None:
    async def main() -> None:
        value: dict[str, Any] = {"list": [1]}
        await store.put("k", value)
        value["list"].append("changed by the writer")
        got: Any = await store.get("k")
        assert got == {"list": [1]}
        got["list"].append("changed by a reader")
        scanned: Any = await store.scan("k")
        scanned[0][1]["list"].append("changed by a scanner")
        assert await store.get("k") == {"list": [1]}

    run(main)


@pytest.mark.parametrize(
    ("value", "culprit"),
    [
        ({1, 2}, "set"),
        ({"a": [object()]}, "object"),
        ((1, 2), "tuple"),
        ({1: "int key"}, "key of type int"),
        (float("nan"), "nan"),
    ],
)
def test_a_value_that_is_not_json_is_rejected_naming_the_key(
    store: Store, value: Any, culprit: str
) -> None:
    async def main() -> None:
        with pytest.raises(TypeError) as info:
            await store.put("bad/key", value)
        message = str(info.value)
        assert "\n" not in message
        assert "'bad/key'" in message and culprit in message
        with pytest.raises(TypeError):
            await store.cas("bad/key", None, value)
        assert await store.get("bad/key") is None

    run(main)


def test_a_key_that_is_not_a_string_is_rejected(store: Store) -> None:
    with pytest.raises(TypeError, match="keys are str"):
        run(lambda: store.put(7, 1))  # type: ignore[arg-type]


def test_sqlite_data_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"

    async def write() -> None:
        with SQLiteStore(path) as s:
            await s.put("a/1", {"n": 1})
            assert await s.cas("a/2", None, [2])

    async def read() -> Any:
        with SQLiteStore(path) as s:
            return await s.scan("a/")

    run(write)
    assert run(read) == [("a/1", {"n": 1}), ("a/2", [2])]


def test_two_sqlite_stores_on_one_file_see_each_others_writes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"

    async def main() -> None:
        with SQLiteStore(path) as one, SQLiteStore(path) as two:
            await one.put("k", 1)
            assert await two.get("k") == 1
            assert await two.cas("k", 1, 2)
            assert not await one.cas("k", 1, 3)
            assert await one.get("k") == 2
            await one.delete("k")
            assert await two.get("k") is None

    run(main)


def test_sqlite_store_uses_wal_mode(tmp_path: Path) -> None:
    with (
        SQLiteStore(tmp_path / "wal.db"),
        closing(sqlite3.connect(tmp_path / "wal.db")) as db,
    ):
        mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_closed_sqlite_store_refuses_to_work(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "closed.db")
    s.close()
    s.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        run(lambda: s.get("k"))


def test_memory_store_observers_see_copies_without_an_event_loop() -> None:
    store = MemoryStore()

    async def fill() -> None:
        await store.put("b", [1])
        await store.put("a", {"x": 1})

    run(fill)
    assert store.peek("missing") is None
    peeked = store.peek("b")
    assert isinstance(peeked, list)
    peeked.append(2)
    snap = store.snapshot()
    assert list(snap) == ["a", "b"]
    assert snap == {"a": {"x": 1}, "b": [1]}
