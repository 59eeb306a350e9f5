"""The results database: which seeds of a run are done, and what failed.

``dst run`` records every finished chunk of seeds in ``<out>/results.sqlite``
(stdlib ``sqlite3``), in the same transaction as that chunk's failures, as soon
as the chunk comes back.  An interrupted run therefore loses at most the chunks
in flight, and ``dst run ... --resume`` skips every seed already done for the
same *run key* and reports the combined summary.

The run key is the scenario name, its full config and the strategy, and what
else decides a seed's run: the file the scenario was loaded from, a digest of
that file's source, its fault plan and its step bound (``dst.runner.names``).  A
run is a pure function of those and the seed, so a seed done under the same key
never needs to run again, and a seed done under another (another file holding a
test of the same name, the code edited since) is never taken for done.
Coverage (``dst.coverage``) is kept under the key too, as sets (probes called
and reached, digests of the states seen), so that it adds up across
``--resume`` and a chunk recorded twice counts once.  Done seeds are kept as
half-open ranges ``[start, stop)``; the chunking of a later run need not match
the chunking of an earlier one.

Failures are kept in two forms.  Every failing seed is one small row (seed,
group, steps) under an integer id of its run key, about 20 bytes, so that a
resumed run of any sub-range counts its groups exactly; the failures whose
traces are kept (``dst.runner.groups``) have a row naming the trace file.  Each
group's signature and shrunk story is a row of its own.  A failing seed of a group
not kept (past ``--max-groups``) has a row in ``unkept`` instead, its seed and the
invariants it violated, so that a resumed run counts those per invariant too.
Every invocation of ``dst run`` is a row of ``runs``, updated with each chunk,
which ``dst runs`` lists.
"""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .groups import Group, Shrunk

#: File name of the database inside ``--out``.
DB_NAME = "results.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    run_key TEXT NOT NULL, start INTEGER NOT NULL, stop INTEGER NOT NULL,
    runs INTEGER NOT NULL, decisions INTEGER NOT NULL,
    PRIMARY KEY (run_key, start)
);
CREATE TABLE IF NOT EXISTS failures (
    run_key TEXT NOT NULL, seed INTEGER NOT NULL, violated TEXT NOT NULL,
    steps INTEGER NOT NULL, trace TEXT NOT NULL,
    PRIMARY KEY (run_key, seed)
);
CREATE TABLE IF NOT EXISTS bounded (
    run_key TEXT NOT NULL, seed INTEGER NOT NULL, trace TEXT NOT NULL,
    PRIMARY KEY (run_key, seed)
);
CREATE TABLE IF NOT EXISTS probes (
    run_key TEXT NOT NULL, probe TEXT NOT NULL, reached INTEGER NOT NULL,
    PRIMARY KEY (run_key, probe)
);
CREATE TABLE IF NOT EXISTS states (
    run_key TEXT NOT NULL, state INTEGER NOT NULL,
    PRIMARY KEY (run_key, state)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS keys (
    id INTEGER PRIMARY KEY, run_key TEXT NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS groups (
    key INTEGER NOT NULL, grp INTEGER NOT NULL, signature TEXT NOT NULL,
    shrunk TEXT, shrunk_steps INTEGER, from_steps INTEGER, shrunk_seed INTEGER, shape TEXT,
    PRIMARY KEY (key, grp)
);
CREATE TABLE IF NOT EXISTS failed (
    key INTEGER NOT NULL, seed INTEGER NOT NULL, grp INTEGER NOT NULL, steps INTEGER NOT NULL,
    PRIMARY KEY (key, seed)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS unkept (
    key INTEGER NOT NULL, seed INTEGER NOT NULL, violated TEXT NOT NULL,
    PRIMARY KEY (key, seed)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, run_key TEXT NOT NULL, started TEXT NOT NULL, host TEXT NOT NULL,
    pid INTEGER NOT NULL, scenario TEXT NOT NULL, config TEXT NOT NULL, strategy TEXT NOT NULL,
    seeds TEXT NOT NULL, shard TEXT, done INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0, groups INTEGER NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0, status TEXT NOT NULL, command TEXT NOT NULL
);
"""


#: The parts of a run key, in the words that tell an earlier run differs in them.
_DIFFERS = {"file": "another file", "source": "other source code",
            "config": "another config", "strategy": "another strategy",
            "faults": "another fault plan", "max_steps": "another step bound"}

#: A state digest is unsigned 64-bit; SQLite integers are signed.
_SIGN = 1 << 63


def run_key(scenario: str, config: Mapping[str, Any], strategy: str, **more: Any) -> str:
    """The identity of a run: everything but the seed that decides its outcome.

    ``more``: what else decides it, as ``dst run`` gives it
    (:func:`dst.runner.names.identity`: the scenario's file and a digest of its
    source, its fault plan and step bound); a key is a JSON object, so that
    :meth:`ResultsDB.nearest_key` can tell which of these an earlier run differs in.
    """
    return json.dumps({"scenario": scenario, "config": dict(config), "strategy": strategy,
                       **more}, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class StoredFailure:
    seed: int
    violated: tuple[str, ...]
    steps: int
    trace: str


@dataclass(frozen=True)
class RunRow:
    """One invocation of ``dst run``, as ``dst runs`` lists it."""

    id: int
    run_key: str
    started: str
    host: str
    pid: int
    scenario: str
    config: dict[str, Any]
    strategy: str
    seeds: str
    shard: str | None
    done: int
    failed: int
    groups: int
    seconds: float
    status: str
    command: str


@dataclass
class ChunkRecord:
    """What one finished chunk adds to the database, written in one transaction."""

    seeds: list[int]
    decisions: int
    #: Failures whose traces are kept, and the seeds whose kept traces were displaced.
    kept: list[StoredFailure] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    #: ``(seed, group id, steps)`` of every failing seed of the chunk.
    failed: list[tuple[int, int, int]] = field(default_factory=list)
    #: ``(group id, signature)`` of groups seen for the first time.
    groups: list[tuple[int, str]] = field(default_factory=list)
    #: ``(seed, violated)`` of the chunk's failing seeds in groups not kept.
    not_kept: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    #: ``(seed, trace path or "")`` of the runs cut at the step bound.
    bounded: list[tuple[int, str]] = field(default_factory=list)
    probes: dict[str, bool] = field(default_factory=dict)
    states: set[int] = field(default_factory=set)
    #: ``(runs row id, done, failed, groups, seconds)``: the invocation's progress.
    progress: tuple[int, int, int, int, float] | None = None


class ResultsDB:
    """One ``results.sqlite``; every write commits at once (a chunk is the unit of loss)."""

    def __init__(self, out_dir: str | Path, *, create: bool = True) -> None:
        self.path = Path(out_dir) / DB_NAME
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path if create else f"file:{self.path}?mode=ro",
                                   uri=not create)
        self._ids: dict[str, int] = {}
        if not create:
            return
        try:
            self._write_ahead()
            # Only CREATE ... IF NOT EXISTS: a database written by an older dst gains
            # the tables it lacks, and two runs opening one database cannot race.
            self._db.executescript(_SCHEMA)
            # Take the write lock once and let go: a database that can be read but not
            # written fails here, before any seed runs, not after the first chunk.
            self._db.execute("BEGIN IMMEDIATE")
            self._db.rollback()
        except BaseException:
            # Closed now, not whenever the collector gets to it: Python 3.13 warns
            # (ResourceWarning) about a connection left to the collector.
            self._db.close()
            raise

    def _write_ahead(self) -> None:
        """Commit to a write-ahead log, synced when it is copied into the database.

        In SQLite's WAL mode with ``synchronous=NORMAL`` a commit appends to the log
        without an ``fsync``; the log is synced when it is checkpointed into the
        database, at the latest when the last connection closes.  A commit survives
        the process being killed (it is in the file); only an OS crash or a power
        loss can take the last commits back, never corrupt the database.  In the
        default rollback journal each commit (a run's start, each chunk, its end) is
        several ``fsync`` calls, tens of milliseconds on a virtual machine's disk.
        Where WAL is refused (a file system without shared memory), the database
        keeps its journal and its full syncs.
        """
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError:  # locked by another connection: keep its mode
            return
        if str(mode).lower() == "wal":
            self._db.execute("PRAGMA synchronous=NORMAL")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._db.close()

    def __enter__(self) -> ResultsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def key_id(self, key: str) -> int:
        """The small integer that stands for ``key`` in the per-failure rows."""
        found = self._ids.get(key)
        if found is None:
            with self._db:
                self._db.execute("INSERT OR IGNORE INTO keys (run_key) VALUES (?)", (key,))
            found = int(self._db.execute("SELECT id FROM keys WHERE run_key = ?",
                                         (key,)).fetchone()[0])
            self._ids[key] = found
        return found

    def record_chunk(self, key: str, seeds: list[int], decisions: int,
                     failures: Iterable[StoredFailure],
                     bounded: Iterable[tuple[int, str]] = (),
                     probes: Mapping[str, bool] | None = None,
                     states: Iterable[int] = ()) -> None:
        """Mark the contiguous ``seeds`` done, with their kept failures, the runs cut at
        the step bound (``(seed, trace path)``) and their coverage (probe -> whether
        it was reached; state digests), in one transaction."""
        self.record(key, ChunkRecord(seeds, decisions, kept=list(failures),
                                     bounded=list(bounded), probes=dict(probes or {}),
                                     states=set(states)))

    def record(self, key: str, chunk: ChunkRecord) -> None:
        """Write one finished chunk (:class:`ChunkRecord`) in one transaction."""
        if not chunk.seeds:
            return
        kid = self.key_id(key)
        with self._db:
            # A chunk starting where a longer one recorded earlier starts (a run cut
            # short by --max-failures, or a shorter range run again) must not shrink it.
            self._db.execute(
                "INSERT INTO chunks VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_key, start) DO "
                "UPDATE SET stop = excluded.stop, runs = excluded.runs, decisions = "
                "excluded.decisions WHERE excluded.stop > chunks.stop",
                (key, chunk.seeds[0], chunk.seeds[-1] + 1, len(chunk.seeds), chunk.decisions))
            self._db.executemany(
                "INSERT OR REPLACE INTO bounded VALUES (?, ?, ?)",
                [(key, seed, trace) for seed, trace in chunk.bounded])
            self._db.executemany(
                "DELETE FROM failures WHERE run_key = ? AND seed = ?",
                [(key, seed) for seed in chunk.dropped])
            self._db.executemany(
                "INSERT OR REPLACE INTO failures VALUES (?, ?, ?, ?, ?)",
                [(key, f.seed, json.dumps(list(f.violated)), f.steps, f.trace)
                 for f in chunk.kept])
            self._db.executemany(
                "INSERT OR IGNORE INTO groups (key, grp, signature) VALUES (?, ?, ?)",
                [(kid, grp, sig) for grp, sig in chunk.groups])
            # A seed run again (without --resume) may change sides: one row, in one table.
            self._db.executemany(
                "DELETE FROM unkept WHERE key = ? AND seed = ?",
                [(kid, seed) for seed, _, _ in chunk.failed])
            self._db.executemany(
                "INSERT OR REPLACE INTO failed VALUES (?, ?, ?, ?)",
                [(kid, seed, grp, steps) for seed, grp, steps in chunk.failed])
            self._db.executemany(
                "DELETE FROM failed WHERE key = ? AND seed = ?",
                [(kid, seed) for seed, _ in chunk.not_kept])
            self._db.executemany(
                "DELETE FROM failures WHERE run_key = ? AND seed = ?",
                [(key, seed) for seed, _ in chunk.not_kept])
            self._db.executemany(
                "INSERT OR REPLACE INTO unkept VALUES (?, ?, ?)",
                [(kid, seed, json.dumps(list(violated), separators=(",", ":")))
                 for seed, violated in chunk.not_kept])
            self._db.executemany(
                "INSERT INTO probes VALUES (?, ?, ?) ON CONFLICT (run_key, probe) "
                "DO UPDATE SET reached = max(reached, excluded.reached)",
                [(key, name, int(hit)) for name, hit in sorted(chunk.probes.items())])
            self._db.executemany(
                "INSERT OR IGNORE INTO states VALUES (?, ?)",
                [(key, state - _SIGN) for state in chunk.states])
            if chunk.progress is not None:
                run_id, done, failed, groups, seconds = chunk.progress
                self._db.execute(
                    "UPDATE runs SET done = ?, failed = ?, groups = ?, seconds = ? "
                    "WHERE id = ?", (done, failed, groups, seconds, run_id))

    def done_ranges(self, key: str) -> list[tuple[int, int]]:
        """The seed ranges already done under ``key``, merged and sorted."""
        rows = self._db.execute(
            "SELECT start, stop FROM chunks WHERE run_key = ? ORDER BY start", (key,))
        merged: list[tuple[int, int]] = []
        for start, stop in rows:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
            else:
                merged.append((start, stop))
        return merged

    def nearest_key(self, key: str) -> list[str] | None:
        """What the earlier run of ``key``'s scenario (by name) nearest to ``key`` differs
        in, in words (``another config``); None when no run of that name is recorded."""
        want = json.loads(key)
        best: list[str] | None = None
        for (other,) in self._db.execute("SELECT run_key FROM keys ORDER BY id DESC"):
            try:
                got = json.loads(other)
            except ValueError:
                continue
            if other == key or not isinstance(got, dict) or \
                    got.get("scenario") != want.get("scenario"):
                continue
            if "file" in want and "file" not in got:
                diff = ["no file recorded (an older dst)"]
            else:
                diff = [words for part, words in _DIFFERS.items()
                        if want.get(part) != got.get(part)]
            if best is None or len(diff) < len(best):
                best = diff
        return best

    def traces_kept(self) -> list[tuple[str, str]]:
        """``(run key, trace path)`` of every trace a run key keeps (failures and runs cut
        at the step bound)."""
        return [(str(key), str(trace)) for key, trace in self._db.execute(
            "SELECT run_key, trace FROM failures UNION SELECT run_key, trace FROM bounded "
            "WHERE trace != ''")]

    def bounded_within(self, key: str, start: int, stop: int | None) -> list[tuple[int, str]]:
        """``(seed, trace path or "")`` of the runs in ``[start, stop)`` cut at the step bound."""
        rows = self._db.execute(
            "SELECT seed, trace FROM bounded WHERE run_key = ? AND seed >= ? AND seed < ?"
            " ORDER BY seed", (key, start, _end(stop)))
        return [(int(seed), str(trace)) for seed, trace in rows]

    def coverage(self, key: str) -> tuple[dict[str, bool], set[int]]:
        """The probes recorded under ``key`` (name -> reached) and the state digests."""
        probes = {str(name): bool(hit) for name, hit in self._db.execute(
            "SELECT probe, reached FROM probes WHERE run_key = ?", (key,))}
        states = {int(s) + _SIGN for (s,) in self._db.execute(
            "SELECT state FROM states WHERE run_key = ?", (key,))}
        return probes, states

    def failures_within(self, key: str, start: int, stop: int | None) -> list[StoredFailure]:
        """The failures in ``[start, stop)`` whose traces are kept."""
        rows = self._db.execute(
            "SELECT seed, violated, steps, trace FROM failures WHERE run_key = ? AND seed >= ?"
            " AND seed < ? ORDER BY seed", (key, start, _end(stop)))
        return [StoredFailure(seed, tuple(json.loads(v)), steps, trace)
                for seed, v, steps, trace in rows]

    def groups_of(self, key: str) -> list[Group]:
        """Every group recorded under ``key``, without counts (``count_groups`` adds them)."""
        out = []
        for grp, sig, shrunk, steps, from_steps, seed, shape in self._db.execute(
                "SELECT grp, signature, shrunk, shrunk_steps, from_steps, shrunk_seed, shape "
                "FROM groups WHERE key = ? ORDER BY grp", (self.key_id(key),)):
            group = Group(id=int(grp), signature=str(sig))
            if shrunk is not None:
                group.shrunk = Shrunk(Path(shrunk), int(steps), int(from_steps), int(seed),
                                      str(shape))
            out.append(group)
        return out

    def count_groups(self, key: str, start: int,
                     stop: int | None) -> dict[int, tuple[int, int, tuple[int, int]]]:
        """Per group id: failing seeds in ``[start, stop)``, the first, and the shortest
        ``(steps, seed)``; added up by SQLite, never one row at a time here."""
        kid, end = self.key_id(key), _end(stop)
        counts = {int(grp): (int(n), int(first), int(fewest)) for grp, n, first, fewest in
                  self._db.execute(
                      "SELECT grp, count(*), min(seed), min(steps) FROM failed WHERE key = ? "
                      "AND seed >= ? AND seed < ? GROUP BY grp", (kid, start, end))}
        out = {}
        for grp, (n, first, fewest) in counts.items():
            seed = self._db.execute(
                "SELECT min(seed) FROM failed WHERE key = ? AND grp = ? AND steps = ? "
                "AND seed >= ? AND seed < ?", (kid, grp, fewest, start, end)).fetchone()[0]
            out[grp] = (n, first, (fewest, int(seed)))
        return out

    def not_kept_within(self, key: str, start: int,
                        stop: int | None) -> dict[tuple[str, ...], int]:
        """Failing seeds in ``[start, stop)`` of groups not kept, by the invariants they
        violated; added up by SQLite."""
        return {tuple(json.loads(v)): int(n) for v, n in self._db.execute(
            "SELECT violated, count(*) FROM unkept WHERE key = ? AND seed >= ? AND seed < ? "
            "GROUP BY violated", (self.key_id(key), start, _end(stop)))}

    def kept_within(self, key: str, start: int,
                    stop: int | None) -> list[tuple[StoredFailure, int | None]]:
        """The kept failures in ``[start, stop)`` with their group ids (None: recorded
        by a dst from before groups, which wrote no per-failure row)."""
        rows = self._db.execute(
            "SELECT f.seed, f.violated, f.steps, f.trace, d.grp FROM failures f LEFT JOIN "
            "failed d ON d.key = ? AND d.seed = f.seed WHERE f.run_key = ? AND f.seed >= ? "
            "AND f.seed < ? ORDER BY f.seed", (self.key_id(key), key, start, _end(stop)))
        return [(StoredFailure(seed, tuple(json.loads(v)), steps, trace),
                 None if grp is None else int(grp)) for seed, v, steps, trace, grp in rows]

    def set_shrunk(self, key: str, group: Group) -> None:
        """Record a group's shrunk story (``group.shrunk``)."""
        s = group.shrunk
        if s is None:
            return
        with self._db:
            self._db.execute(
                "UPDATE groups SET shrunk = ?, shrunk_steps = ?, from_steps = ?, "
                "shrunk_seed = ?, shape = ? WHERE key = ? AND grp = ?",
                (str(s.path), s.steps, s.from_steps, s.seed, s.shape, self.key_id(key),
                 group.id))

    # -- the runs table: one row per invocation of `dst run` ---------------------------

    def start_run(self, key: str, scenario: str, config: Mapping[str, Any], strategy: str,
                  seeds: str, shard: str | None, command: str, done: int) -> int:
        import socket  # here: ``dst runs`` reads the database without it

        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        with self._db:
            cur = self._db.execute(
                "INSERT INTO runs (run_key, started, host, pid, scenario, config, strategy, "
                "seeds, shard, done, status, command) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "'running', ?)",
                (key, started, socket.gethostname(), os.getpid(), scenario,
                 json.dumps(dict(config), sort_keys=True), strategy, seeds, shard, done,
                 command))
        return int(cur.lastrowid or 0)

    def finish_run(self, run_id: int, status: str, done: int, failed: int, groups: int,
                   seconds: float) -> None:
        with self._db:
            self._db.execute(
                "UPDATE runs SET status = ?, done = ?, failed = ?, groups = ?, seconds = ? "
                "WHERE id = ?", (status, done, failed, groups, seconds, run_id))

    def runs(self) -> list[RunRow]:
        """Every invocation recorded here, oldest first."""
        try:
            rows = self._db.execute(
                "SELECT id, run_key, started, host, pid, scenario, config, strategy, seeds, "
                "shard, done, failed, groups, seconds, status, command FROM runs ORDER BY id"
            ).fetchall()
        except sqlite3.OperationalError:  # a database from before runs were recorded
            return []
        return [RunRow(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]), str(r[5]),
                       json.loads(r[6]), str(r[7]), str(r[8]), r[9], int(r[10]), int(r[11]),
                       int(r[12]), float(r[13]), str(r[14]), str(r[15])) for r in rows]


def _end(stop: int | None) -> int:
    return stop if stop is not None else 2**62


def count_within(ranges: Iterable[tuple[int, int]], start: int, stop: int | None) -> int:
    """How many seeds of ``ranges`` fall in ``[start, stop)``."""
    total = 0
    for a, b in ranges:
        lo, hi = max(a, start), b if stop is None else min(b, stop)
        total += max(0, hi - lo)
    return total


def missing(ranges: list[tuple[int, int]], start: int, stop: int | None) -> Iterator[int]:
    """The seeds of ``[start, stop)`` (open-ended if ``stop`` is None) not in ``ranges``."""
    seed = start
    for a, b in ranges:
        if b <= seed:
            continue
        end = a if stop is None else min(a, stop)
        yield from range(seed, max(seed, end))
        seed = max(seed, b)
        if stop is not None and seed >= stop:
            return
    while stop is None or seed < stop:
        yield seed
        seed += 1
