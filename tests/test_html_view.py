"""The HTML page of a long failing run opens with its violation in view, and folds the
quiet stretches of the run, so that 200 steps and more stay navigable.

A scenario built here (two clerks posting 110 entries each, the books checked after
every step) fails after more than 200 steps.  Without a browser, the page is checked
for what puts the violation in view (its one script, allowed by its hash, and the
anchor it scrolls to) and for its folds; with headless Chromium at 1400x1000, the
violation's own box is measured after the page's script ran.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from dst.cli import main
from dst.trace.codec import read_trace

LEDGER = '''
from typing import Any

import structlog

from dst import FaultPlan, Scenario

log = structlog.get_logger()
scenario = Scenario("ledger", doc="two clerks post 110 entries each; the books never balance",
                    faults=FaultPlan(preemptions=0))


class World:
    posted = 0


@scenario.setup
def setup(sim: Any, config: Any) -> World:
    world = World()

    async def clerk(env: Any) -> None:
        for n in range(110):
            await env.store.put(f"{env.name}/{n}", n)
            world.posted += 1
            if n % 25 == 24:
                log.info("day closed", posted=n + 1)
                await env.clock.sleep(3600)

    sim.store("books")
    for name in ("a", "b"):
        sim.process(name, clerk, stores=["books"], crashable=False)
    return world


@scenario.invariant("Balanced")
def balanced(world: World) -> bool | str:
    return world.posted < 220 or "220 entries posted, and the books do not balance"
'''

CHROMIUM = next((found for name in ("chromium", "chromium-browser", "google-chrome",
                                    "headless_shell") if (found := shutil.which(name))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium here (none of chromium, chromium-browser, "
                             "google-chrome, headless_shell on PATH; Debian: apt-get install "
                             "chromium): where the violation is on open is measured only in "
                             "a real browser")


@pytest.fixture(scope="module")
def long_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A failing trace of more than 200 steps, and its page (``dst show --format html``)."""
    where = tmp_path_factory.mktemp("ledger")
    source = where / "ledger.py"
    source.write_text(textwrap.dedent(LEDGER), encoding="utf-8")
    ran = CliRunner().invoke(main, ["run", str(source), "--seed", "0", "--no-shrink",
                                    "--out", str(where / "out")])
    assert ran.exit_code == 1, ran.output
    (trace,) = (where / "out").glob("*.jsonl")
    assert read_trace(trace).footer["steps"] >= 200
    page = where / "page.html"
    shown = CliRunner().invoke(main, ["show", str(trace), "--format", "html", "-o", str(page)])
    assert shown.exit_code == 0, shown.output
    return trace, page


class _Items(HTMLParser):
    """Each ``<li>`` of the decisions list: its id, its class, and the folds it is in."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.items: list[tuple[str, str, int]] = []
        self.depth = 0
        self.scripts: list[str] = []
        self._script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "details":
            self.depth += 1
        elif tag == "li" and found.get("id"):
            self.items.append((found["id"] or "", found.get("class") or "", self.depth))
        self._script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag == "details"
        self._script = False

    def handle_data(self, data: str) -> None:
        if self._script:
            self.scripts.append(data)


def _hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()


def test_the_page_carries_its_one_script_and_the_anchor_it_scrolls_to(
        long_page: tuple[Path, Path]) -> None:
    _, page = long_page
    text = page.read_text(encoding="utf-8")
    parsed = _Items()
    parsed.feed(text)
    (script,) = parsed.scripts
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', text)
    assert csp is not None
    assert f"script-src '{_hash(script)}';" in csp.group(1)  # that script and no other
    assert csp.group(1).startswith("default-src 'none'")
    assert 'getElementById("violation")' in script and "scrollIntoView" in script
    assert text.count('id="violation"') == 1
    assert re.search(r'<g class="mark violation bad" id="violation">', text)
    assert '<a href="#violation">' in text  # without the script, a link to it


def test_the_quiet_stretches_of_a_200_step_run_are_folded(
        long_page: tuple[Path, Path]) -> None:
    trace_path, page = long_page
    trace = read_trace(trace_path)
    text = page.read_text(encoding="utf-8")
    parsed = _Items()
    parsed.feed(text)
    folded = [(i, c) for i, c, depth in parsed.items if depth]
    folds = text.count('<li class="fold"><details>')
    assert folds >= 4 and len(folded) >= 100, (folds, len(folded))
    assert text.count('<g class="fold">') == folds  # a band in the lanes for each
    # A fold holds decisions only; nothing told (an event, a fault, the violation) is in one.
    assert all(c.startswith("decision") for _, c in folded)
    for i, _ in folded:
        record = trace.records[int(i[1:])]
        assert record["type"] == "decision"
    # Folding loses no record: every told record and decision is listed once.
    ids = [i for i, _, _ in parsed.items]
    told = [f"r{n}" for n, r in enumerate(trace.records)]
    assert len(ids) == len(set(ids)) and set(ids) <= set(told)
    assert sum(r["type"] == "decision" for r in trace.records) == sum(
        c.startswith("decision") for _, c, _ in parsed.items)
    # The lanes are narrower for it: fewer columns than records.
    width = int(re.search(r'<svg width="(\d+)" height="\d+" role="img"', text).group(1))
    assert width < len(trace.records) * 14


#: Run right after the page's own script: where the violation and its record are then.
PROBE = """(function(){
var box=function(e){var r=e.getBoundingClientRect();
return {left:r.left,top:r.top,right:r.right,bottom:r.bottom};};
document.body.setAttribute("data-probe",JSON.stringify({
violation:box(document.getElementById("violation")),
record:box(document.querySelector(".records .violation")),
steps:box(document.querySelector(".steps")),
lanes:box(document.querySelector(".scroll")),
lanesScrolled:document.querySelector(".scroll").scrollLeft,
width:innerWidth,height:innerHeight}));})();"""


@needs_chromium
def test_the_violation_is_in_view_when_the_page_opens_at_1400_by_1000(
        long_page: tuple[Path, Path], tmp_path: Path) -> None:
    assert CHROMIUM is not None
    _, page = long_page
    text = page.read_text(encoding="utf-8")
    probed = tmp_path / "probed.html"
    probed.write_text(text.replace("script-src '", f"script-src '{_hash(PROBE)}' '", 1)
                      .replace("</body>", f"<script>{PROBE}</script></body>", 1),
                      encoding="utf-8")
    common = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
              "--disable-extensions", "--hide-scrollbars", "--window-size=1400,1000",
              f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    done = subprocess.run([*common, "--dump-dom", probed.as_uri()], capture_output=True,
                          text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert found is not None, "the probe did not run: " + done.stderr[-2000:]
    probe = json.loads(found.group(1).replace("&quot;", '"'))
    # The window is 1400x1000; what a page gets of it may be less high (Chromium's
    # headless window keeps room for its frame), which only makes the check stricter.
    width, height = probe["width"], probe["height"]
    assert width == 1400 and 800 <= height <= 1000, probe
    # In view: inside the window, and inside the lanes' own scrolling box, which clips it.
    mark, lanes = probe["violation"], probe["lanes"]
    assert max(0, lanes["left"]) <= mark["left"] and mark["right"] <= min(width, lanes["right"]), \
        probe
    assert max(0, lanes["top"]) <= mark["top"] and mark["bottom"] <= min(height, lanes["bottom"]), \
        probe
    assert probe["lanesScrolled"] > 0, "the violation was off to the right: the lanes scrolled"
    record, steps = probe["record"], probe["steps"]
    assert steps["top"] <= record["top"] and record["bottom"] <= min(steps["bottom"], height), \
        probe
    # And a screenshot at that size, as a person opening the page would see it.
    shot = tmp_path / "page.png"
    taken = subprocess.run([*common, f"--screenshot={shot}", page.as_uri()],
                           capture_output=True, timeout=180, check=False)
    assert taken.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(shot.read_bytes()[16:20], "big"),
            int.from_bytes(shot.read_bytes()[20:24], "big")) == (1400, 1000)


@needs_chromium
def test_a_link_to_a_folded_record_opens_its_fold(long_page: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
    assert CHROMIUM is not None
    _, page = long_page
    text = page.read_text(encoding="utf-8")
    first = re.search(r'<a href="#(r\d+)"><g class="fold">', text)
    assert first is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
         "--disable-extensions", "--window-size=1400,1000", "--virtual-time-budget=5000",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
         f"{page.as_uri()}#{first.group(1)}"],
        capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    opened = re.findall(r'<li class="fold"><details( open="")?>', done.stdout)
    assert opened[0] == ' open=""' and opened.count(' open=""') == 1, opened
