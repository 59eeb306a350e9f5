"""Traces are input: every command that reads one trusts nothing in it.

A trace comes from a file anyone can edit (or forge, with a fresh hash), and its
strings come from code under test.  These tests pin that a hostile trace can
neither drive a terminal nor break out of a Markdown table, nor crash the reader,
nor be read when no run could have written it; that a replay runs only with
config values of the right type; and that a replay reports the first record that
differs, not a later symptom.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.errors import TraceFormatError, UsageError
from dst.registry import load
from dst.scenario import Scenario
from dst.trace import codec
from dst.trace.codec import read_trace, write_trace
from dst.trace.model import FAULT_KINDS, TOO_DEEP, Trace, record_to_dict
from dst.trace.render import story

from ..simkit import many


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def assert_one_line_error(result: Result, *fragments: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), result.exception  # not a crash
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def counter() -> Trace:
    """A real failing trace: counter with its lost update, seed 0."""
    scenario = load("counter")
    return many(scenario, range(1), scenario.config({"cas": "false"}))[0].trace()


def resealed(trace: Trace, tmp_path: Path, edit: Any, name: str = "t.jsonl") -> Path:
    """``trace`` with ``edit(header, records, footer)`` applied and a valid hash again."""
    header = json.loads(json.dumps(trace.header))
    records = json.loads(json.dumps(trace.records))
    footer = dict(trace.footer)
    edit(header, records, footer)
    path = tmp_path / name
    path.write_text(Trace(header, records, footer).text(), encoding="utf-8")
    return path


# -- renderers: nothing from a trace reaches a terminal raw ------------------------

#: What a terminal or a browser could act on: C0 (newline aside, which the
#: renderers write between lines), DEL, C1, line separators, bidi controls.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                    "\u202a-\u202e\u2066-\u2069]")

LINK = "\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\"
TITLE = "\x1b]0;title\x07"
OVERWRITE = "\x1b[2K\rverdict: pass (violated: nothing)"


def hostile(trace: Trace, tmp_path: Path) -> Path:
    def edit(h: dict[str, Any], rs: list[dict[str, Any]], f: dict[str, Any]) -> None:
        h["scenario"] = "counter" + TITLE
        h["config"][LINK] = "x\u202eevil\x9b31m"
        h["strategy"] = "random\r"
        event = next(r for r in rs if r["type"] == "event")
        event["actor"] = "worker-1" + LINK
        event["event"] = "read counter" + OVERWRITE
        event["fields"] = {"k\x1b[1m": "v\x07\x7f\u2066", "n": ["\x1b[31m"]}
        vio = next(r for r in rs if r["type"] == "violation")
        vio["invariant"] = vio["message"] = "Lost" + OVERWRITE
        rs[0]["enabled"][rs[0]["chosen"]] += TITLE
        f["violated"] = [vio["invariant"]]

    return resealed(trace, tmp_path, edit)


@pytest.mark.parametrize("options", [[], ["-v"], ["--format", "markdown"],
                                     ["--format", "markdown", "-v"]])
def test_show_escapes_every_control_character_a_trace_holds(
    counter: Trace, tmp_path: Path, options: list[str]
) -> None:
    path = hostile(counter, tmp_path)
    result = invoke("show", str(path), *options)
    assert result.exit_code == 0, result.output
    assert UNSAFE.search(result.stdout) is None, repr(UNSAFE.search(result.stdout))
    # Shown, not dropped: the reader sees that the trace holds escapes.
    assert "x1b" in result.stdout and "u202e" in result.stdout
    assert not any(line.startswith("verdict: pass") for line in result.stdout.splitlines())


def test_the_story_dst_run_prints_is_escaped_too(counter: Trace, tmp_path: Path) -> None:
    trace = read_trace(hostile(counter, tmp_path))
    for _step, _t, actor, text in story(trace, verbose=True):
        assert UNSAFE.search(actor + text) is None and "\n" not in actor + text


# -- markdown: everything from a trace is inert ------------------------------------

def _unescaped(line: str) -> str:
    """``line`` without its backslash escapes: what Markdown could still act on."""
    return re.sub(r"\\.", "", line)


def test_markdown_keeps_trace_text_inside_its_table_cell(counter: Trace, tmp_path: Path) -> None:
    def edit(h: dict[str, Any], rs: list[dict[str, Any]], f: dict[str, Any]) -> None:
        h["scenario"] = "c` <b>x</b> [a](http://evil) #1"
        h["config"]["`k|"] = "<script>alert(1)</script>"
        event = next(r for r in rs if r["type"] == "event")
        event["actor"] = "worker|1"
        event["event"] = "read\n# Injected heading\n![x](http://evil/p.png)\n| a | b |"
        event["fields"] = {"html": "<img src=x onerror=alert(1)>", "code": "`x`",
                           "link": "[here](javascript:alert(1)) https://evil.example @someone"}

    path = resealed(counter, tmp_path, edit)
    shown = invoke("show", str(path), "--format", "markdown", "-v")
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    records = story(read_trace(path), verbose=True)
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 2 + len(records)  # one row a story line: no newline got through
    for row in table:
        assert _unescaped(row).count("|") == 5, row  # step, time, actor, what: 4 cells
    for line in lines:
        bare = _unescaped(line)
        for syntax in ("<", ">", "`", "![", "](", "[", "http:", "https:", "@"):
            assert syntax not in bare, (syntax, line)
    assert [line for line in lines if line.startswith("#")] == [lines[0]]


# -- the reader: bounded, never a crash --------------------------------------------

def test_a_deeply_nested_line_is_a_one_line_error_not_a_crash(
    counter: Trace, tmp_path: Path
) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    lines = counter.text().splitlines()
    lines[2] = lines[2].replace('"fields":{"value":0}', f'"fields":{{"value":{deep}}}')
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for command in ("replay", "show"):
        assert_one_line_error(invoke(command, str(path)), ":3:", "nested deeper than 64")
    # Brackets inside strings are text, not nesting.
    assert read_trace(resealed(counter, tmp_path, lambda h, rs, f: rs[1].update(
        event="[" * 1000)))

    # What the writer makes of a deep value it is given still reads back.
    value: Any = "bottom"
    for _ in range(200):
        value = [value]
    rec = record_to_dict(("event", 1, 0.0, "w", "deep", {"v": value}))
    trace = Trace(counter.header, [counter.records[0], rec, *counter.records[2:]],
                  counter.footer)
    again = read_trace(write_trace(trace, tmp_path / "written.jsonl"))
    assert TOO_DEEP in json.dumps(again.records[1]["fields"])


def test_a_trace_with_more_records_than_the_bound_is_refused(
    counter: Trace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_trace(counter, tmp_path / "t.jsonl")
    monkeypatch.setattr(codec, "MAX_RECORDS", 5)
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:8: more than 5 records"):
        read_trace(path)
    monkeypatch.setattr(codec, "MAX_RECORDS", 1_000_000)
    monkeypatch.setattr(codec, "MAX_TRACE_BYTES", 1000)
    with pytest.raises(TraceFormatError, match="trace larger than"):
        read_trace(path)


# -- config types --------------------------------------------------------------------

@pytest.mark.parametrize(("switch", "value", "found"), [
    ("workers", 2.0, "2.0 (a number)"),
    ("workers", True, "true (a boolean)"),
    ("workers", "2", "'2' (a string)"),
    ("cas", 0, "0 (an integer)"),
    ("cas", "false", "'false' (a string)"),
    ("increments", None, "None (null)"),
])
def test_a_header_config_value_of_the_wrong_type_is_refused_naming_the_switch(
    counter: Trace, tmp_path: Path, switch: str, value: Any, found: str
) -> None:
    path = resealed(counter, tmp_path, lambda h, rs, f: h["config"].update({switch: value}))
    expected = "true or false" if switch == "cas" else "an integer"
    assert_one_line_error(invoke("replay", str(path)), f"switch {switch} of counter",
                          f"takes {expected}", f"not {found}")


def test_config_values_must_have_the_switch_type_exactly() -> None:
    scenario = Scenario("typed", doc="one switch of each type")
    scenario.switch("rate", 0.5)
    scenario.switch("mode", "a", choices=["a", "b"])
    assert scenario.checked_config({"rate": 2.5, "mode": "b"}) == {"rate": 2.5, "mode": "b"}
    assert scenario.config({"rate": "1"}) == {"rate": 1.0, "mode": "a"}  # -c still parses
    for bad in ({"rate": 1}, {"rate": True}, {"mode": "c"}):
        with pytest.raises(UsageError, match=r"switch (rate|mode) of typed takes"):
            scenario.checked_config(bad)
    for text in ("inf", "nan", "-1e999"):  # a trace cannot hold them
        with pytest.raises(UsageError, match="takes a finite number"):
            scenario.config({"rate": text})


# -- meaning, not only shape ---------------------------------------------------------

def _fault(kind: str) -> Any:
    def edit(h: dict[str, Any], rs: list[dict[str, Any]], f: dict[str, Any]) -> None:
        rs.insert(2, {"type": "fault", "step": 1, "t": 0.0, "fault": kind, "target": "w",
                      "detail": ""})
    return edit


def _check(ok: bool, message: str, name: str) -> Any:
    def edit(h: dict[str, Any], rs: list[dict[str, Any]], f: dict[str, Any]) -> None:
        rs.append({"type": "check", "step": rs[-1]["step"], "t": 0.0, "property": name,
                   "ok": ok, "message": message})
    return edit


def _every_step_one_later(h: dict[str, Any], rs: list[dict[str, Any]],
                          f: dict[str, Any]) -> None:
    for rec in rs:
        rec["step"] += 1
    f["steps"] += 1


def _passing_but_ended_on_violation(h: dict[str, Any], rs: list[dict[str, Any]],
                                    f: dict[str, Any]) -> None:
    rs.pop()
    f.update(verdict="pass", violated=[])


@pytest.mark.parametrize(("edit", "line", "message"), [
    (lambda h, rs, f: rs[0].update(kind="telepathy"), 2, "decision kind 'telepathy'"),
    (_fault("meteor"), 4, "fault kind 'meteor'"),
    (lambda h, rs, f: rs.insert(1, dict(rs[0])), 3, "decision at step 1 follows step 1"),
    (lambda h, rs, f: rs[1].update(step=2), 3, "event record has step 2"),
    (_every_step_one_later, 2, "decision at step 2 follows step 0"),
    (lambda h, rs, f: f.update(steps=f["steps"] + 1), 17, "footer says 8 steps"),
    (lambda h, rs, f: f.update(ended="exploded"), 17, "ended 'exploded'"),
    (_passing_but_ended_on_violation, 16, "ended on a violation"),
    (lambda h, rs, f: f.update(virtual_time=-1.0), 17, "virtual_time -1.0"),
    (_check(True, "but it failed", "NoLostIncrement"), 17, "check that held has a message"),
    (_check(False, "broken", "Other"), 17, "no violation of it"),
    (lambda h, rs, f: h["faults"].update(max_crashes=-1), 1, "fault plan 'max_crashes'"),
    (lambda h, rs, f: h["faults"].update(max_drops=1.5), 1, "must be an integer"),
    (lambda h, rs, f: rs[-1].update(frames=[3]), 16, "'frames' must be a list of strings"),
])
def test_a_resealed_trace_no_run_could_write_is_refused_naming_the_line(
    counter: Trace, tmp_path: Path, edit: Any, line: int, message: str
) -> None:
    path = resealed(counter, tmp_path, edit)
    assert_one_line_error(invoke("replay", str(path)), f"t.jsonl:{line}:", message)


BUILT_IN = ["Livelock", "Deadlock", "Nondeterminism", "NoUncaughtError"]


def test_stale_faults_frames_and_built_in_violations_load_and_render(
    counter: Trace, tmp_path: Path
) -> None:
    frames = ("app.py:10 in handle\x1b[2K", "app.py:22 in charge")
    written = record_to_dict(("violation", 7, 0.0, "NoUncaughtError", "w raised KeyError",
                              frames))
    assert written["frames"] == list(frames)

    def edit(h: dict[str, Any], rs: list[dict[str, Any]], f: dict[str, Any]) -> None:
        h["hash_seed"] = None
        rs[2:2] = [{"type": "fault", "step": 1, "t": 0.0, "fault": kind, "target": "worker-1",
                    "detail": "db.put(n)"} for kind in sorted(FAULT_KINDS)]
        rs.pop()
        rs.extend(dict(written, invariant=name) for name in BUILT_IN)
        f["violated"] = BUILT_IN

    path = resealed(counter, tmp_path, edit)
    plain = invoke("show", str(path))
    assert plain.exit_code == 0, plain.output
    assert "refused db.put(n) (a call of an earlier incarnation of worker-1)" in plain.stdout
    for name in BUILT_IN:
        assert f"VIOLATED {name}: w raised KeyError  (at app.py:22 in charge)" in plain.stdout
    verbose = invoke("show", str(path), "-v").stdout
    assert verbose.count("in app.py:10 in handle\\x1b[2K") == len(BUILT_IN)
    assert UNSAFE.search(verbose) is None
    markdown = invoke("show", str(path), "--format", "markdown", "-v")
    assert markdown.exit_code == 0 and "Deadlock" in markdown.stdout
    assert "stale" not in invoke("show", str(resealed(counter, tmp_path, lambda *a: None,
                                                      "plain.jsonl"))).stdout


# -- replay reports the first differing record ---------------------------------------

BRANCHING = '''
import structlog
from dst import Env, Scenario, Sim

OFFSET = {offset}
LABEL = {label!r}
log = structlog.get_logger()
scenario = Scenario("branching", doc="logs a value, then branches on it")


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    async def main(env: Env) -> None:
        n = (await env.store.get("n") or 0) + OFFSET
        log.info("read", value=n, label=LABEL)
        await env.store.put("a" if n else "b", 1)

    sim.process("p", main, stores=["db"])


@scenario.at_end("AlwaysFails")
def always_fails(world: object) -> str:
    return "recorded on purpose"
'''


def _record_then_change(tmp_path: Path, **changed: Any) -> Result:
    source = tmp_path / "branching.py"
    source.write_text(BRANCHING.format(offset=0, label="same"), encoding="utf-8")
    out = tmp_path / "out"
    run = invoke("run", str(source), "--seed", "0", "--out", str(out), "--json")
    assert run.exit_code == 1, run.output
    trace = json.loads(run.stdout)["failures"][0]["trace"]
    source.write_text(BRANCHING.format(**{"offset": 0, "label": "same", **changed}),
                      encoding="utf-8")
    return invoke("replay", trace, "--scenario", str(source))


def test_replay_reports_the_logged_value_that_differs_before_the_branch_it_caused(
    tmp_path: Path,
) -> None:
    replayed = _record_then_change(tmp_path, offset=1)
    assert replayed.exit_code == 3, replayed.output
    first = replayed.stdout.splitlines()[0]
    assert first.startswith("diverged at step 1 (record 2): expected event"), first
    assert '"value":0' in first and '"value":1' in first


def test_replay_never_prints_control_characters_from_a_divergence(tmp_path: Path) -> None:
    replayed = _record_then_change(tmp_path, label="\x9b2K\u202eevil\x1b]0;t\x07")
    assert replayed.exit_code == 3, replayed.output
    assert UNSAFE.search(replayed.stdout) is None, replayed.stdout
    assert "\\x9b" in replayed.stdout


# -- show -o ---------------------------------------------------------------------------

def test_show_to_a_path_it_cannot_write_is_a_one_line_error_before_any_work(
    counter: Trace, tmp_path: Path
) -> None:
    trace = str(write_trace(counter, tmp_path / "t.jsonl"))
    missing = tmp_path / "missing" / "dir" / "x.md"
    assert_one_line_error(invoke("show", trace, "-o", str(missing)), "does not exist")
    assert not missing.parent.exists()
    assert_one_line_error(invoke("show", trace, "-o", f"{trace}/x.md"), "not a directory")
    assert_one_line_error(invoke("show", str(tmp_path / "nope.jsonl"), "-o", str(missing)),
                          "does not exist")
