"""A lone surrogate in what code under test logs or sends is kept, shown escaped, replayed.

A Python string may hold half of a UTF-16 pair (a supplier's e-mail in broken UTF-16,
``"\\ud800"`` built by code, an argument that was not UTF-8), and no UTF-8 output can.
The trace holds it as the JSON escape ``\\ud800``, which reads back as the same string;
every view and report shows it as those six characters; the run, its reports and its
replay all go through; and a trace without surrogates keeps its bytes.
"""

from __future__ import annotations

import json
import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.runner.results import ResultsDB
from dst.trace.codec import loads_trace, read_trace
from dst.trace.escape import markdown_inline, visible
from dst.trace.model import Trace, canonical

#: The scenario's source: ``\\ud800`` there is a Python escape, a surrogate once run.
LONE = '''
import structlog
from dst import Env, Scenario, Sim

log = structlog.get_logger()
BROKEN = "sup\\ud800plier@example.com"  # a supplier's e-mail in broken UTF-16
PAIR = "\\ud83d\\ude00"  # a pair put together by code: one character

scenario = Scenario("lone", doc="a lone surrogate in what the code logs and sends")
scenario.switch("greeting", "hello", doc="what the buyer says first")


async def buyer(env: Env, greeting: str) -> None:
    log.info("mail from " + BROKEN, sender=BROKEN, greeting=greeting,
             **{"odd\\udfffkey": PAIR})
    await env.net.send("supplier", {"from": BROKEN, "nested": [BROKEN]})


async def supplier(env: Env) -> None:
    msg = await env.net.recv()
    await env.store.put("last", msg.body["from"])


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    db = sim.store("db")
    sim.process("buyer", lambda env: buyer(env, config["greeting"]))
    sim.process("supplier", supplier, stores=["db"])
    return db


@scenario.invariant("NoMailFromABrokenSender")
def no_mail(db) -> bool | str:
    got = db.peek("last")
    return got is None or f"mail from {got}"
'''

BROKEN = "sup\ud800plier@example.com"
#: How every view shows it: the six characters of the escape, nothing raw.
SHOWN = "sup\\ud800plier@example.com"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _clean(result: Result, code: int) -> str:
    """The output of a command that exited ``code`` by itself, as strict UTF-8."""
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)  # not a UnicodeEncodeError on the way out
    assert result.exit_code == code, result.output
    return result.stdout_bytes.decode("utf-8")  # a raw surrogate could not be in it


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`dst run` of the scenario, with both reports; its output and where it all went."""
    tmp = tmp_path_factory.mktemp("lone")
    source = tmp / "lone.py"
    source.write_text(LONE, encoding="utf-8")
    out, md, xml = tmp / "out", tmp / "summary.md", tmp / "junit.xml"
    result = invoke("run", str(source), "--seeds", "2", "--workers", "1", "--out", str(out),
                    "--summary-md", str(md), "--junit", str(xml))
    return {"output": _clean(result, 1), "source": str(source), "out": out, "md": md,
            "xml": xml, "trace": out / "lone-0.jsonl"}


def test_a_run_that_logs_and_sends_a_lone_surrogate_reports_it_escaped(
    ran: dict[str, Any],
) -> None:
    output = ran["output"]
    assert f"VIOLATED NoMailFromABrokenSender: mail from {SHOWN}" in output
    assert f"mail from {SHOWN}  (" in output  # the event, in the story


def test_its_trace_holds_the_surrogate_as_a_json_escape_and_reads_it_back(
    ran: dict[str, Any],
) -> None:
    raw = ran["trace"].read_bytes().decode("utf-8")
    assert '"sender":"sup\\ud800plier@example.com"' in raw  # the JSON escape, lower case
    assert '"odd\\udfffkey":"\U0001f600"' in raw  # a pair is its character, as JSON reads it
    trace = read_trace(ran["trace"])
    event = next(r for r in trace.records if r["type"] == "event")
    assert event["event"] == f"mail from {BROKEN}" and event["fields"]["sender"] == BROKEN
    [violation] = [r for r in trace.records if r["type"] == "violation"]
    assert violation["message"] == f"mail from {BROKEN}"
    assert trace.text() == raw


@pytest.mark.parametrize("fmt", ["text", "markdown", "html", "perfetto"])
def test_every_view_shows_the_surrogate_as_the_same_escape(ran: dict[str, Any],
                                                           fmt: str) -> None:
    shown = _clean(invoke("show", str(ran["trace"]), "--format", fmt, "--verbose"), 0)
    if fmt == "markdown":
        assert markdown_inline(SHOWN) in shown
        shown = re.sub(r"\\([!-/:-@[-`{-~])", r"\1", shown)  # as Markdown renders it
    if fmt == "perfetto":
        shown = "\n".join(_strings(json.loads(shown)))  # the text of every string in it
    assert SHOWN in shown


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [*_strings(k), *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_its_replay_is_identical(ran: dict[str, Any]) -> None:
    output = _clean(invoke("replay", str(ran["trace"]), "--scenario", ran["source"]), 1)
    assert output.startswith("identical: ")


def test_the_reports_escape_it_and_the_summary_replays_it(ran: dict[str, Any]) -> None:
    md = ran["md"].read_bytes().decode("utf-8")
    assert f"mail from {markdown_inline(SHOWN)}" in md
    [replay] = [line.strip() for line in md.splitlines() if line.startswith("    dst replay ")]
    assert _clean(invoke(*shlex.split(replay)[1:]), 1).startswith("identical: ")
    root = ET.fromstring(ran["xml"].read_bytes())
    [failure] = root.iter("failure")
    assert f"mail from {SHOWN}" in (failure.text or "")


def test_an_argument_that_was_not_utf8_runs_is_recorded_and_replays(tmp_path: Path) -> None:
    """``-c greeting=<byte 0xff>``: Python hands dst the surrogate ``\\udcff``."""
    source = tmp_path / "lone.py"
    source.write_text(LONE, encoding="utf-8")
    out = tmp_path / "out"
    output = _clean(invoke("run", str(source), "-c", "greeting=\udcff", "--seeds", "1",
                           "--workers", "1", "--out", str(out)), 1)
    assert "lone [greeting=\\udcff]: 1 run, 1 failed" in output
    # A value no file name can hold: the config is named by a digest.
    [kept] = out.glob("lone-cfg*-0.jsonl")
    trace = read_trace(kept)
    assert trace.header["config"] == {"greeting": "\udcff"}
    with ResultsDB(out) as db:
        [row] = db.runs()
    assert "greeting=\\udcff" in row.command and row.status == "done"
    replayed = invoke("replay", str(kept), "--scenario", str(source))
    assert _clean(replayed, 1).startswith("identical: ")


# -- the encoding itself -----------------------------------------------------------------


def test_a_line_without_surrogates_keeps_its_bytes() -> None:
    value = {"b": "é \U0001f600 \u2028 \x1b \\ud800", "a": [1.5, None, True]}
    assert canonical(value) == json.dumps(value, sort_keys=True, separators=(",", ":"),
                                          ensure_ascii=False, allow_nan=False)


def test_a_lone_surrogate_is_escaped_and_a_pair_joined_so_a_trace_reads_back_the_same() -> None:
    assert canonical({"k\udfff": ["x\ud800", "\ud83d\ude00"]}) == \
        '{"k\\udfff":["x\\ud800","\U0001f600"]}'
    header = {"type": "header", "format": "dst-trace", "version": 2, "scenario": "s\ud800",
              "config": {"c": "\udcff"}, "seed": 0, "strategy": "random", "faults": {},
              "max_steps": 10, "dst_version": "0", "python": "3", "trio": "0"}
    event = {"type": "event", "step": 0, "t": 0.0, "actor": "a\ud800", "event": "e\udbff",
             "fields": {"\ud800": "\ud83d\ude00"}}
    footer = {"verdict": "pass", "violated": [], "steps": 0, "virtual_time": 0.0,
              "ended": "quiescent"}
    text = Trace(header, [event], footer).text()
    again = loads_trace(text)
    assert again.text() == text
    assert again.records[0]["actor"] == "a\ud800"
    assert again.records[0]["fields"] == {"\ud800": "\U0001f600"}


def test_visible_shows_a_lone_surrogate_as_its_escape_and_a_pair_as_its_character() -> None:
    assert visible("a\ud800b\udfff") == "a\\ud800b\\udfff"
    assert visible("\ud83d\ude00 and \ud83d") == "\U0001f600 and \\ud83d"
    assert markdown_inline("x\ud800") == "x\\\\ud800"
