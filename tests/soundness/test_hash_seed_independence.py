"""Every shipped scenario gives the same records for a seed whatever the process's hash seed.

Two child processes, started with different ``PYTHONHASHSEED`` values, run the
same seeds of each scenario and print a digest of each run's records.  The
digests must agree: a trace attached to a bug report replays on any machine.
Each child runs every scenario in turn (two interpreter start-ups, not two per
scenario), and the two run at once.  ``DST_SOAK=1`` runs 10,000 seeds of each
scenario instead of a few dozen.
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
import hashlib, json, sys, traceback
from dst.registry import load
from dst.runner.single import run_seeds
seeds, names = int(sys.argv[1]), sys.argv[2:]
out = {}
for name in names:
    digests = []
    def keep(result):
        lines = "\\n".join(result.trace().record_lines())
        digests.append(hashlib.sha256(lines.encode()).hexdigest())
    try:
        scenario = load(name)
        run_seeds(scenario, scenario.config(), range(seeds), keep)
    except Exception:
        out[name] = traceback.format_exc()[-2000:]
    else:
        out[name] = digests
print(json.dumps(out))
"""

#: Each scenario's digests per seed (or the error it stopped with), by hash seed.
Digests = dict[str, dict[str, list[str] | str]]


@pytest.fixture(scope="module")
def digests() -> Digests:
    children = {hash_seed: subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(SEEDS), *SHIPPED], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONHASHSEED=hash_seed))
        for hash_seed in ("0", "1")}
    found: Digests = {}
    for hash_seed, child in children.items():
        stdout, stderr = child.communicate(timeout=3600 * len(SHIPPED))
        assert child.returncode == 0, stderr[-2000:]
        found[hash_seed] = json.loads(stdout)
    return found


@pytest.mark.parametrize("name", SHIPPED)
def test_a_seed_gives_the_same_records_under_any_hash_seed(name: str, digests: Digests) -> None:
    first, second = digests["0"][name], digests["1"][name]
    assert isinstance(first, list), first
    assert isinstance(second, list), second
    assert len(first) == SEEDS
    differing = [seed for seed, (a, b) in enumerate(zip(first, second, strict=True)) if a != b]
    assert differing == [], f"{name}: seeds {differing[:10]} depend on the hash seed"
