"""Failure memory is bounded: at most ``--max-groups`` groups, their traces, and counts.

A scenario whose every seed fails with a message of its own (the seed spelled in
letters, which a signature does not fold) would otherwise make a group, a trace
file and a report entry of each failing seed.  With ``--max-groups 5`` over 300
such seeds, the first five groups in seed order are kept (seeds 0..4: three
``Even``, two ``Odd``) and the other 295 failing seeds are counted per invariant
(``Even`` x147, ``Odd`` x148) in every output.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.runner.bulk import BulkSummary, run_chunk
from dst.runner.groups import GroupBook, KeepPolicy
from tests import test_cluster

#: A Dask scheduler with two workers on loopback (``tests/test_cluster.py``).
cluster = test_cluster.cluster

DISTINCT = '''
from dst import Env, Scenario, Sim

scenario = Scenario("distinct", doc="every seed fails with a message of its own")


async def worker(env: Env) -> None:
    await env.store.put("x", 1)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    sim.process("worker", worker, stores=["db"])
    return sim.seed


def letters(seed: int) -> str:
    return "".join("abcdefghij"[int(d)] for d in str(seed))


@scenario.invariant("Even")
def even(seed: int) -> bool | str:
    return seed % 2 != 0 or f"even seed {letters(seed)} broke it"


@scenario.invariant("Odd")
def odd(seed: int) -> bool | str:
    return seed % 2 != 1 or f"odd seed {letters(seed)} broke it"
'''

SEEDS = 300
MAX = 5
#: The first five groups in seed order are seeds 0..4; the rest are counted.
KEPT_SEEDS = [0, 1, 2, 3, 4]
NOT_KEPT = {"Even": 147, "Odd": 148}
NOT_KEPT_LINE = "and 295 more failing seeds in groups not kept: Even x147, Odd x148"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def scenario(tmp_path: Path) -> str:
    path = tmp_path / "distinct.py"
    path.write_text(DISTINCT, encoding="utf-8")
    return str(path)


def _json(*args: str) -> dict[str, Any]:
    done = invoke(*args, "--json")
    assert done.exit_code == 1, done.output
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _trace_seeds(out: Path) -> set[int]:
    """The seeds with a trace (or a shrunk one) under ``out``."""
    seeds = set()
    for path in out.iterdir():
        m = re.fullmatch(r"distinct-(\d+)(\.min)?\.jsonl", path.name)
        assert m or path.name == "results.sqlite", path.name
        if m:
            seeds.add(int(m.group(1)))
    return seeds


def _groups(doc: dict[str, Any]) -> list[dict[str, Any]]:
    # Where the kept traces are differs between two --out directories; nothing else may.
    return [{k: v for k, v in g.items() if k not in ("traces", "shrunk")}
            for g in doc["groups"]]


def test_max_groups_bounds_the_summary_the_reports_and_the_traces(
    scenario: str, tmp_path: Path,
) -> None:
    out, md, xml = tmp_path / "out", tmp_path / "summary.md", tmp_path / "junit.xml"
    done = invoke("run", scenario, "--seeds", str(SEEDS), "--max-groups", str(MAX),
                  "--out", str(out), "--summary-md", str(md), "--junit", str(xml))
    assert done.exit_code == 1, done.output
    text = done.stdout

    # The text summary: five groups told, the rest counted per invariant.
    told = [int(n) for n in re.findall(r"^  group (\d+): ", text, re.M)]
    assert told == [1, 2, 3, 4, 5]
    assert f"... {NOT_KEPT_LINE} (--max-groups {MAX} " in text
    assert f"{SEEDS} runs, {SEEDS} failed (Even x150, Odd x150) in more than {MAX} groups" \
        in text

    # Traces on disk: of the five groups kept, none of any other.
    assert _trace_seeds(out) <= set(KEPT_SEEDS)
    assert len(_trace_seeds(out)) <= MAX

    # JUnit: well formed, a failing test case per group and one for the rest, and
    # never more failures than tests.
    root = ET.parse(xml).getroot()
    [suite] = root.findall("testsuite")  # <testsuites> counts nothing: Ant's schema
    tests, failures = int(suite.get("tests") or 0), int(suite.get("failures") or 0)
    assert (tests, failures) == (MAX + 1, MAX + 1)
    cases = suite.findall("testcase")
    assert len(cases) == len(list(suite.iter("failure"))) == MAX + 1
    rest = [c for c in cases if (c.get("name") or "").endswith("groups not kept")]
    assert len(rest) == 1
    [failure] = rest[0].findall("failure")
    assert NOT_KEPT_LINE in (failure.get("message") or "")
    assert failure.get("type") == "Even, Odd"

    # Markdown: five rows in the table, and the line of counts.
    lines = md.read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"### dst run distinct: {SEEDS} failing seeds in more than {MAX} groups"
    rows = [line for line in lines if re.match(r"\| \d+ \| ", line)]
    assert len(rows) == MAX
    assert sum(1 for line in lines if line.startswith("#### Group ")) == MAX
    assert any(line.startswith(NOT_KEPT_LINE) for line in lines)


def test_the_json_document_counts_the_rest_and_workers_keep_the_same_groups(
    scenario: str, tmp_path: Path,
) -> None:
    docs = [_json("run", scenario, "--seeds", str(SEEDS), "--max-groups", str(MAX),
                  "--workers", str(workers), "--out", str(tmp_path / f"w{workers}"))
            for workers in (1, 2)]
    for doc in docs:
        assert doc["max_groups"] == MAX
        assert doc["not_kept"] == {"failed": 295, "by_invariant": NOT_KEPT}
        assert doc["failed"] == SEEDS and doc["by_invariant"] == {"Even": 150, "Odd": 150}
        assert [g["first_seed"] for g in doc["groups"]] == KEPT_SEEDS
        assert sorted(f["seed"] for f in doc["failures"]) == KEPT_SEEDS
    assert _groups(docs[0]) == _groups(docs[1])
    assert _trace_seeds(tmp_path / "w1") == _trace_seeds(tmp_path / "w2") == set(KEPT_SEEDS)


def test_resume_keeps_the_groups_kept_before_and_counts_the_rest_as_one_run_would(
    scenario: str, tmp_path: Path,
) -> None:
    out = str(tmp_path / "out")
    first = _json("run", scenario, "--seeds", str(SEEDS // 2), "--max-groups", str(MAX),
                  "--out", out)
    assert first["not_kept"]["failed"] == SEEDS // 2 - MAX
    resumed = _json("run", scenario, "--seeds", str(SEEDS), "--max-groups", str(MAX),
                    "--resume", "--out", out)
    whole = _json("run", scenario, "--seeds", str(SEEDS), "--max-groups", str(MAX),
                  "--out", str(tmp_path / "whole"))
    assert resumed["resumed"] == SEEDS // 2
    assert _groups(resumed) == _groups(whole)
    assert resumed["not_kept"] == whole["not_kept"] == {"failed": 295, "by_invariant": NOT_KEPT}
    assert _trace_seeds(Path(out)) == set(KEPT_SEEDS)


def test_the_default_keeps_about_a_hundred_groups(scenario: str, tmp_path: Path) -> None:
    doc = _json("run", scenario, "--seeds", str(SEEDS), "--out", str(tmp_path / "out"))
    kept = doc["max_groups"]
    assert 50 <= kept <= 200 and len(doc["groups"]) == kept
    assert doc["not_kept"]["failed"] == SEEDS - kept
    assert len(_trace_seeds(tmp_path / "out")) == kept


@pytest.mark.parametrize("bad", ["0", "-3", "many", "", "2.5"])
def test_a_bad_max_groups_is_one_line_and_exit_2(bad: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = invoke("run", "counter", "--seeds", "10", "--max-groups", bad, "--out", str(out))
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.startswith("error: Invalid value for '--max-groups': ")
    assert f"{bad!r} is not a count of failure groups of at least 1" in done.stderr
    assert done.stderr.count("\n") == 1
    assert not out.exists()  # refused before anything ran


def test_the_watching_process_holds_at_most_max_groups_whatever_the_failures() -> None:
    summary = BulkSummary(keep_traces=False, groups=GroupBook(1, MAX))
    for seed in range(10_000):
        sig = json.dumps([["Even"], f"message {seed:x}", ""])
        summary.count_failure(seed, 3, ("Even",), sig)
    book = summary.groups
    assert len(book.groups) == MAX and book.live == MAX
    assert (book.not_kept_failed, book.not_kept) == (10_000 - MAX, {"Even": 10_000 - MAX})
    assert summary.failed == 10_000 and summary.by_invariant == {"Even": 10_000}
    # Once the book is full, workers are told to render no trace of another group.
    policy = book.policy(0)
    assert policy is not None and policy.only is not None and len(policy.only) == MAX


def test_workers_render_no_trace_of_a_group_that_is_not_kept(scenario: str) -> None:
    outcomes = run_chunk(scenario, {}, list(range(20)), keep=KeepPolicy(1, only=frozenset()))
    assert all(o.verdict == "fail" for o in outcomes)
    assert all(o.trace_text is None for o in outcomes)


@test_cluster.needs_dask
def test_a_run_on_a_cluster_keeps_the_same_groups_as_a_local_one(
    cluster: test_cluster.Cluster, scenario: str, tmp_path: Path,
) -> None:
    def run(*where: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-m", "dst", "run", scenario, "--seeds", str(SEEDS),
             "--max-groups", str(MAX), *where, "--json"], cwd=tmp_path, capture_output=True,
            text=True, timeout=10 * test_cluster.STARTUP, check=False)
        assert done.returncode == 1, done.stderr
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    there = run("--cluster", cluster.address, "--out", str(tmp_path / "cluster"))
    here = run("--workers", "1", "--out", str(tmp_path / "local"))
    assert _groups(there) == _groups(here)
    assert [g["first_seed"] for g in there["groups"]] == KEPT_SEEDS
    assert there["not_kept"] == here["not_kept"] == {"failed": 295, "by_invariant": NOT_KEPT}
    assert _trace_seeds(tmp_path / "cluster") == set(KEPT_SEEDS)
