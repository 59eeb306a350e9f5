"""Reports of a whole ``dst run``: Markdown to paste into an issue, JUnit XML for CI.

Both are written from the failure groups (``dst.runner.groups``), never one
entry per failing seed, so a run with 20,000 failures of one bug reports one
group; and at most ``--max-groups`` groups, so a run whose every seed fails its
own way reports those and a count of the failing seeds in the groups not kept.
Every string that comes from a trace or from the scenario (an actor, an event, a
message, a config value) is untrusted: the Markdown passes it through
:func:`~dst.trace.escape.markdown_inline` and shows commands as indented code
blocks (which Markdown prints as they are), and the XML is built by ElementTree
(which escapes markup) from text whose control characters, lone surrogates and
non-characters are first shown as escapes (XML 1.0 forbids them outright).
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from .. import __version__
from ..errors import DstError
from ..trace.codec import read_trace
from ..trace.escape import markdown_inline, visible
from ..trace.model import Trace
from ..trace.render import counted, story
from .groups import Report

#: Characters XML 1.0 does not allow, even escaped, beyond what ``visible`` shows.
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", visible(text))


@dataclass
class RunFacts:
    """What a report says about one run: the run, then its groups."""

    scenario: str
    config: dict[str, Any]
    strategy: str
    #: The seeds asked for, as text (``0..1999``, ``0.. for 8h``), and the shard.
    seeds: str
    shard: str | None
    runs: int
    resumed: int
    failed: int
    seconds: float
    #: How the run ended: ``done``, ``interrupted``, ``max-failures``, ``incomplete``.
    status: str
    groups: list[Report]
    #: ``dst replay PATH ...`` for a trace path, and ``dst run ... --seed N`` for a seed.
    replay: Callable[[Path], str]
    rerun: Callable[[int], str]
    stalled: str | None = None
    by_invariant: dict[str, int] = field(default_factory=dict)
    #: Failing seeds in groups not kept (``--max-groups``), per invariant and in all.
    not_kept: dict[str, int] = field(default_factory=dict)
    not_kept_failed: int = 0
    max_groups: int | None = None
    #: The seeds a ``@dst.test`` body skipped (``pytest.skip()``), told in one line (None:
    #: none did), and whether every seed run did: then the run tested nothing.
    skipped: str | None = None
    skipped_all: bool = False
    #: Seeds that did not repeat themselves, each with its first difference (a second run
    #: of the seed, or of its schedule, recorded otherwise): ``dst run`` exits 3.
    nondeterministic: list[tuple[int, str]] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"{self.scenario} [{config_text(self.config)}]"

    def not_kept_line(self, name: Callable[[str], str] = _xml) -> str | None:
        return not_kept_text(self.not_kept_failed, self.not_kept, self.max_groups, name)


def not_kept_text(failed: int, by_invariant: dict[str, int], max_groups: int | None,
                  name: Callable[[str], str] = visible) -> str | None:
    """``and N more failing seeds in groups not kept: Inv xN (--max-groups ...)``; None
    when every failing seed is in a group kept.  ``name`` shows an invariant's name."""
    if not failed:
        return None
    by = ", ".join(f"{name(inv)} x{n:,}" for inv, n in sorted(by_invariant.items()))
    bound = (f" (--max-groups {max_groups} keeps the first {counted(max_groups, 'group')} "
             "found, in seed order; raise it to keep more)" if max_groups is not None else "")
    return (f"and {failed:,} more failing seed{'s' * (failed != 1)} in groups not kept: "
            f"{by}{bound}")


#: Nondeterministic seeds a report names; the rest are counted.
SEEDS_NAMED = 10


def nondeterministic_text(facts: RunFacts) -> str:
    """``N of M seeds did not repeat themselves (seeds 3, 7, ...)``: the run's verdict is
    not to be trusted, whatever else it found."""
    seeds = [seed for seed, _ in facts.nondeterministic]
    n = len(seeds)
    named = ", ".join(map(str, seeds[:SEEDS_NAMED])) + (
        f" and {n - SEEDS_NAMED:,} more" if n > SEEDS_NAMED else "")
    return (f"{n:,} of {facts.runs:,} seeds did not repeat "
            f"{'themselves' if n != 1 else 'itself'} (seed{'s' * (n != 1)} {named})")


def config_text(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in config.items())


def shown_trace(report: Report) -> tuple[Path, Trace] | None:
    """The trace a group is told by: its shrunk one, else its shortest kept one."""
    candidates = ([report.shrunk.path] if report.shrunk else []) + [p for _, _, p in report.kept]
    for path in candidates:
        try:
            return path, read_trace(path)
        except DstError:
            continue  # deleted or edited since: try the next, or tell it without a story
    return None


def violation_of(trace: Trace) -> dict[str, Any] | None:
    return next((r for r in trace.records if r["type"] == "violation"), None)


# -- Markdown --------------------------------------------------------------------------


def markdown(facts: RunFacts) -> str:
    """A summary of the run in GitHub Markdown; everything from traces escaped."""
    md = markdown_inline
    rate = (facts.runs - facts.resumed) / facts.seconds if facts.seconds > 0 else 0.0
    n = len(facts.groups)
    more = "more than " if facts.not_kept_failed else ""
    head = (f"{facts.failed:,} failing seed{'s' * (facts.failed != 1)} in {more}{n:,} "
            f"group{'s' * (n != 1 or bool(more))}" if facts.failed
            else f"nothing tested, every one of {facts.runs:,} seeds skipped"
            if facts.skipped_all else f"no failures in {facts.runs:,} seeds")
    if facts.nondeterministic:  # never "no failures": dst run exits 3
        k = len(facts.nondeterministic)
        head = (f"{k:,} seed{'s' * (k != 1)} did not repeat "
                f"{'themselves' if k != 1 else 'itself'}"
                + (f"; {head}" if facts.failed else ""))
    out = [f"### dst run {md(facts.scenario)}: {head}", "",
           f"- scenario: {md(facts.scenario)}",
           f"- config: {md(config_text(facts.config)) or 'defaults'}",
           f"- strategy: {md(facts.strategy)}",
           f"- seeds: {md(facts.seeds)}" + (f" (shard {md(facts.shard)})" if facts.shard else "")
           + f"; {facts.runs:,} run ({facts.resumed:,} of them resumed), "
             f"{facts.failed:,} failed",
           f"- time: {facts.seconds:.1f}s ({rate:,.0f} seeds/s); ended: {md(facts.status)}",
           f"- dst {md(__version__)} (Python {md(platform.python_version())}, "
           f"trio {md(trio.__version__)})", ""]
    if facts.stalled:
        out += [f"**Incomplete:** {md(facts.stalled)}", ""]
    if facts.nondeterministic:
        seed, difference = facts.nondeterministic[0]
        out += [f"**Nondeterministic:** {md(nondeterministic_text(facts))}, so what they "
                "found cannot be replayed (`dst run` exits 3). The first difference, "
                f"seed {seed}:", "", *[f"    {visible(line)}" for line in
                                         difference.splitlines() or [""]], ""]
    if facts.skipped:
        out += [f"**{'Nothing tested' if facts.skipped_all else 'Skipped'}:** "
                f"{md(facts.skipped)}", ""]
    unkept = facts.not_kept_line(md)
    if not facts.groups:
        return "\n".join(out + ([unkept] if unkept else [])) + "\n"
    out += ["| group | violated | seeds | first seed | shortest seed |",
            "|---:|---|---:|---:|---|"]
    for i, g in enumerate(facts.groups, 1):
        steps, seed = g.shortest
        out.append(f"| {i} | {md(', '.join(g.violated))} | {g.count:,} | {g.first_seed} | "
                   f"{seed} ({counted(steps, 'step')}) |")
    if unkept:
        out += ["", unkept]
    for i, g in enumerate(facts.groups, 1):
        out += ["", f"#### Group {i}: {md(', '.join(g.violated))} violated in "
                    f"{g.count:,} seed{'s' * (g.count != 1)}", ""]
        out += _markdown_story(g, facts.replay)
        steps, seed = g.shortest
        out += ["", f"First seed {g.first_seed}, shortest seed {seed} ({counted(steps, 'step')}); "
                    "run one again with:", "", f"    {visible(facts.rerun(seed))}"]
    return "\n".join(out) + "\n"


def _markdown_story(g: Report, replay_of: Callable[[Path], str]) -> list[str]:
    md = markdown_inline
    found = shown_trace(g)
    if found is None:
        return ["(no trace of this group is kept: run its shortest seed again, below)"]
    path, trace = found
    vio = violation_of(trace)
    lines: list[str] = []
    if vio is not None:
        lines += [f"**{md(str(vio['invariant']))} violated** at step {vio['step']}: "
                  f"{md(str(vio['message']))}", ""]
    told = story(trace)
    steps = trace.footer.get("steps")
    how = (f"shrunk from {g.shrunk.from_steps} to {counted(g.shrunk.steps, 'step')}"
           if g.shrunk and path == g.shrunk.path else counted(steps, "step"))
    lines += [f"**Shortest story** ({counted(len(told), 'line')}, {how}):", ""]
    lines += [f"{n}. {t} {md(actor)}: {md(text)}" for n, (_, t, actor, text) in
              enumerate(told, 1)]
    # The command the run prints, ``--scenario`` and all: a user's scenario is no
    # shipped one, and ``dst replay`` refuses its trace without it.
    lines += ["", "**Replay** (byte for byte):", "", f"    {visible(replay_of(path))}"]
    return lines


# -- JUnit XML --------------------------------------------------------------------------


def junit(facts: RunFacts) -> str:
    """JUnit XML: a failing test case per group (and one for the failing seeds in groups
    not kept, and one for the seeds that did not repeat themselves); the scenario and
    config's own test case when nothing failed or a worker had to be stopped (its
    error).  Every count is of test cases: failures <= tests.

    Valid under both schemas CI servers read: Jenkins' (``junit-10.xsd``) and the
    stricter one of Ant's JUnit task (``JUnit.xsd``).  So ``<testsuites>`` has no
    attributes (Ant's allows none), the suite has every attribute Ant requires
    (``package``, ``id``, ``timestamp`` in UTC without a zone, ``hostname``) and ends
    with ``<system-out>`` and ``<system-err>``, and a test case holds one
    ``<failure>`` or ``<error>`` at most, each with its ``type``."""
    import socket
    import time
    import xml.etree.ElementTree as ET  # only for --junit

    unkept = facts.not_kept_line()
    failures = len(facts.groups) + (1 if unkept else 0) + (1 if facts.nondeterministic else 0)
    errors = 1 if facts.stalled else 0
    tests = failures + (1 if errors or not failures else 0)
    # Every seed skipped, and nothing else to say: the run's own case is skipped, not passed.
    skipped = facts.skipped_all and tests > failures and not errors
    seconds = f"{facts.seconds:.3f}"
    # A group's seeds ran among all the others: no time of its own is known, so its case
    # takes none, and the run's time is the suite's (and the run's own case's).
    untimed = "0.000"
    began = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - facts.seconds))
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name=_xml(f"dst run {facts.scenario}"),
                          package="dst", id="0", timestamp=began,
                          hostname=_xml(socket.gethostname()) or "localhost",
                          tests=str(tests), failures=str(failures), errors=str(errors),
                          skipped=str(int(skipped)), time=seconds)
    props = ET.SubElement(suite, "properties")
    for name, value in (("scenario", facts.scenario), ("config", config_text(facts.config)),
                        ("strategy", facts.strategy), ("seeds", facts.seeds),
                        ("shard", facts.shard or ""), ("runs", str(facts.runs)),
                        ("failed", str(facts.failed)), ("ended", facts.status),
                        ("dst", __version__)):
        ET.SubElement(props, "property", name=name, value=_xml(value))
    classname = _xml(f"dst.{facts.scenario}")
    if tests > failures:  # nothing failed, or a worker had to be stopped
        case = ET.SubElement(suite, "testcase", classname=classname, name=_xml(facts.title),
                             time=seconds)
        if facts.stalled:
            ET.SubElement(case, "error", message=_xml(facts.stalled), type="incomplete")
        elif skipped:
            ET.SubElement(case, "skipped", message=_xml(facts.skipped or ""), type="skipped")
    for i, g in enumerate(facts.groups, 1):
        steps, seed = g.shortest
        found = shown_trace(g)
        replay = facts.replay(found[0]) if found else facts.rerun(seed)
        message = (f"group {i}: {', '.join(g.violated)} violated in {g.count:,} "
                   f"seed{'s' * (g.count != 1)} (first {g.first_seed}, shortest {seed}: "
                   f"{counted(steps, 'step')}); replay: {replay}")
        case = ET.SubElement(suite, "testcase", classname=classname,
                             name=_xml(f"{facts.title} group {i}"), time=untimed)
        fail = ET.SubElement(case, "failure", message=_xml(message),
                             type=_xml(", ".join(g.violated)))
        told = story(found[1]) if found else []
        fail.text = "\n".join([_xml(f"{t}  {actor}  {text}") for _, t, actor, text in told]
                              + [_xml(f"replay: {replay}")])
    if unkept:
        case = ET.SubElement(suite, "testcase", classname=classname,
                             name=_xml(f"{facts.title} groups not kept"), time=untimed)
        ET.SubElement(case, "failure", message=unkept,
                      type=_xml(", ".join(sorted(facts.not_kept))))
    if facts.nondeterministic:
        seed, difference = facts.nondeterministic[0]
        first = difference.splitlines()[0] if difference else ""
        case = ET.SubElement(suite, "testcase", classname=classname,
                             name=_xml(f"{facts.title} nondeterministic"), time=untimed)
        fail = ET.SubElement(case, "failure", type="nondeterministic", message=_xml(
            f"{nondeterministic_text(facts)}; first difference, seed {seed}: {first}"))
        fail.text = "\n".join(_xml(f"seed {s}: {line}" if i == 0 else f"    {line}")
                              for s, text in facts.nondeterministic[:SEEDS_NAMED]
                              for i, line in enumerate(text.splitlines() or [""]))
    ET.SubElement(suite, "system-out")
    ET.SubElement(suite, "system-err")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=False) + "\n"


def write_report(path: str, text: str, xml: bool = False) -> None:
    """Write a report; a lone surrogate left anywhere becomes an escape, never an error."""
    head = '<?xml version="1.0" encoding="UTF-8"?>\n' if xml else ""
    Path(path).write_text(head + text, encoding="utf-8", errors="backslashreplace")
