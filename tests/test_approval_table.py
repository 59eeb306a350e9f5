"""The verdict table: every spend design, its verdict found by running it."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dst.commands.table import command as table_command

QUIET = ["-c", "crashes=0", "-c", "drops=0", "-c", "dups=0", "-c", "llm=happy"]


def _rows(args: list[str]) -> dict[tuple[str, bool, bool], dict]:
    result = CliRunner().invoke(table_command, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    return {(r["config"]["spend_mode"], r["config"]["fresh_view"], r["config"]["serialize"]): r
            for r in doc["rows"]}


def test_the_table_has_a_row_for_every_spend_design_and_cas_passes() -> None:
    rows = _rows(["approval", "--seeds", "60", "--json"])
    assert len(rows) == 12
    for (mode, _fresh, _serial), row in rows.items():
        if mode == "cas":
            assert row["verdict"] == "pass", row
        if mode == "after":
            assert "NoResurrection" in row["failures"], row


def test_checking_at_most_once_alone_gives_the_published_trace_lengths() -> None:
    """After the effect: 6 actions; before, fresh view, separate write: 8 (a lost update)."""
    rows = _rows(["approval", "--seeds", "150", "--invariant", "AtMostOnce", "--json", *QUIET])
    assert rows[("after", True, False)]["failures"]["AtMostOnce"]["shortest_actions"] == 6
    assert rows[("before", True, False)]["failures"]["AtMostOnce"]["shortest_actions"] == 8
    assert rows[("before", True, True)]["verdict"] == "pass"
    assert rows[("cas", True, False)]["verdict"] == "pass"


def test_the_text_table_names_the_first_failing_seed() -> None:
    result = CliRunner().invoke(table_command, ["approval", "--seeds", "20"])
    assert result.exit_code == 0, result.output
    assert "after      true       false      fail     NoResurrection (first seed" in result.output


def test_an_unknown_invariant_is_bad_input() -> None:
    result = CliRunner().invoke(table_command, ["approval", "--seeds", "5", "--invariant", "Nope"])
    assert result.exit_code == 2
    assert "has no invariant 'Nope'" in result.output


def test_a_scenario_without_the_three_switches_is_bad_input() -> None:
    result = CliRunner().invoke(table_command, ["counter", "--seeds", "5"])
    assert result.exit_code == 2
    assert "counter has no switch spend_mode" in result.output
    assert "Traceback" not in result.output


def test_a_strategy_without_vary_is_bad_input() -> None:
    result = CliRunner().invoke(table_command, ["approval", "--seeds", "5", "--strategy", "pct"])
    assert result.exit_code == 2
    assert "--strategy and --max-steps go with --vary" in result.output
