"""Every shipped scenario gives the same records for a seed whatever the process's hash seed.

Two child processes, started with different ``PYTHONHASHSEED`` values, run the
same seeds of each scenario and print a digest of each run's records.  The
digests must agree: a trace attached to a bug report replays on any machine.
``DST_SOAK=1`` runs 10,000 seeds of each scenario instead of a few dozen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dst.registry import shipped

SEEDS = 10_000 if os.environ.get("DST_SOAK") else 40
SHIPPED = sorted(shipped())

_CHILD = """
import hashlib, json, sys
from dst.registry import load
from dst.runner.single import run_seeds
name, seeds = sys.argv[1], int(sys.argv[2])
scenario = load(name)
digests = []
def keep(result):
    lines = "\\n".join(result.trace().record_lines())
    digests.append(hashlib.sha256(lines.encode()).hexdigest())
run_seeds(scenario, scenario.config(), range(seeds), keep)
print(json.dumps(digests))
"""


def _digests(name: str, hash_seed: str) -> list[str]:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed)
    done = subprocess.run([sys.executable, "-c", _CHILD, name, str(SEEDS)],
                          capture_output=True, text=True, env=env, timeout=3600)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout))


@pytest.mark.parametrize("name", SHIPPED)
def test_a_seed_gives_the_same_records_under_any_hash_seed(name: str) -> None:
    first, second = _digests(name, "0"), _digests(name, "1")
    differing = [seed for seed, (a, b) in enumerate(zip(first, second, strict=True)) if a != b]
    assert differing == [], f"{name}: seeds {differing[:10]} depend on the hash seed"
