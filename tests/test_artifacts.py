"""Bug-report artifacts of a trace: the Markdown report, the HTML page, the Perfetto JSON.

The HTML page is checked twice: by its structure (only the elements and
attributes dst writes, every link a fragment, nothing fetched, no script but dst's
own, which the page's policy names by its hash) and,
where a Chromium is installed, in the browser itself: it renders, logs nothing
to the console, shows every actor, and a trace full of script runs none of it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import structlog
import trio
from click.testing import CliRunner

from dst import Env, FaultPlan, Scenario, ServiceFaults, ServiceUnavailable, Sim
from dst.cli import main
from dst.runner.single import RunResult, run_seeds
from dst.trace.codec import read_trace, write_trace
from dst.trace.html import render_html
from dst.trace.model import Trace
from dst.trace.perfetto import render_perfetto
from dst.trace.render import render_markdown

ROOT = Path(__file__).parent.parent
COUNTER = ROOT / "traces" / "counter-lost-update.jsonl"
UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

# -- a run with every kind of fault ----------------------------------------------------

log = structlog.get_logger()
relay = Scenario(
    "relay", doc="orders relayed to a shop that charges for each",
    faults=FaultPlan(max_crashes=1, crash_weight=0.3, max_drops=1, drop_weight=0.4,
                     max_dups=1, dup_weight=0.4, max_partitions=1, partition_seconds=3.0,
                     partition_weight=0.3,
                     services={"payments": ServiceFaults(lose_reply=1, weight=0.6)}),
)


async def _client(env: Env) -> None:
    for order in ("o1", "o2"):
        for attempt in range(3):
            await env.net.send("shop", {"order": order})
            log.info("sent", order=order, attempt=attempt)
            with trio.move_on_after(2):
                reply = await env.net.recv()
                log.info("confirmed", order=reply.body["order"])
                break


async def _shop(env: Env) -> None:
    while True:
        msg = await env.net.recv()
        order = msg.body["order"]
        try:
            await env.services.call("payments", "charge", {"order": order})
        except ServiceUnavailable:
            log.info("charge unanswered", order=order)
        await env.net.send(msg.source, {"order": order})


@relay.setup
def _setup(sim: Sim, config: dict[str, Any]) -> Any:
    charges: list[str] = []

    def payments(op: str, request: Any) -> Any:
        charges.append(request["order"])
        return {"ok": True}

    sim.service("payments", payments)
    sim.process("client", _client, crashable=False)
    sim.process("shop", _shop, idle=True)
    return charges


@relay.invariant("ChargedOnce")
def _charged_once(charges: list[str]) -> bool | str:
    twice = sorted({o for o in charges if charges.count(o) > 1})
    return not twice or f"charged twice for {', '.join(twice)}"


EVERY_FAULT = {"crash", "restart", "partition", "heal", "partitioned", "drop", "dup", "lost",
               "service"}


@pytest.fixture(scope="module")
def stormy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failing relay trace in which every kind of message, process and service fault
    happened: the first such seed."""
    results: list[RunResult] = []
    run_seeds(relay, relay.config(), range(400), results.append)
    for r in results:
        trace = r.trace()
        kinds = {rec["fault"] for rec in trace.records if rec["type"] == "fault"}
        if r.violated and kinds >= EVERY_FAULT:
            return write_trace(trace, tmp_path_factory.mktemp("stormy") / "relay.jsonl")
    raise AssertionError("no seed of 400 had every fault and a violation")


def _hostile(source: Path, target: Path) -> Path:
    """``source`` with script, markup and javascript: text in every actor, label, event,
    message and config string, resealed so that it still loads."""
    payloads = {
        "client": "client<script>document.title='pwned'</script>javascript:alert(1)",
        "shop": 'shop<img src=x onerror="document.body.appendChild(document.createElement('
                "'hr')).id='xss-marker'\">\"><svg onload=\"document.title='pwned'\">",
        "charged twice": "charged twice</style></title><script>document.title='pwned'"
                         "</script>\x1b]0;title\x07\u202e",
        "relay": "relay<iframe src=javascript:alert(1)>",
    }
    lines = []
    for line in source.read_text(encoding="utf-8").splitlines()[:-1]:
        for plain, evil in payloads.items():
            line = line.replace(plain, json.dumps(evil)[1:-1])
        lines.append(json.loads(line))
    header = lines[0]
    header["config"] = {"<script>alert(1)</script>": "javascript:alert(1)"}
    footer = json.loads(source.read_text(encoding="utf-8").splitlines()[-1])
    trace = Trace(header, lines[1:], {k: v for k, v in footer.items() if k != "type"})
    target.write_text(trace.text(), encoding="utf-8")
    read_trace(target)  # a trace a run could have written, as far as the reader can tell
    return target


@pytest.fixture(scope="module")
def hostile(stormy: Path) -> Path:
    return _hostile(stormy, stormy.with_name("hostile.jsonl"))


def _actors(trace: Trace) -> set[str]:
    """Every actor a reader expects a lane for: who logged, who stepped, who was sent to."""
    found = {r["actor"] for r in trace.records if r["type"] == "event"}
    for r in trace.records:
        if r["type"] == "decision" and r["kind"] == "schedule":
            label = r["enabled"][r["chosen"]]
            if "@" in label and not label.startswith("timer@"):
                found.add(label.split("@", 1)[0])
    return found


# -- Markdown --------------------------------------------------------------------------


def test_the_markdown_report_says_what_ran_the_verdict_the_story_and_how_to_replay() -> None:
    trace = read_trace(COUNTER)
    report = render_markdown(trace, replay="dst replay traces/counter-lost-update.jsonl")
    lines = report.splitlines()
    assert lines[0] == "### counter seed 0: fail"
    assert "**NoLostIncrement violated** at step 7" in report
    assert "- config: cas=false increments=7 workers=2" in report
    assert "- seed: 0 (strategy random)" in report
    story = [line for line in lines if re.match(r"\d+\. ", line)]
    assert story[0] == "1. 00:00:00.000 worker-1: read counter  (value=0)"
    assert story[-1].startswith("8. 00:00:00.000 check: VIOLATED NoLostIncrement")
    assert "    dst replay traces/counter-lost-update.jsonl" in lines  # a code block
    assert lines[-1].startswith("Recorded with dst 0\\.1\\.0 (Python ")


def test_show_markdown_names_the_replay_command_of_the_trace_it_shows() -> None:
    shown = CliRunner().invoke(main, ["show", str(COUNTER), "--format", "markdown"])
    assert shown.exit_code == 0, shown.output
    assert f"    dst replay {COUNTER}" in shown.stdout.splitlines()


# -- HTML: structure -------------------------------------------------------------------

#: Every element the page may hold, and every attribute: what dst writes, nothing else.
ELEMENTS = {"html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "span",
            "small", "p", "a", "q", "dl", "div", "dt", "dd", "code", "section", "aside", "ol",
            "li", "svg", "defs", "marker", "path", "pattern", "rect", "line", "circle", "text",
            "g", "details", "summary", "script", "ul"}
ATTRIBUTES = {"lang", "charset", "http-equiv", "content", "name", "class", "style", "href",
              "id", "title", "aria-label", "role", "width", "height", "viewbox", "refx",
              "refy", "markerwidth", "markerheight", "orient", "d", "fill", "stroke",
              "stroke-width", "stroke-opacity", "stroke-dasharray", "fill-opacity",
              "patternunits", "patterntransform", "x", "y", "x1", "y1", "x2", "y2", "cx",
              "cy", "r", "marker-end"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Page:
    parsed = _Page()
    parsed.feed(page)
    return parsed


@pytest.mark.parametrize("which", ["stormy", "hostile"])
def test_the_page_holds_only_what_dst_writes_and_fetches_nothing(
        which: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(which)
    page = render_html(read_trace(path), replay=f"dst replay {path}")
    parsed = _parse(page)
    for tag, attrs in parsed.tags:
        assert tag in ELEMENTS, tag
        for name, value in attrs:
            assert name in ATTRIBUTES, (tag, name)
            if name == "href":
                assert value is not None and re.fullmatch(r"#r\d+|#violation", value), value
            if name in ("style", "fill", "marker-end"):
                assert "url(" not in (value or "") or re.fullmatch(
                    r"url\(#[a-z-]+\)", value or ""), value
    assert page.lower().count("<script") == 1 and "@import" not in page  # dst's own only
    assert "http:" not in page and "https:" not in page and "//" not in re.sub(
        r"<style>.*?</style>", "", page, flags=re.S)
    csp = next(dict(a) for t, a in parsed.tags if t == "meta" and ("http-equiv",
               "Content-Security-Policy") in a)
    assert (csp["content"] or "").startswith("default-src 'none'")
    script = page.split("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}';" in (csp["content"] or "")


def test_hostile_trace_text_stays_text_in_the_page(hostile: Path) -> None:
    page = render_html(read_trace(hostile))
    text = "".join(_parse(page).text)
    # The payloads are shown, as text, with control characters made visible.
    assert "<script>document.title='pwned'</script>" in text
    assert "<img src=x onerror=" in text and "javascript:alert(1)" in text
    assert "\\x1b]0;title\\x07\\u202e" in text
    assert set(UNSAFE.findall(page)) <= {"\n"}  # the page's own line breaks, nothing else


def test_the_page_draws_lanes_messages_bands_waits_calls_and_the_violation(
        stormy: Path) -> None:
    trace = read_trace(stormy)
    page = render_html(trace)
    names = [html.unescape(m) for m in re.findall(r'<div class="name [a-z]+"[^>]*>([^<]*)<',
                                                  page)]
    assert set(names) >= _actors(trace) | {"client", "shop", "payments", "timers", "checks"}
    for drawn in ('class="band crash"', 'class="band partition"', 'class="msg delivered',
                  'class="msg dropped', 'class="msg lost', 'class="msg partitioned',
                  ' copy"', 'class="call faulty"', 'class="wait parked"',
                  'class="wait timer"', 'class="violation-line"', 'class="mark violation bad"'):
        assert drawn in page, drawn
    violation = next(i for i, r in enumerate(trace.records) if r["type"] == "violation")
    assert f'<li id="r{violation}" class="told violation violating">' in page
    decisions = sum(r["type"] == "decision" for r in trace.records)
    assert page.count('class="decision') == decisions


def test_the_page_is_the_same_bytes_every_time(stormy: Path) -> None:
    trace = read_trace(stormy)
    assert render_html(trace) == render_html(read_trace(stormy))


def test_show_writes_the_page_and_the_perfetto_json_to_a_file(
        stormy: Path, tmp_path: Path) -> None:
    for fmt, name in (("html", "page.html"), ("perfetto", "trace.json")):
        out = tmp_path / name
        shown = CliRunner().invoke(main, ["show", str(stormy), "--format", fmt, "-o", str(out)])
        assert shown.exit_code == 0, shown.output
        assert shown.stdout == ""
    assert (tmp_path / "page.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "traceEvents" in json.loads((tmp_path / "trace.json").read_text(encoding="utf-8"))


# -- Perfetto --------------------------------------------------------------------------


def _events(trace: Trace) -> list[dict[str, Any]]:
    doc = json.loads(render_perfetto(trace))
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"}
    events: list[dict[str, Any]] = doc["traceEvents"]
    return events


def test_perfetto_events_are_trace_event_format_with_nested_slices(stormy: Path) -> None:
    events = _events(read_trace(stormy))
    assert {e["ph"] for e in events} == {"M", "X", "i", "s", "f"}
    slices: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in events:
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] != "M":
            assert isinstance(e["ts"], int) and e["ts"] >= 0 and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert e["dur"] >= 1
            slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in slices.values():  # two slices of a thread nest or are apart
        for a0, a1 in spans:
            for b0, b1 in spans:
                assert a1 <= b0 or b1 <= a0 or (a0 <= b0 and b1 <= a1) or (
                    b0 <= a0 and a1 <= b1)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(ends) <= set(starts) and ends
    for flow_id, end in ends.items():
        start = starts[flow_id]
        assert end["bp"] == "e" and end["ts"] >= start["ts"]
        for point in (start, end):  # each end lies on a slice of its thread
            assert any(a <= point["ts"] < b for a, b in slices[(point["pid"], point["tid"])])


def test_perfetto_names_a_thread_per_actor_and_counts_virtual_microseconds(
        stormy: Path) -> None:
    trace = read_trace(stormy)
    events = _events(trace)
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    processes = {e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert _actors(trace) <= threads and {"client", "shop"} <= processes
    assert "payments" in threads and any(p.startswith("outside world") for p in processes)
    heal = next(i for i, r in enumerate(trace.records) if r["type"] == "fault"
                and r["fault"] == "heal")
    instant = next(e for e in events if e["ph"] == "i" and e["name"].startswith("partition of"))
    assert instant["ts"] == round(trace.records[heal]["t"] * 1_000_000) + heal


def test_perfetto_shows_hostile_text_made_visible(hostile: Path) -> None:
    events = _events(read_trace(hostile))
    names = [e["name"] for e in events] + [e["args"]["name"] for e in events if e["ph"] == "M"
                                           and "name" in e["args"]]
    assert all(UNSAFE.search(n) is None for n in names)
    assert any("<script>document.title='pwned'</script>" in n for n in names)


# -- HTML in a real browser ------------------------------------------------------------

CHROMIUM = next((found for name in ("chromium", "chromium-browser", "google-chrome")
                 if (found := shutil.which(name))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium here (Debian: apt-get install chromium); the page "
                             "is checked in a real browser only where one is installed")
#: A console message as Chromium logs it with --enable-logging=stderr.
CONSOLE = re.compile(r":CONSOLE[(:]")


def _browse(page: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """The DOM Chromium built from ``page`` after loading it, and what it logged to the
    console (script errors and Content-Security-Policy refusals included)."""
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
         "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}",
         "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if CONSOLE.search(line)]


def _title(dom: str) -> str:
    found = re.search(r"<title>(.*?)</title>", dom, re.S)
    return html.unescape(found.group(1)) if found else ""


@needs_chromium
def test_the_browser_check_sees_a_script_run_and_log(tmp_path: Path) -> None:
    """The check below is only worth something if it would see a script that ran."""
    page = tmp_path / "probe.html"
    page.write_text("<!DOCTYPE html><title>before</title><p>x</p><script>console.error("
                    "'probe-logged'); document.title = 'ran';</script>", encoding="utf-8")
    dom, console = _browse(page, tmp_path)
    assert _title(dom) == "ran"
    assert any("probe-logged" in line for line in console)


@needs_chromium
@pytest.mark.parametrize("which", ["stormy", "hostile"])
def test_the_page_renders_in_chromium_silently_with_every_actor(
        which: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    source: Path = request.getfixturevalue(which)
    trace = read_trace(source)
    page = tmp_path / "page.html"
    page.write_text(render_html(trace, replay=f"dst replay {source}"), encoding="utf-8")
    dom, console = _browse(page, tmp_path)
    assert console == []
    assert '<svg width="' in dom and 'class="records"' in dom
    for actor in _actors(trace):
        assert f">{html.escape(actor, quote=False)}</div>" in dom, actor
    # Nothing from the trace ran: the title is the one dst wrote, and no element the
    # payloads would have made exists.
    assert _title(dom) == _title(page.read_text(encoding="utf-8")) != "pwned"
    assert 'id="xss-marker"' not in dom
    for element in ("<img", "<iframe", "<svg onload"):
        assert element not in dom.lower()
    assert dom.lower().count("<script") == 1  # dst's own
