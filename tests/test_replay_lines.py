"""Every replay line dst prints runs as printed: the trace header remembers the scenario
file ``dst run`` loaded (``scenario_file``), ``dst show --scenario`` names one, and a
shrunk trace is titled with the seed it was shrunk from.

Shipped scenarios' headers are what they always were (the pinned traces replay byte for
byte: tests/test_pinned_traces.py); the new fields are optional and checked by the reader.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.errors import TraceFormatError
from dst.trace.codec import read_trace
from dst.trace.model import Trace, scenario_file
from tests.test_readme import readme_scenario

#: What a trace header of a shipped scenario has held since hash seeds were recorded.
SHIPPED_HEADER = {"type", "format", "version", "scenario", "config", "seed", "strategy",
                  "faults", "max_steps", "dst_version", "python", "trio", "hash_seed"}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The README's bank scenario in ``proj/bank.py``, with the cwd at its parent."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "bank.py").write_text(readme_scenario(), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _run_bank(*extra: str) -> dict[str, Any]:
    done = invoke("run", "proj/bank.py", "-c", "locked=false", "--seeds", "120",
                  "--out", "out", "--json", "--shrink", *extra)
    assert done.exit_code == 1, done.output
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _replay_lines(text: str) -> list[str]:
    return re.findall(r"dst replay [^<\n]*", text)


def _runs(line: str) -> Result:
    argv = shlex.split(line)
    assert argv[:2] == ["dst", "replay"], line
    return invoke(*argv[1:])


def test_dst_run_records_the_scenario_file_and_every_replay_line_runs(project: Path) -> None:
    doc = _run_bank()
    group = doc["groups"][0]
    trace_path, shrunk_path = group["traces"][0], group["shrunk"]["trace"]
    for path in (trace_path, shrunk_path):
        header = read_trace(path).header
        assert header["scenario_file"] == "proj/bank.py"  # relative to where dst run ran
        for fmt in ("markdown", "html"):
            shown = invoke("show", path, "--format", fmt)
            assert shown.exit_code == 0, shown.output
            assert "SCENARIO_FILE" not in shown.stdout
            lines = _replay_lines(shown.stdout)
            assert lines == [f"dst replay {path} --scenario proj/bank.py::bank"], lines
            again = _runs(lines[0])
            assert again.exit_code == 1 and again.stdout.startswith("identical: "), again.output


def test_a_shrunk_trace_is_titled_with_the_seed_it_was_shrunk_from(project: Path) -> None:
    doc = _run_bank()
    group = doc["groups"][0]
    seed = group["shortest_seed"]
    shrunk = read_trace(group["shrunk"]["trace"])
    assert shrunk.header["strategy"] == "shrink" and shrunk.header["shrunk_from"] == seed
    text = invoke("show", group["shrunk"]["trace"]).stdout
    assert text.splitlines()[0].startswith(f"bank [locked=false] seed {seed} (shrunk")
    markdown = invoke("show", group["shrunk"]["trace"], "--format", "markdown").stdout
    assert markdown.startswith(f"### bank seed {seed} (shrunk): fail\n")
    assert f"- seed: {seed} (shrunk" in markdown and "strategy shrink" not in markdown
    page = invoke("show", group["shrunk"]["trace"], "--format", "html").stdout
    assert f"<small>seed {seed} (shrunk)</small>" in page and "strategy shrink" not in page
    assert f"<title>dst: bank seed {seed} (shrunk): fail</title>" in page
    if shrunk.header["seed"] != seed:  # found on another walk: its own seed is still told
        assert f"its run draws from seed {shrunk.header['seed']}" in markdown


def test_dst_show_scenario_names_the_file_for_a_trace_that_does_not(project: Path) -> None:
    doc = _run_bank()
    path = Path(doc["groups"][0]["traces"][0])
    old = read_trace(path)
    del old.header["scenario_file"]  # as written by dst before the field, or from Python
    legacy = project / "legacy.jsonl"
    legacy.write_text(Trace(old.header, old.records, old.footer).text(), encoding="utf-8")

    placeholder = invoke("show", "legacy.jsonl", "--format", "markdown").stdout
    assert _replay_lines(placeholder) == [
        "dst replay legacy.jsonl --scenario SCENARIO_FILE.py  # SCENARIO_FILE.py: the file (or "
        "module) that defines the trace's scenario; the trace does not say"]
    for fmt in ("markdown", "html"):
        shown = invoke("show", "legacy.jsonl", "--format", fmt, "--scenario", "proj/bank.py")
        assert shown.exit_code == 0, shown.output
        lines = _replay_lines(shown.stdout)
        assert lines == ["dst replay legacy.jsonl --scenario proj/bank.py"], lines
        assert _runs(lines[0]).exit_code == 1

    wrong = invoke("show", "legacy.jsonl", "--format", "markdown", "--scenario", "counter")
    assert wrong.exit_code == 2
    assert wrong.stderr.startswith("error: counter defines scenario 'counter', but ")
    missing = invoke("show", "legacy.jsonl", "--scenario", "proj/nothing.py")
    assert missing.exit_code == 2 and "no scenario file proj/nothing.py" in missing.stderr


def test_dst_show_from_another_directory_prints_a_replay_line_that_runs_there(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _run_bank()["groups"][0]["traces"][0]  # out/bank-N.jsonl, from tmp_path
    (project / "elsewhere").mkdir()
    monkeypatch.chdir(project / "elsewhere")
    shown = invoke("show", f"../{trace}", "--format", "markdown")
    assert shown.exit_code == 0, shown.output
    lines = _replay_lines(shown.stdout)
    assert lines == [f"dst replay ../{trace} --scenario ../proj/bank.py::bank"], lines
    again = _runs(lines[0])
    assert again.exit_code == 1 and again.stdout.startswith("identical: "), again.output
    refused = invoke("replay", f"../{trace}")  # the --scenario it asks for, from here too
    assert refused.exit_code == 2 and "--scenario ../proj/bank.py::bank" in refused.stderr


def test_dst_show_says_what_to_fill_in_when_the_recorded_file_is_not_found(
        project: Path, tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    trace = Path(_run_bank()["groups"][0]["traces"][0])
    away = tmp_path_factory.mktemp("away")
    (away / trace.name).write_bytes(trace.read_bytes())
    monkeypatch.chdir(away)
    shown = invoke("show", trace.name, "--format", "markdown")
    assert shown.exit_code == 0, shown.output
    assert (f"dst replay {trace.name} --scenario proj/bank.py::bank  # the file the trace was "
            "recorded from, not found from here: give its path from here"
            in shown.stdout.replace("\\", "")), shown.stdout


def test_shipped_scenarios_keep_the_header_they_always_had(tmp_path: Path) -> None:
    done = invoke("run", "counter", "-c", "cas=false", "--seeds", "20", "--out",
                  str(tmp_path), "--json", "--shrink")
    doc = json.loads(done.stdout)
    group = doc["groups"][0]
    assert set(read_trace(group["traces"][0]).header) == SHIPPED_HEADER
    # Shrinking adds only the seed it started from.
    assert set(read_trace(group["shrunk"]["trace"]).header) == SHIPPED_HEADER | {"shrunk_from"}
    shown = invoke("show", group["traces"][0], "--format", "markdown").stdout
    assert _replay_lines(shown) == [f"dst replay {group['traces'][0]}"]


def test_what_a_header_records_of_a_scenario_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert scenario_file(None) is None
    assert scenario_file("counter") is None  # a shipped name
    assert scenario_file("pkg.module") is None  # a module
    assert scenario_file("bank.py") == "bank.py"
    assert scenario_file(str(tmp_path / "sub" / "bank.py")) == "sub/bank.py"
    assert scenario_file("sub/../bank.py") == "bank.py"
    assert scenario_file("a\nb.py") is None  # no header could hold it


def _resealed(trace: Trace, tmp_path: Path, **fields: Any) -> Path:
    path = tmp_path / "edited.jsonl"
    path.write_text(Trace({**trace.header, **fields}, trace.records, trace.footer).text(),
                    encoding="utf-8")
    return path


@pytest.mark.parametrize(("fields", "message"), [
    ({"scenario_file": 7}, "field 'scenario_file' of a header record has the wrong type"),
    ({"scenario_file": "/etc/bank.py"}, "it is not a relative path"),
    ({"scenario_file": "bank.txt"}, "it does not name a .py file"),
    ({"scenario_file": "a\x1b[2Jb.py"}, "it holds control characters"),
    ({"scenario_file": "x" * 5000 + ".py"}, "longer than 4,096 characters"),
    ({"shrunk_from": "5"}, "field 'shrunk_from' of a header record has the wrong type"),
    ({"shrunk_from": True}, "field 'shrunk_from' of a header record has the wrong type"),
])
def test_the_reader_checks_the_optional_header_fields(
        tmp_path: Path, fields: dict[str, Any], message: str) -> None:
    pinned = read_trace(Path(__file__).parent.parent / "traces" / "counter-lost-update.jsonl")
    with pytest.raises(TraceFormatError) as refused:
        read_trace(_resealed(pinned, tmp_path, **fields))
    assert message in str(refused.value)
    assert "\x1b" not in str(refused.value)
    fine = read_trace(_resealed(pinned, tmp_path, scenario_file="sub/bank.py", shrunk_from=3))
    assert fine.header["scenario_file"] == "sub/bank.py" and fine.header["shrunk_from"] == 3
