"""Coverage: ``dst.sometimes`` probes and ``@scenario.fingerprint`` states.

A probe records, once per run, that its condition held there; ``dst run`` lists
the probes some run called but none reached, and counts the distinct abstract
states the runs went through.  Outside a run a probe does nothing.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

import dst
from dst import Env, Scenario, Sim
from dst.cli import main
from dst.runner.single import replay_trace

from .simkit import many, one

#: A scenario file with three probes: one always reached, one in some runs
#: (when the second worker reads first), one never; and a fingerprint.
PROBED = textwrap.dedent('''
    from typing import Any

    import dst
    from dst import Env, Scenario, Sim

    scenario = Scenario("probed", doc="two workers, three probes")


    async def worker(env: Env, name: str, world: dict[str, Any]) -> None:
        seen = await env.store.get("n") or 0
        dst.sometimes(True, "started")
        dst.sometimes(name == "w2" and seen == 0, "w2 first")
        dst.sometimes(seen > 5, "never")
        await env.store.put("n", seen + 1)
        world["done"] += 1


    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        world = {"db": sim.store("db"), "done": 0}
        for name in ("w1", "w2"):
            sim.process(name, lambda env, name=name: worker(env, name, world), stores=["db"])
        return world


    @scenario.fingerprint
    def state(world: Any) -> Any:
        return (world["db"].peek("n"), world["done"])
''')


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_sometimes_outside_a_run_only_returns_its_condition() -> None:
    assert dst.sometimes(True, "x") is True
    assert dst.sometimes(0, "x") == 0
    marker = object()
    assert dst.sometimes(marker, "x") is marker


def _probing(calls: list[tuple[Any, str]]) -> Scenario:
    scenario = Scenario("probing", doc="probes in a loop")

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> None:
        async def main(env: Env) -> None:
            for condition, name in calls:
                await env.store.get("k")
                assert dst.sometimes(condition, name) == condition

        sim.process("p", main, stores=["db"])

    return scenario


def test_a_probe_is_recorded_the_first_time_it_holds_in_a_run_and_only_then() -> None:
    calls = [(False, "a"), (True, "a"), (1, "a"), (True, "b"), (False, "c"), (True, "a")]
    result = one(_probing(calls))
    probes = [(r["step"], r["event"]) for r in result.trace().records
              if r["type"] == "event" and r["actor"] == "probe"]
    assert [event for _, event in probes] == ["sometimes a", "sometimes b"]
    assert probes[0][0] == 2  # where it first held: after the second call's step
    assert result.probes_declared == {"a", "b", "c"}
    assert result.probes_reached == {"a", "b"}


def test_probes_are_kept_per_run() -> None:
    results = many(_probing([(True, "a")]), range(3))
    assert all(r.probes_reached == {"a"} for r in results)
    assert all(sum(1 for r in res.trace().records if r["type"] == "event") == 1
               for res in results)


def test_a_run_with_probes_replays_identically() -> None:
    result = one(_probing([(False, "a"), (True, "a"), (True, "b")]))
    replayed = replay_trace(_probing([(False, "a"), (True, "a"), (True, "b")]), result.trace())
    assert replayed.divergence is None


def test_fingerprints_are_taken_at_every_step_and_counted_distinct() -> None:
    scenario = Scenario("steps", doc="one process counting")

    @scenario.setup
    def setup(sim: Sim, config: dict[str, Any]) -> Any:
        db = sim.store("db")

        async def main(env: Env) -> None:
            for i in range(5):
                await env.store.put("i", i)
            for i in range(5):
                await env.store.put("i", i)

        sim.process("p", main, stores=["db"])
        return db

    @scenario.fingerprint
    def state(db: Any) -> Any:
        return {"i": db.peek("i")}  # unhashable: counted by its canonical text

    result = one(scenario)
    assert len(result.states) == 6  # nothing yet, then 0..4 (each twice)
    assert result.verdict == "pass"


def _write(tmp_path: Path) -> str:
    path = tmp_path / "probed.py"
    path.write_text(PROBED)
    return str(path)


def test_run_lists_the_probes_never_reached_and_the_distinct_states(tmp_path: Path) -> None:
    ref = _write(tmp_path)
    result = invoke("run", ref, "--seeds", "40", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "probes: 2 of 3 reached; never reached: never" in result.stdout
    assert "distinct fingerprints (taken at every step)" in result.stdout
    doc = json.loads(invoke("run", ref, "--seeds", "40", "--out", str(tmp_path / "out2"),
                            "--json").stdout)
    coverage = doc["coverage"]
    assert coverage["probes"] == ["never", "started", "w2 first"]
    assert coverage["never_reached"] == ["never"]
    assert isinstance(coverage["states"], int) and coverage["states"] > 3


def test_coverage_adds_up_across_resume(tmp_path: Path) -> None:
    ref = _write(tmp_path)
    out = str(tmp_path / "out")
    whole = json.loads(invoke("run", ref, "--seeds", "40", "--out", str(tmp_path / "all"),
                              "--json").stdout)["coverage"]
    invoke("run", ref, "--seeds", "20", "--out", out, "--json")
    resumed = json.loads(invoke("run", ref, "--seeds", "40", "--resume", "--out", out,
                                "--json").stdout)
    assert resumed["resumed"] == 20
    assert resumed["coverage"] == whole


def test_a_scenario_without_probes_or_fingerprint_reports_no_coverage(tmp_path: Path) -> None:
    result = invoke("run", "counter", "--seeds", "5", "--out", str(tmp_path))
    assert "probes:" not in result.stdout and "states:" not in result.stdout
    doc = json.loads(invoke("run", "counter", "--seeds", "5", "--out", str(tmp_path / "j"),
                            "--json").stdout)
    assert doc["coverage"] == {"probes": [], "never_reached": [], "states": None}
