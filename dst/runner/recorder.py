"""What ``dst run`` keeps of a run, as it goes: kept traces on disk, chunks in the database.

Called after every chunk, so both are written while the run goes on: a run
stopped by Ctrl-C (or killed, or the machine crashing) keeps every finished
chunk, and ``--resume`` starts from there.  Which failing traces are kept is the
group book's decision (``dst.runner.groups``); a trace that a shorter one of its
group displaces is deleted, so the directory holds a few traces per group
however long the run, and none of a group not kept (``--max-groups``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..trace.escape import encodable
from .bulk import BulkSummary, SeedOutcome
from .groups import BOUNDED_KEPT, Group, GroupBook
from .names import unclaimed_stem
from .results import ChunkRecord, ResultsDB, StoredFailure, count_within


def legacy_signature(violated: tuple[str, ...]) -> str:
    """The group of a failure recorded without a signature: what it violated, no more."""
    return json.dumps([list(violated), "", ""], separators=(",", ":"))


class Recorder:
    """Writes a run's kept traces and its chunks; reads an earlier run's back for ``--resume``."""

    def __init__(self, out_dir: str | Path, scenario: str, key: str, *,
                 record: bool = True, stem: str | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.scenario = scenario
        self.key = key
        self.record = record
        self.db = ResultsDB(out_dir)
        #: A kept trace's name before ``-SEED.jsonl`` (``dst.runner.names.trace_stem``),
        #: told apart from another file's traces of the same name kept here.
        self.stem = unclaimed_stem(stem or scenario, key, self.db.traces_kept())
        #: seed -> trace path, for the kept traces of runs cut at the step bound and
        #: of seeds that did not repeat themselves (failures' are in the groups).
        self.paths: dict[int, Path] = {}
        self.run_id: int | None = None
        self.began = time.monotonic()

    def start(self, config: Mapping[str, Any], strategy: str, seeds: str, shard: str | None,
              command: str, done: int) -> None:
        """Add this invocation to the ``runs`` table (``dst runs``)."""
        if self.record:
            # The command line may hold an argument that was not UTF-8 (a surrogate),
            # which the database cannot store: it is kept escaped, as it is printed.
            self.run_id = self.db.start_run(self.key, encodable(self.scenario), config,
                                            strategy, encodable(seeds), shard,
                                            encodable(command), done)

    def finish(self, summary: BulkSummary, status: str, groups: int) -> None:
        if self.run_id is not None:
            self.db.finish_run(self.run_id, status, summary.runs, summary.failed, groups,
                               time.monotonic() - self.began)

    def resume(self, summary: BulkSummary, start: int,
               stop: int | None) -> list[tuple[int, int]]:
        """Load earlier results of ``[start, stop)`` into ``summary``; return the done ranges."""
        done = self.db.done_ranges(self.key)
        summary.runs += count_within(done, start, stop)
        for seed, trace in self.db.bounded_within(self.key, start, stop):
            summary.add_bounded(seed)
            if trace and summary.bounded_kept < BOUNDED_KEPT:
                self.paths[seed] = Path(trace)
                summary.bounded_kept += 1
        book = summary.groups
        by_id: dict[int, Group] = {}
        for group in self.db.groups_of(self.key):
            book.add_loaded(group)
            by_id[group.id] = group
        for grp, (count, first, shortest) in self.db.count_groups(self.key, start,
                                                                  stop).items():
            group = by_id[grp]
            group.count, group.first_seed, group.shortest = count, first, shortest
            summary.failed += count
            for name in group.violated:
                summary.by_invariant[name] = summary.by_invariant.get(name, 0) + count
        for violated, count in self.db.not_kept_within(self.key, start, stop).items():
            summary.failed += count
            for name in violated:
                summary.by_invariant[name] = summary.by_invariant.get(name, 0) + count
            book.add_not_kept(violated, count)
        book.settle()  # the groups beyond --max-groups, if fewer than before: not kept
        for failure, gid in self.db.kept_within(self.key, start, stop):
            if gid is None:  # recorded before groups: counted here, once per resume
                sig = legacy_signature(failure.violated)
                summary.count_failure(failure.seed, failure.steps, failure.violated, sig)
                found = book.kept_group(sig)
            else:
                found = book.kept_group(by_id[gid].signature)
            if found is None:
                continue  # a group this run does not keep
            group = found
            group.kept.append((failure.steps, failure.seed, Path(failure.trace)))
            group.kept.sort(key=lambda k: k[:2])
        probes, states = self.db.coverage(self.key)
        summary.probes_declared |= set(probes)
        summary.probes_reached |= {name for name, hit in probes.items() if hit}
        summary.states |= states
        return done

    def trace_path(self, seed: int) -> Path:
        return self.out_dir / f"{self.stem}-{seed}.jsonl"

    def _write(self, o: SeedOutcome) -> Path:
        path = self.trace_path(o.seed)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(o.trace_text or "", encoding="utf-8")
        tmp.replace(path)  # never a half-written trace under the real name
        return path

    def chunk_done(self, summary: BulkSummary, outcomes: list[SeedOutcome]) -> None:
        """Write the traces of this chunk worth keeping, then mark the chunk done."""
        book: GroupBook = summary.groups
        rec = ChunkRecord([o.seed for o in outcomes], sum(o.steps for o in outcomes))
        for o in outcomes:
            if o.nondeterminism and o.trace_text is not None:
                self.paths[o.seed] = self._write(o)
            if o.verdict == "fail":
                self._failure(book, o, rec)
            elif o.ended == "bound":
                wanted = book.per_group is None or summary.bounded_kept < BOUNDED_KEPT
                if o.trace_text is not None and wanted:
                    path = self.paths[o.seed] = self._write(o)
                    summary.bounded_kept += 1
                    rec.bounded.append((o.seed, str(path)))
                else:
                    rec.bounded.append((o.seed, ""))
            for name in o.probes_declared:
                rec.probes[name] = rec.probes.get(name, False) or name in o.probes_reached
            rec.states |= o.states
        dropped = set(rec.dropped)
        rec.kept = [f for f in rec.kept if f.seed not in dropped]
        if self.record:
            if self.run_id is not None:
                rec.progress = (self.run_id, summary.runs, summary.failed, book.live,
                                time.monotonic() - self.began)
            self.db.record(self.key, rec)

    def _failure(self, book: GroupBook, o: SeedOutcome, rec: ChunkRecord) -> None:
        if o.signature is None:  # no signature (made by hand): grouped by its invariants
            found: Group | None = book.group(legacy_signature(o.violated))
        else:
            found = book.kept_group(o.signature)  # absorbed already: counted, or not kept
        if found is None:
            rec.not_kept.append((o.seed, o.violated))  # no group, no trace: a count
            return
        group = found
        if group.new:
            rec.groups.append((group.id, group.signature))
            group.new = False
        rec.failed.append((o.seed, group.id, o.steps))
        if o.trace_text is None or not book.wants(group, o.seed, o.steps):
            return
        path = self._write(o)
        for _steps, seed, old in book.keep(group, o.seed, o.steps, path):
            old.unlink(missing_ok=True)
            rec.dropped.append(seed)
        rec.kept.append(StoredFailure(o.seed, o.violated, o.steps, str(path)))

    def set_shrunk(self, group: Group) -> None:
        if self.record:
            self.db.set_shrunk(self.key, group)

    def close(self) -> None:
        self.db.close()
