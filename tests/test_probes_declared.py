"""Probes declared up front (``scenario.sometimes``) are reported even when their code never
runs: a ``dst.sometimes`` call declares a probe only once some run executes it, so a probe
in code no seed reached used to go unreported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst import Scenario
from dst.cli import main

RETRY = '''
import dst
from dst import Scenario

scenario = Scenario("retry", doc="a call that never fails, so its retry never runs")
{declare}


async def caller(env):
    for attempt in range(3):
        ok = await env.store.get("ok")
        dst.sometimes(True, "called")
        if ok:
            return
        dst.sometimes(True, "retried")  # never runs: ok is always true


@scenario.setup
def setup(sim, config):
    db = sim.store("db")
    db.put("ok", True)
    sim.process("caller", caller, stores=["db"])
'''


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _scenario(tmp_path: Path, declare: str) -> str:
    path = tmp_path / "retry.py"
    path.write_text(RETRY.format(declare=declare), encoding="utf-8")
    return str(path)


def _coverage(tmp_path: Path, source: str, *extra: str) -> dict[str, object]:
    done = invoke("run", source, "--seeds", "20", "--out", str(tmp_path / "out"), "--json",
                  *extra)
    assert done.exit_code == 0, done.output
    coverage: dict[str, object] = json.loads(done.stdout)["coverage"]
    return coverage


def test_a_probe_whose_code_never_runs_is_unknown_unless_declared(tmp_path: Path) -> None:
    coverage = _coverage(tmp_path, _scenario(tmp_path, ""))
    assert coverage["probes"] == ["called"] and coverage["never_reached"] == []


def test_a_declared_probe_never_reached_is_reported(tmp_path: Path) -> None:
    source = _scenario(tmp_path, 'scenario.sometimes("retried", "called", doc="a retry")')
    coverage = _coverage(tmp_path, source)
    assert coverage["probes"] == ["called", "retried"]
    assert coverage["never_reached"] == ["retried"]

    text = invoke("run", source, "--seeds", "20", "--out", str(tmp_path / "text"))
    assert text.exit_code == 0, text.output
    assert "probes: 1 of 2 reached; never reached: retried" in text.stdout

    # Resumed: the earlier runs' coverage and the declaration add up.
    resumed = _coverage(tmp_path, source, "--resume")
    assert resumed["never_reached"] == ["retried"]


def test_probe_names_are_non_empty_strings() -> None:
    scenario = Scenario("x", doc="")
    scenario.sometimes("a", "b", doc="both")
    assert scenario.probes == {"a": "both", "b": "both"}
    for bad in ("", "  ", 3):
        with pytest.raises(ValueError, match="non-empty string"):
            scenario.sometimes(bad)  # type: ignore[arg-type]
