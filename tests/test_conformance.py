"""`dst conformance`: the specs' verdicts beside the real code's, and both stories.

The comparison itself needs Java and TLC (the tests that run it skip, saying
why, where either is missing); steering the code through a spec story, the map
checks and `dst table --vary` run everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.errors import DstError
from dst.explore import exhaustive
from dst.explore.follow import is_fault
from dst.registry import load as load_scenario
from dst.specs import Tlc, find, locate
from dst.specs.catalog import SPECS_DIR
from dst.specs.conformance import bounds_for
from dst.specs.conformance import load as load_conformance
from dst.specs.steer import Step, follow, spec_story
from dst.specs.tlc import Outcome

APPROVAL = find("approval")[0]
REPLENISH = find("replenish_order")[0]
soak = pytest.mark.skipif(not os.environ.get("DST_SOAK"), reason="set DST_SOAK=1 to soak")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def tlc() -> Tlc:
    try:
        return locate()
    except DstError as err:
        pytest.skip(f"TLC cannot run on this machine: {err}")


@pytest.fixture(scope="module")
def approval(tlc: Tlc, tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, dict[str, Any]]:
    """`dst conformance approval`, the whole cross product, as CI runs it."""
    out = tmp_path_factory.mktemp("conformance")
    result = invoke("conformance", "approval", "--jobs", "2", "--out", str(out), "--json")
    return result, json.loads(result.stdout)


def cells(doc: dict[str, Any]) -> dict[tuple[str, bool, bool], dict[str, Any]]:
    return {(r["constants"]["SpendMode"], r["constants"]["FreshView"],
             r["constants"]["Serialize"]): r["invariants"] for r in doc["rows"]}


def told(steps: list[dict[str, Any]]) -> list[tuple[str | None, str]]:
    return [(s["actor"], s["action"]) for s in steps]


# -- the approval spec against the approval runtime --------------------------------------


def test_the_approval_spec_and_the_runtime_agree_on_every_design(
        approval: tuple[Result, dict[str, Any]]) -> None:
    result, doc = approval
    assert result.exit_code == 0, result.output
    assert doc["agree"] and doc["disagreements"] == 0
    rows = cells(doc)
    assert len(rows) == 12  # every spend_mode x fresh_view x serialize
    for key, invariants in rows.items():
        for name, cell in invariants.items():
            assert cell["agree"], (key, name)
            if cell["code"]["verdict"] != "violated":
                assert cell["code"]["proof"], (key, name)  # every schedule ran: a proof
    lost_update = rows[("before", True, False)]["AtMostOnce"]
    assert lost_update["spec"]["states"] == 9
    assert len(lost_update["code"]["story"]) == 8  # restore, check, spend, effect, twice
    assert rows[("cas", False, False)]["AtMostOnce"]["spec"]["verdict"] == "holds"


def test_a_spec_counterexample_replays_on_the_runtime_as_an_ordinary_trace(
        approval: tuple[Result, dict[str, Any]], tmp_path: Path) -> None:
    _, doc = approval
    cell = cells(doc)[("before", True, False)]["AtMostOnce"]
    on_code = cell["spec_on_code"]
    assert on_code["followed"] == on_code["of"] == 8
    assert on_code["departure"] is None
    assert told(on_code["story"]) == told(cell["spec"]["story"])
    assert on_code["violated"] == ["AtMostOnce"]
    replay = invoke("replay", on_code["trace"])
    assert replay.exit_code == 1 and replay.stdout.startswith("identical: "), replay.output
    pinned = invoke("pin", on_code["trace"], "--name", "lost-update-from-tlc",
                    "--dir", str(tmp_path))
    assert pinned.exit_code == 0, pinned.output


def test_a_wrong_map_is_a_disagreement_told_as_both_stories(tlc: Tlc, tmp_path: Path) -> None:
    for name in ("approval.tla", "approval.cfg"):
        shutil.copy(SPECS_DIR / name, tmp_path / name)
    doc = json.loads((SPECS_DIR / "approval.map.json").read_text())
    doc["invariants"] = [{"name": "AtMostOnce", "scenario_invariant": "NoResurrection"},
                         {"name": "NoResurrection", "scenario_invariant": "AtMostOnce"}]
    (tmp_path / "approval.map.json").write_text(json.dumps(doc))
    result = invoke("conformance", "approval", "--dir", str(tmp_path), "--out",
                    str(tmp_path / "t"), "-c", "SpendMode=after", "-c", "FreshView=TRUE",
                    "-c", "Serialize=TRUE")
    assert result.exit_code == 1, result.output
    out = result.stdout
    assert "DIFFERS: NoResurrection at SpendMode=after, FreshView=TRUE, Serialize=TRUE" in out
    story = "turn-1 restore, turn-1 check, turn-1 effect"
    assert f"  spec: {story} -> NoResurrection violated (4 states)" in out
    assert f"  code, made to follow it: {story} -> broke NoResurrection" in out
    assert f"  code: {story} -> NoResurrection violated" in out  # AtMostOnce's pair
    assert "2 of 2 verdicts differ" in out
    # The spec's NoResurrection story, run on the code, breaks what the wrong map pairs
    # it with only under another name: said so, not counted as reproduced.
    assert "spec counterexamples run on the code: 0 of 1 reproduced" in out
    assert ("  NoResurrection at SpendMode=after, FreshView=TRUE, Serialize=TRUE, Crash=FALSE on "
            "approval: broke NoResurrection instead, 3 of 3 spec steps taken: dst replay ") in out


def test_a_spec_without_a_conformance_section_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for name in ("approval.tla", "approval.cfg"):
        shutil.copy(SPECS_DIR / name, tmp_path / name)
    doc = json.loads((SPECS_DIR / "approval.map.json").read_text())
    del doc["conformance"]
    (tmp_path / "approval.map.json").write_text(json.dumps(doc))
    result = invoke("conformance", "approval", "--dir", str(tmp_path))
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: spec approval has no conformance section")


# -- steering the code through a story (no TLC needed) ------------------------------------


def steer(story: list[tuple[str, str]], **switches: Any) -> Any:
    conf, scenarios = load_conformance(APPROVAL)
    (pair,) = conf.pairs
    scenario = scenarios["approval"]
    config = scenario.checked_config({"llm": "happy", "crashes": 0, "drops": 0, "dups": 0,
                                      **switches})
    bounds = bounds_for(scenario, config, pair.search)
    plan = exhaustive.fault_plan(scenario, config, bounds)
    return follow(conf, scenario, config, plan, [Step(a, b) for a, b in story],
                  max_steps=bounds.max_steps + 1)


LOST_UPDATE = [("turn-1", "restore"), ("turn-1", "check"), ("turn-2", "restore"),
               ("turn-2", "check"), ("turn-1", "spend"), ("turn-1", "effect"),
               ("turn-2", "spend"), ("turn-2", "effect")]


def test_the_code_takes_a_story_step_by_step_and_the_run_replays() -> None:
    done = steer(LOST_UPDATE, spend_mode="before")
    assert done.steer.followed == len(LOST_UPDATE)
    assert [(s.actor, s.action) for s in done.story] == LOST_UPDATE
    assert done.result.violated == ["AtMostOnce"]
    assert exhaustive.replays(load_scenario("approval"), done.result.trace()) is None


def test_a_step_the_code_cannot_take_is_a_departure() -> None:
    """With serialised turns, turn-2 cannot restore while turn-1 is in its turn."""
    done = steer(LOST_UPDATE, spend_mode="before", serialize=True)
    assert done.departure().startswith("at spec step 3 (turn-2 restore)")
    assert done.result.violated == []
    assert [(s.actor, s.action) for s in done.story][:5] == [
        ("turn-1", "restore"), ("turn-1", "check"), ("turn-1", "spend"), ("turn-1", "effect"),
        ("turn-1", "record")]


# -- the replenisher's stories on the code (no TLC needed) ---------------------------------


def steer_replenisher(scenario: str, story: list[tuple[str, str]], **switches: Any) -> Any:
    """Run one replenish scenario steered through ``story``, under its own fault plan
    (the lost replies are its supplier's service faults), drops and duplicates off."""
    conf, scenarios = load_conformance(REPLENISH)
    scen = scenarios[scenario]
    config = scen.checked_config({"crashes": 0, "drops": 0, "dups": 0, **switches})
    return follow(conf, scen, config, scen.fault_plan(config), [Step(a, b) for a, b in story],
                  max_steps=scen.max_steps)


LOST_REPLY = [("r1", "start"), ("r1", "send"), ("r1", "supplier"), ("r1", "timeout"),
              ("r1", "send"), ("r1", "supplier")]


def chosen(done: Any) -> list[str]:
    return [labels[i] for labels, i in done.result.trace().decisions]


def test_a_lost_reply_story_steers_the_replenisher_into_a_second_order() -> None:
    done = steer_replenisher("replenish_lost_reply", LOST_REPLY, stable_key=False)
    assert done.steer.followed == len(LOST_REPLY) and done.unfinished() is None
    assert [(s.actor, s.action) for s in done.story] == LOST_REPLY
    assert done.result.violated == ["OneOrderPerPO"]
    # the one fault is the one the story asks for: the first attempt's reply is lost
    assert [c for c in chosen(done) if is_fault(c)] == [
        "replenisher/r1@call:supplier.order!lose_reply"]
    calls = [c for c in chosen(done) if "@call:supplier.order" in c]
    assert calls == ["replenisher/r1@call:supplier.order!lose_reply",
                     "replenisher/r1@call:supplier.order"]
    assert exhaustive.replays(load_scenario("replenish_lost_reply"), done.result.trace()) is None


def test_the_same_story_with_a_stable_key_orders_once() -> None:
    done = steer_replenisher("replenish_lost_reply", LOST_REPLY, stable_key=True)
    assert done.steer.followed == len(LOST_REPLY)
    assert done.result.violated == []


def test_a_second_replenishment_waits_while_the_entity_counts_the_first() -> None:
    story = [("r1", "start"), ("r2", "start")]
    broken = steer_replenisher("replenish_concurrency", story, count_active=False)
    assert broken.steer.followed == 2 and broken.result.violated == ["OneActivePerSku"]
    correct = steer_replenisher("replenish_concurrency", story, count_active=True)
    assert correct.departure().startswith("at spec step 2 (r2 start)")
    assert correct.result.violated == []


def test_a_spec_step_s_actor_is_read_from_sets_and_records_too() -> None:
    """StockCheck adds to the set ``active``; Supplier takes a record off ``net``."""
    conf, _ = load_conformance(REPLENISH)
    base = {"active": frozenset(), "net": frozenset(), "attempt": (0, 0), "waiting": (0, 0),
            "logged": (False, False), "replies": frozenset()}
    states = [base,
              dict(base, active=frozenset({1})),
              dict(base, active=frozenset({1, 2})),
              dict(base, active=frozenset({1, 2}), net=({"po": 2, "key": (2, 1)},),
                   attempt=(0, 1), waiting=(0, 1)),
              dict(base, active=frozenset({1, 2}), attempt=(0, 1), waiting=(0, 1),
                   replies=frozenset({2})),
              dict(base, active=frozenset({1, 2}), attempt=(0, 1), replies=frozenset(),
                   logged=(False, True)),
              dict(base, active=frozenset({1, 2}))]
    outcome = Outcome("OneActivePerSku", "violated", len(states), 7, 0.0,
                      ("Init", "StockCheck", "StockCheck", "Send", "Supplier", "Reply",
                       "CrashWorker"), states_seen=tuple(states))
    told_ = [(s.actor, s.action) for s in spec_story(conf, outcome)]
    # Reply is taken within the call (null in the map); a crash is of the whole process
    assert told_ == [("r1", "start"), ("r2", "start"), ("r2", "send"), ("r2", "supplier"),
                     (None, "crash")]


def test_a_map_pattern_for_an_action_no_spec_action_is_told_as_is_one_line(
        tmp_path: Path) -> None:
    for name in ("replenish_order.tla", "replenish_order.cfg"):
        shutil.copy(SPECS_DIR / name, tmp_path / name)
    doc = json.loads((SPECS_DIR / "replenish_order.map.json").read_text())
    doc["conformance"]["choices"]["timout"] = "@call:supplier\\.order!lose_reply$"
    (tmp_path / "replenish_order.map.json").write_text(json.dumps(doc))
    result = invoke("conformance", "replenish_order", "--dir", str(tmp_path))
    assert result.exit_code == 4
    (line,) = result.stderr.splitlines()
    assert "choices names code action 'timout', which no spec action is told as" in line


# -- dst table --vary --------------------------------------------------------------------------


def test_table_vary_gives_each_combination_a_verdict_and_the_shortest_story(
        tmp_path: Path) -> None:
    result = invoke("table", "counter", "--vary", "cas,workers", "--seeds", "30",
                    "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = {(r["values"]["cas"], r["values"]["workers"]): r["invariants"]["NoLostIncrement"]
            for r in doc["rows"]}
    assert len(rows) == 8
    assert all(rows[(True, w)]["verdict"] == "pass" for w in (1, 2, 3, 4))
    assert rows[(False, 1)]["verdict"] == "pass"
    lost = rows[(False, 2)]
    assert lost["verdict"] == "fail" and lost["failures"] > 0
    assert lost["story"][-1]["text"].startswith("VIOLATED NoLostIncrement")
    replay = invoke(*lost["replay"].split()[1:])
    assert replay.exit_code == 1 and replay.stdout.startswith("identical: "), replay.output


def test_table_vary_exhaustive_proves_the_correct_design(tmp_path: Path) -> None:
    result = invoke("table", "counter", "--vary", "cas", "--strategy", "exhaustive",
                    "-c", "increments=2", "--out", "/dev/null/never")
    assert result.exit_code == 2  # --out must be a directory dst can write
    assert "--out /dev/null/never cannot be created" in result.output
    result = invoke("table", "counter", "--vary", "cas", "--strategy", "exhaustive",
                    "-c", "increments=2", "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    verdicts = {r["values"]["cas"]: r["invariants"]["NoLostIncrement"]["verdict"]
                for r in json.loads(result.stdout)["rows"]}
    assert verdicts == {False: "fail", True: "holds"}


def test_table_vary_names_a_switch_the_scenario_lacks() -> None:
    result = invoke("table", "counter", "--vary", "cas,nope")
    assert result.exit_code == 2
    assert "counter has no switch 'nope'; it has: cas, workers, increments" in result.output


# -- the replenisher against its scenarios ---------------------------------------------------


def test_a_replenisher_counterexample_replays_on_the_real_code_as_an_ordinary_trace(
        tlc: Tlc, tmp_path: Path) -> None:
    """StableKey=FALSE: TLC's 7 states, run on the Replenisher, order PO-1 twice."""
    result = invoke("conformance", "replenish_order", "-c", "StableKey=FALSE", "-c",
                    "Crash=FALSE", "--out", str(tmp_path / "out"), "--json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    cell = row["invariants"]["OneOrderPerPO"]
    assert told(cell["spec"]["story"]) == LOST_REPLY
    on_code = cell["spec_on_code"]
    assert on_code["reproduced"] and on_code["violated"] == ["OneOrderPerPO"]
    assert on_code["followed"] == on_code["of"] == 6 and on_code["unfinished"] is None
    assert told(on_code["story"]) == LOST_REPLY
    replay = invoke("replay", on_code["trace"])
    assert replay.exit_code == 1 and replay.stdout.startswith("identical: "), replay.output
    assert "OneOrderPerPO" in replay.output
    pinned = invoke("pin", on_code["trace"], "--name", "second-order-from-tlc",
                    "--dir", str(tmp_path / "pinned"))
    assert pinned.exit_code == 0, pinned.output


# -- the replenisher, every row (a minute of seeded search: soak only) ---------------------------


@soak
def test_the_replenisher_spec_and_its_scenarios_agree(tlc: Tlc, tmp_path: Path) -> None:
    result = invoke("conformance", "replenish_order", "--jobs", "2", "--out", str(tmp_path),
                    "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {r["scenario"] for r in doc["rows"]} == {"replenish_lost_reply",
                                                   "replenish_concurrency"}
    followed = [c["spec_on_code"] for r in doc["rows"] for c in r["invariants"].values()
                if c["spec"]["verdict"] == "violated"]
    assert len(followed) == 4 and all(f["reproduced"] for f in followed)
