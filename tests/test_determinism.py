"""Determinism both ways: the same seed gives the same bytes; different seeds differ."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from dst.registry import load
from dst.runner.single import run_one, run_seeds

from .simkit import many


def _hashes(name: str, overrides: dict[str, str], seeds: range) -> list[str]:
    scenario = load(name)
    return [r.trace().sha256() for r in many(scenario, seeds, scenario.config(overrides))]


def test_the_same_seed_gives_an_identical_trace_hash_over_1000_seeds() -> None:
    first = _hashes("counter", {"cas": "false"}, range(1000))
    second = _hashes("counter", {"cas": "false"}, range(1000))
    assert first == second


def test_different_seeds_give_different_traces() -> None:
    hashes = _hashes("ping", {}, range(300))
    assert len(set(hashes)) > 290


def test_a_seed_gives_the_same_trace_alone_as_in_a_batch() -> None:
    scenario = load("ping")
    config = scenario.config()
    batch: list[str] = []
    run_seeds(scenario, config, range(40, 60), lambda r: batch.append(r.trace().sha256()))
    alone = [run_one(scenario, config, seed).trace().sha256() for seed in range(40, 60)]
    assert batch == alone


# The records, not the whole file: the header names the hash seed it ran under.
_CHILD = """
import json, sys
from dst.registry import load
from dst.runner.single import run_seeds
s = load("ping"); out = []
run_seeds(s, s.config({"dedup": "false"}), range(200),
          lambda r: out.append("\\n".join(r.trace().record_lines())))
print(json.dumps(out))
"""


def test_hashes_are_identical_across_processes_with_different_hash_seeds() -> None:
    results = []
    for hash_seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                              env=env, check=True)
        results.append(json.loads(proc.stdout))
    assert results[0] == results[1]
    assert len(set(results[0])) > 150
