"""Real implementations of the :class:`dst.env.Store` protocol.

``SQLiteStore`` is the production store (one SQLite file in WAL mode);
``MemoryStore`` is the same contract in a dict, for tests and tools.  Both keep
every value as its *canonical JSON text*, which buys three things at once:

* no aliasing: a value handed to ``put`` is serialised immediately and every
  ``get`` decodes a fresh object, so neither the writer mutating its object
  afterwards nor a reader mutating what it got can change the stored value
  (the store is what survives a crash; it must not share memory with a process);
* one notion of equality: ``cas`` compares canonical texts, so dict key order
  does not matter while ``1``/``1.0``/``true`` stay distinct, identically in
  both stores;
* early rejection: a value that is not JSON fails at ``put`` with a
  ``TypeError`` naming the key, not later when someone reads it back.

``None`` is "absent": ``get`` of a missing key returns ``None``, so storing
``None`` (by ``put`` or as the ``new`` of a ``cas``) deletes the key.  Without
this rule "present with value null" and "absent" would be indistinguishable to
``get`` yet different to ``scan`` and ``cas``.  (``None`` nested inside a list
or dict is an ordinary value.)

The async methods never suspend: they do their (sub-millisecond) work
synchronously and return.  That makes every operation atomic with respect to
the other tasks of the process, keeps the module free of any event-loop
dependency (so a simulator may drive it too), and avoids ``trio.to_thread``,
whose thread hand-offs would add nondeterministic scheduling for no gain.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from types import TracebackType
from typing import Self, Union

from dst.env import Json

__all__ = ["MemoryStore", "SQLiteStore", "canonical_json"]

PathLike = Union[str, "os.PathLike[str]"]


def _check_json(value: object, path: str, active: set[int]) -> str | None:
    """Why ``value`` is not JSON (``None`` if it is).

    Stricter than ``json.dumps``, which silently turns tuples into lists, int
    keys into strings and NaN into a non-standard token: each of those would
    come back from the store different from what was put in.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return (
            None if math.isfinite(value) else f"{path} is {value!r}, not a JSON number"
        )
    if isinstance(value, (list, dict)):
        if id(value) in active:
            return f"{path} contains itself"
        active.add(id(value))
        try:
            if isinstance(value, list):
                for i, item in enumerate(value):
                    why = _check_json(item, f"{path}[{i}]", active)
                    if why:
                        return why
            else:
                for k, item in value.items():
                    if not isinstance(k, str):
                        return f"{path} has a key of type {type(k).__name__}"
                    why = _check_json(item, f"{path}[{k!r}]", active)
                    if why:
                        return why
        finally:
            active.discard(id(value))
        return None
    return f"{path} has type {type(value).__name__}"


def canonical_json(value: object, context: str) -> str:
    """``value`` as canonical JSON text (sorted keys, no spaces).

    Raises ``TypeError`` with a one-line message starting with ``context``
    (e.g. ``"store key 'a/1'"``) if ``value`` is not JSON-compatible.
    """
    why = _check_json(value, "value", set())
    if why:
        raise TypeError(f"{context}: {why}, which is not JSON-compatible")
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _decode(text: str) -> Json:
    value: Json = json.loads(text)
    return value


def _check_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"store keys are str, got {type(key).__name__}: {key!r}")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"store key {key!r} is not valid Unicode (lone surrogate)"
        ) from None
    return key


def _encode(key: str, value: Json) -> str | None:
    """The stored text for ``value``; ``None`` means "absent" (delete)."""
    return None if value is None else canonical_json(value, f"store key {key!r}")


def _prefix_upper_bound(prefix: str) -> str | None:
    """The least string greater than every string that starts with ``prefix``.

    ``prefix + '\\uffff'`` is not enough: keys may hold characters above U+FFFF.
    Incrementing the last character is exact, because both Python and SQLite
    (BINARY collation on UTF-8) order strings by code point.  ``None`` means
    there is no upper bound (empty prefix, or only U+10FFFF characters).
    """
    while prefix:
        last = ord(prefix[-1])
        if last < 0x10FFFF:
            nxt = last + 1
            if 0xD800 <= nxt <= 0xDFFF:  # surrogates cannot be stored: skip them
                nxt = 0xE000
            return prefix[:-1] + chr(nxt)
        prefix = prefix[:-1]
    return None


class MemoryStore:
    """The :class:`~dst.env.Store` contract in memory (a dict of canonical JSON).

    Not durable: it lives as long as the object.  ``peek`` and ``snapshot`` are
    synchronous so that test observers can look without running an event loop.
    """

    def __init__(self) -> None:
        self._data: dict[str, str] = {}

    async def get(self, key: str) -> Json:
        text = self._data.get(_check_key(key))
        return None if text is None else _decode(text)

    async def put(self, key: str, value: Json) -> None:
        text = _encode(_check_key(key), value)
        if text is None:
            self._data.pop(key, None)
        else:
            self._data[key] = text

    async def cas(self, key: str, expected: Json, new: Json) -> bool:
        old = _encode(_check_key(key), expected)
        text = _encode(key, new)
        if self._data.get(key) != old:
            return False
        if text is None:
            self._data.pop(key, None)
        else:
            self._data[key] = text
        return True

    async def delete(self, key: str) -> None:
        self._data.pop(_check_key(key), None)

    async def scan(self, prefix: str) -> list[tuple[str, Json]]:
        _check_key(prefix)
        return [
            (k, _decode(self._data[k]))
            for k in sorted(self._data)
            if k.startswith(prefix)
        ]

    def peek(self, key: str) -> Json:
        """The value at ``key`` (a fresh copy), without an event loop."""
        text = self._data.get(key)
        return None if text is None else _decode(text)

    def snapshot(self) -> dict[str, Json]:
        """Every key and value (fresh copies), in key order."""
        return {k: _decode(self._data[k]) for k in sorted(self._data)}


class SQLiteStore:
    """The :class:`~dst.env.Store` contract on one SQLite file.

    Several ``SQLiteStore`` objects (in one process or several) may open the same
    file; each sees the others' committed writes.  No ``await`` happens inside
    a transaction, so a transaction never stays open across a task switch.
    """

    def __init__(self, path: PathLike, *, timeout: float = 5.0) -> None:
        self.path = os.fspath(path)
        # isolation_level=None: the sqlite3 module opens no implicit
        # transactions; single statements autocommit and ``cas`` opens its own.
        # ``timeout`` is how long a writer waits for another connection's lock.
        self._db: sqlite3.Connection | None = sqlite3.connect(
            self.path, timeout=timeout, isolation_level=None
        )
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ValueError(
                    f"{self.path!r}: SQLite refused WAL mode (journal_mode={mode!r}); "
                    "SQLiteStore needs a real file on a local filesystem"
                )
            # FULL, not NORMAL: in WAL mode NORMAL stays consistent but may lose
            # the last commits on power loss or an OS crash.  A Store promises
            # that a write which returned survives a crash, so we pay the fsync
            # per commit; the stores of an agent runtime are not write-bound.
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS kv ("
                " key TEXT PRIMARY KEY NOT NULL,"
                " value TEXT NOT NULL"
                ") WITHOUT ROWID"
            )
        except BaseException:
            self.close()
            raise

    @property
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError(f"SQLiteStore({self.path!r}) is closed")
        return self._db

    def _write(self, key: str, text: str | None) -> None:
        if text is None:
            self._conn.execute("DELETE FROM kv WHERE key = ?", (key,))
        else:
            self._conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, text),
            )

    async def get(self, key: str) -> Json:
        row = self._conn.execute(
            "SELECT value FROM kv WHERE key = ?", (_check_key(key),)
        ).fetchone()
        return None if row is None else _decode(row[0])

    async def put(self, key: str, value: Json) -> None:
        self._write(_check_key(key), _encode(key, value))

    async def cas(self, key: str, expected: Json, new: Json) -> bool:
        old = _encode(_check_key(key), expected)
        text = _encode(key, new)
        conn = self._conn
        # BEGIN IMMEDIATE takes the write lock before the read, so no other
        # connection can commit between our comparison and our write.
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            if (None if row is None else row[0]) != old:
                conn.execute("ROLLBACK")
                return False
            self._write(key, text)
            conn.execute("COMMIT")
            return True
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def delete(self, key: str) -> None:
        self._write(_check_key(key), None)

    async def scan(self, prefix: str) -> list[tuple[str, Json]]:
        upper = _prefix_upper_bound(_check_key(prefix))
        if upper is None:
            rows = self._conn.execute(
                "SELECT key, value FROM kv WHERE key >= ? ORDER BY key", (prefix,)
            ).fetchall()
        else:
            rows = self._conn.execute(
                "SELECT key, value FROM kv WHERE key >= ? AND key < ? ORDER BY key",
                (prefix, upper),
            ).fetchall()
        return [(k, _decode(v)) for k, v in rows]

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise ``RuntimeError``."""
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
