"""The README's own scenario is pasted, run, and finds its bug (and passes without it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from dst.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_scenario() -> str:
    """The one ```python block of the section "Test your own trio code"."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Test your own trio code", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the section must hold exactly one python block"
    return blocks[0]


def test_the_readme_scenario_fits_in_a_page() -> None:
    assert len(readme_scenario().splitlines()) <= 60


def test_the_readme_scenario_finds_its_planted_bug_and_passes_without_it(
    tmp_path: Path,
) -> None:
    source = tmp_path / "bank.py"
    source.write_text(readme_scenario(), encoding="utf-8")
    runner = CliRunner()
    buggy = runner.invoke(main, ["run", str(source), "-c", "locked=false", "--seeds", "300",
                                 "--out", str(tmp_path / "t"), "--json"])
    assert buggy.exit_code == 1, buggy.output
    failures = json.loads(buggy.stdout)["failures"]
    assert failures and all(f["violated"] == ["NoOverdraft"] for f in failures)
    replay = runner.invoke(main, ["replay", failures[0]["trace"], "--scenario", str(source)])
    assert replay.exit_code == 1 and replay.stdout.startswith("identical: "), replay.output

    fixed = runner.invoke(main, ["run", str(source), "--seeds", "300",
                                 "--out", str(tmp_path / "t"), "--json"])
    assert fixed.exit_code == 0, fixed.output
    assert json.loads(fixed.stdout)["failures"] == []

