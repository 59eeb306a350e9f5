"""The results database: which seeds of a run are done, and what failed.

``dst run`` records every finished chunk of seeds in ``<out>/results.sqlite``
(stdlib ``sqlite3``), in the same transaction as that chunk's failures, as soon
as the chunk comes back.  An interrupted run therefore loses at most the chunks
in flight, and ``dst run ... --resume`` skips every seed already done for the
same *run key* and reports the combined summary.

The run key is the scenario name, its full config and the strategy: a run is a
pure function of those and the seed, so a seed done under the same key never
needs to run again.  Coverage (``dst.coverage``) is kept under the key too, as
sets (probes called and reached, digests of the states seen), so that it adds
up across ``--resume`` and a chunk recorded twice counts once.  Done seeds are
kept as half-open ranges ``[start, stop)``; the chunking of a later run need not
match the chunking of an earlier one.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .bulk import BulkSummary, SeedOutcome

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
"""

#: A state digest is unsigned 64-bit; SQLite integers are signed.
_SIGN = 1 << 63


def run_key(scenario: str, config: Mapping[str, Any], strategy: str) -> str:
    """The identity of a run: everything but the seed that decides its outcome."""
    return json.dumps({"scenario": scenario, "config": dict(config), "strategy": strategy},
                      sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class StoredFailure:
    seed: int
    violated: tuple[str, ...]
    steps: int
    trace: str


class ResultsDB:
    """One ``results.sqlite``; every write commits at once (a chunk is the unit of loss)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.path = Path(out_dir) / DB_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path)
        # Only CREATE ... IF NOT EXISTS: a database written by an older dst gains
        # the tables it lacks, and two runs opening one database cannot race.
        self._db.executescript(_SCHEMA)
        # Take the write lock once and let go: a database that can be read but not
        # written fails here, before any seed runs, not after the first chunk.
        self._db.execute("BEGIN IMMEDIATE")
        self._db.rollback()

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResultsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record_chunk(self, key: str, seeds: list[int], decisions: int,
                     failures: Iterable[StoredFailure],
                     bounded: Iterable[tuple[int, str]] = (),
                     probes: Mapping[str, bool] | None = None,
                     states: Iterable[int] = ()) -> None:
        """Mark the contiguous ``seeds`` done, with their failures, the runs cut at
        the step bound (``(seed, trace path)``) and their coverage (probe -> whether
        it was reached; state digests), in one transaction."""
        if not seeds:
            return
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?)",
                (key, seeds[0], seeds[-1] + 1, len(seeds), decisions))
            self._db.executemany(
                "INSERT OR REPLACE INTO bounded VALUES (?, ?, ?)",
                [(key, seed, trace) for seed, trace in bounded])
            self._db.executemany(
                "INSERT OR REPLACE INTO failures VALUES (?, ?, ?, ?, ?)",
                [(key, f.seed, json.dumps(list(f.violated)), f.steps, f.trace)
                 for f in failures])
            self._db.executemany(
                "INSERT INTO probes VALUES (?, ?, ?) ON CONFLICT (run_key, probe) "
                "DO UPDATE SET reached = max(reached, excluded.reached)",
                [(key, name, int(hit)) for name, hit in sorted((probes or {}).items())])
            self._db.executemany(
                "INSERT OR IGNORE INTO states VALUES (?, ?)",
                [(key, state - _SIGN) for state in states])

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

    def bounded_within(self, key: str, start: int, stop: int | None) -> list[tuple[int, str]]:
        """``(seed, trace path)`` of the runs in ``[start, stop)`` cut at the step bound."""
        rows = self._db.execute(
            "SELECT seed, trace FROM bounded WHERE run_key = ? AND seed >= ? AND seed < ?"
            " ORDER BY seed", (key, start, stop if stop is not None else 2**62))
        return [(int(seed), str(trace)) for seed, trace in rows]

    def coverage(self, key: str) -> tuple[dict[str, bool], set[int]]:
        """The probes recorded under ``key`` (name -> reached) and the state digests."""
        probes = {str(name): bool(hit) for name, hit in self._db.execute(
            "SELECT probe, reached FROM probes WHERE run_key = ?", (key,))}
        states = {int(s) + _SIGN for (s,) in self._db.execute(
            "SELECT state FROM states WHERE run_key = ?", (key,))}
        return probes, states

    def failures_within(self, key: str, start: int, stop: int | None) -> list[StoredFailure]:
        rows = self._db.execute(
            "SELECT seed, violated, steps, trace FROM failures WHERE run_key = ? AND seed >= ?"
            " AND seed < ? ORDER BY seed", (key, start, stop if stop is not None else 2**62))
        return [StoredFailure(seed, tuple(json.loads(v)), steps, trace)
                for seed, v, steps, trace in rows]


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


class Recorder:
    """What ``dst run`` keeps of a run: failing traces on disk and done chunks in the DB.

    Called after every chunk, so both are written while the run goes on: a run
    stopped by Ctrl-C (or a crash of the machine) keeps every finished chunk,
    and ``--resume`` starts from there.
    """

    def __init__(self, out_dir: str | Path, scenario: str, key: str, *,
                 record: bool = True) -> None:
        self.out_dir = Path(out_dir)
        self.scenario = scenario
        self.key = key
        self.record = record
        self.db = ResultsDB(out_dir)
        #: seed -> trace path, for every failure written or resumed.
        self.paths: dict[int, Path] = {}

    def resume(self, summary: BulkSummary, start: int,
               stop: int | None) -> list[tuple[int, int]]:
        """Load earlier results of ``[start, stop)`` into ``summary``; return the done ranges."""
        done = self.db.done_ranges(self.key)
        summary.runs += count_within(done, start, stop)
        for seed, trace in self.db.bounded_within(self.key, start, stop):
            summary.add_bounded(seed)
            self.paths[seed] = Path(trace)
        for f in self.db.failures_within(self.key, start, stop):
            self.paths[f.seed] = Path(f.trace)
            summary.failures.append(SeedOutcome(f.seed, "fail", f.violated, f.steps, None))
            for name in f.violated:
                summary.by_invariant[name] = summary.by_invariant.get(name, 0) + 1
        probes, states = self.db.coverage(self.key)
        summary.probes_declared |= set(probes)
        summary.probes_reached |= {name for name, hit in probes.items() if hit}
        summary.states |= states
        return done

    def trace_path(self, seed: int) -> Path:
        return self.out_dir / f"{self.scenario}-{seed}.jsonl"

    def chunk_done(self, outcomes: list[SeedOutcome]) -> None:
        """Write the traces of this chunk's failing (and bounded) seeds, then mark it done."""
        stored = []
        bounded: list[tuple[int, str]] = []
        for o in outcomes:
            if o.trace_text is None or (o.verdict != "fail" and not o.nondeterminism
                                        and o.ended != "bound"):
                continue
            path = self.trace_path(o.seed)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(o.trace_text, encoding="utf-8")
            tmp.replace(path)  # never a half-written trace under the real name
            self.paths[o.seed] = path
            if o.verdict == "fail":
                stored.append(StoredFailure(o.seed, tuple(o.violated), o.steps, str(path)))
            elif o.ended == "bound":
                bounded.append((o.seed, str(path)))
        if self.record:
            seeds = [o.seed for o in outcomes]
            probes: dict[str, bool] = {}
            states: set[int] = set()
            for o in outcomes:
                for name in o.probes_declared:
                    probes[name] = probes.get(name, False) or name in o.probes_reached
                states |= o.states
            self.db.record_chunk(self.key, seeds, sum(o.steps for o in outcomes), stored,
                                 bounded, probes, states)

    def close(self) -> None:
        self.db.close()
