"""The README's own scenario is pasted, run, and finds its bug (and passes without it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
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



# -- the Quick start's test line -------------------------------------------------------

#: How far the README's count of tests may drift from what pytest collects now.
DRIFT = 0.05


def readme_test_summary() -> str:
    """The last line of the Quick start's pytest output: ``=== N passed, M skipped in ...``."""
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    after = quick.split("pip install -e '.[test]' && pytest\n```\n```\n", 1)[1].split("```")[0]
    lines = [line for line in after.splitlines() if line.strip()]
    assert lines[-1].startswith("=") and lines[-1].endswith("="), lines[-1]
    return lines[-1]


def collected_by_pytest(session: pytest.Session) -> int:
    """How many tests a plain ``pytest`` at the root collects (pinned traces included): this
    session's own count when it is that run (every test path, nothing deselected), else the
    count of a ``pytest --collect-only`` run for it, which costs a collection of its own."""
    config = session.config
    option = config.option
    if (config.args_source is pytest.Config.ArgsSource.TESTPATHS
            and config.rootpath == README.parent
            and not (option.keyword or option.markexpr or option.deselect or option.ignore
                     or option.ignore_glob)):
        return len(session.items)
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=README.parent, capture_output=True, text=True, check=False, timeout=300)
    found = re.search(r"^(\d+) tests? collected", collected.stdout, re.M)
    assert found, collected.stdout[-2000:] + collected.stderr[-2000:]
    return int(found.group(1))


def test_the_readme_test_line_counts_the_tests_there_are(request: pytest.FixtureRequest) -> None:
    """The README shows what ``pytest`` prints; its count must stay within a few percent of
    the tests pytest collects today (pinned traces included), or it is stale."""
    summary = readme_test_summary()
    counts = {word: int(n.replace(",", "")) for n, word in
              re.findall(r"(\d[\d,]*) (passed|skipped|xfailed|xpassed|failed|errors?)",
                         summary)}
    assert counts.get("passed"), summary
    assert not {"failed", "error", "errors"} & counts.keys(), f"the README shows {summary}"
    shown = sum(counts.values())
    total = collected_by_pytest(request.session)
    assert abs(shown - total) <= DRIFT * total, (
        f"README.md's test line says {shown} tests ({summary.strip('= ')}), pytest collects "
        f"{total}: run `pytest` and paste its first, last and summary lines into the Quick "
        "start")
