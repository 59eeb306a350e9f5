"""The complete example of docs/scenarios.md is pasted, run, and does what the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from dst.cli import main

PAGE = Path(__file__).resolve().parent.parent / "docs" / "scenarios.md"


def example() -> str:
    section = PAGE.read_text(encoding="utf-8").split("## A complete example", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the example section must hold exactly one python block"
    return blocks[0]


def test_the_documented_example_finds_its_bug_only_through_a_lost_reply(tmp_path: Path) -> None:
    source = tmp_path / "refund.py"
    source.write_text(example(), encoding="utf-8")
    runner = CliRunner()
    buggy = runner.invoke(main, ["run", str(source), "-c", "ask_first=false", "--seeds", "500",
                                 "--out", str(tmp_path / "t"), "--json"])
    assert buggy.exit_code == 1, buggy.output
    doc = json.loads(buggy.stdout)
    assert 25 <= doc["failed"] <= 200  # "about one seed in seven"
    failures = doc["failures"]  # those whose traces are kept
    shown = runner.invoke(main, ["show", failures[0]["trace"]])
    assert "its reply" in shown.output  # lost, or late past the timeout
    fixed = runner.invoke(main, ["run", str(source), "--seeds", "2000",
                                 "--out", str(tmp_path / "t"), "--json"])
    assert fixed.exit_code == 0, fixed.output


def test_dst_list_shows_what_dst_sees_in_a_users_file(tmp_path: Path) -> None:
    source = tmp_path / "refund.py"
    source.write_text(example(), encoding="utf-8")
    shown = CliRunner().invoke(main, ["list", str(source)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.startswith("refund: a timeout treated as 'not charged'")
    assert "-c ask_first=true" in shown.output
    assert "at end: NoChargeOnCancelledOrder" in shown.output
    assert "payments: lose_reply<=1 delay<=1" in shown.output
    assert "planted bug: -c ask_first=false breaks NoChargeOnCancelledOrder" in shown.output
    as_json = json.loads(CliRunner().invoke(main, ["list", str(source), "--json"]).stdout)
    assert [s["name"] for s in as_json["scenarios"]] == ["refund"]
    missing = CliRunner().invoke(main, ["list", str(tmp_path / "nope.py")])
    assert missing.exit_code == 2 and "no scenario file" in missing.output
