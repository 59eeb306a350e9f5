"""``dst run --junit`` writes XML valid under both JUnit schemas CI servers read.

- Jenkins' (the xunit plugin's ``junit-10.xsd``): ``<testsuites>`` may carry name, time,
  tests, failures and errors; a suite needs name, tests, failures and errors.
- Ant's JUnit task (windyroad's ``JUnit.xsd``), the stricter: ``<testsuites>`` carries no
  attribute; each suite in it needs ``package`` and ``id`` besides name, ``timestamp``
  (``YYYY-MM-DDTHH:MM:SS``, no zone), hostname, tests, failures, errors and time, and holds
  exactly ``properties, testcase*, system-out, system-err`` in that order; a test case
  needs name, classname and time, and holds at most one of skipped, error or failure,
  each with a ``type``.

No schema validator is a dependency of dst's tests, so each schema's rules are written out
below as checks, one function per schema, and every report shape (failing groups, a
passing run, groups not kept, a stopped worker) must pass both.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from dst.cli import main
from dst.runner.reports import RunFacts, junit
from tests.test_bulk_reports import TWO_BUGS

_INT = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")
_SUREFIRE_TIME = re.compile(r"(([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\.[0-9]*)?")
_ANT_TIMESTAMP = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")


def _attrs(element: ET.Element, required: set[str], allowed: set[str]) -> None:
    where = f"<{element.tag} {element.attrib}>"
    assert required <= set(element.attrib), f"{where} lacks {required - set(element.attrib)}"
    assert set(element.attrib) <= required | allowed, \
        f"{where} has {set(element.attrib) - required - allowed}, which the schema forbids"


def _token(value: str | None) -> bool:
    """An ``xs:token`` with ``minLength 1``: something left once whitespace collapses."""
    return bool(" ".join((value or "").split()))


def ant_schema_errors(root: ET.Element) -> None:
    """Assert ``root`` is valid under Ant's JUnit.xsd (as ``<testsuites>``)."""
    assert root.tag == "testsuites"
    _attrs(root, set(), set())
    suites = list(root)
    for n, suite in enumerate(suites):
        assert suite.tag == "testsuite"
        _attrs(suite, {"name", "timestamp", "hostname", "tests", "failures", "errors", "time",
                       "package", "id"}, {"skipped"})
        assert _token(suite.get("name")) and _token(suite.get("hostname"))
        assert _token(suite.get("package")) and suite.get("id") == str(n)
        assert _ANT_TIMESTAMP.fullmatch(suite.get("timestamp") or ""), suite.get("timestamp")
        for count in ("tests", "failures", "errors", "skipped"):
            assert count not in suite.attrib or _INT.fullmatch(suite.attrib[count])
        assert _DECIMAL.fullmatch(suite.get("time") or "")
        tags = [child.tag for child in suite]
        assert re.fullmatch(r"properties,(testcase,)*system-out,system-err,",
                            "".join(f"{t}," for t in tags)), tags
        properties = suite.find("properties")
        assert properties is not None
        for prop in properties:
            assert prop.tag == "property"
            _attrs(prop, {"name", "value"}, set())
            assert _token(prop.get("name"))
        for part in ("system-out", "system-err"):
            element = suite.find(part)
            assert element is not None and len(element) == 0  # text only
        cases = suite.findall("testcase")
        for case in cases:
            _attrs(case, {"name", "classname", "time"}, set())
            assert _token(case.get("name")) and _token(case.get("classname"))
            assert _DECIMAL.fullmatch(case.get("time") or "")
            assert len(case) <= 1, f"test case {case.get('name')} holds {len(case)} results"
            for result in case:
                assert result.tag in ("skipped", "error", "failure")
                if result.tag != "skipped":
                    _attrs(result, {"type"}, {"message"})
                    assert len(result) == 0  # text only


def jenkins_schema_errors(root: ET.Element) -> None:
    """Assert ``root`` is valid under Jenkins' junit-10.xsd (as ``<testsuites>``)."""
    assert root.tag == "testsuites"
    _attrs(root, set(), {"name", "time", "tests", "failures", "errors"})
    assert "time" not in root.attrib or _SUREFIRE_TIME.fullmatch(root.attrib["time"])
    for suite in root:
        assert suite.tag == "testsuite"
        _attrs(suite, {"name", "tests", "failures", "errors"},
               {"group", "time", "skipped", "timestamp", "hostname", "id", "package", "file",
                "log", "url"})
        assert "time" not in suite.attrib or _SUREFIRE_TIME.fullmatch(suite.attrib["time"])
        for child in suite:
            assert child.tag in ("testsuite", "properties", "testcase", "system-out",
                                 "system-err")
        for prop in suite.iter("property"):
            _attrs(prop, {"name", "value"}, set())
        for case in suite.findall("testcase"):
            _attrs(case, {"name"}, {"time", "classname", "group"})
            for result in case:
                assert result.tag in ("skipped", "error", "failure", "rerunFailure",
                                      "rerunError", "flakyFailure", "flakyError",
                                      "system-out", "system-err")
                if result.tag in ("skipped", "error", "failure"):
                    _attrs(result, set(), {"type", "message"})
                    assert len(result) == 0


def counts_agree(root: ET.Element) -> None:
    """The suite's counts are of its test cases: failures and errors never exceed tests."""
    for suite in root.iter("testsuite"):
        cases = suite.findall("testcase")
        failing = [c for c in cases if c.find("failure") is not None]
        erring = [c for c in cases if c.find("error") is not None]
        assert int(suite.get("tests") or -1) == len(cases)
        assert int(suite.get("failures") or -1) == len(failing)
        assert int(suite.get("errors") or -1) == len(erring)
        assert len(failing) + len(erring) <= len(cases)


def _both(root: ET.Element) -> None:
    ant_schema_errors(root)
    jenkins_schema_errors(root)
    counts_agree(root)


def _run(tmp_path: Path, *args: str) -> ET.Element:
    xml = tmp_path / "junit.xml"
    done = CliRunner().invoke(main, ["run", *args, "--out", str(tmp_path / "o"),
                                     "--junit", str(xml)])
    assert done.exit_code in (0, 1), done.output
    return ET.parse(xml).getroot()


def test_failing_groups_are_valid_under_both_schemas(tmp_path: Path) -> None:
    source = tmp_path / "two.py"
    source.write_text(TWO_BUGS, encoding="utf-8")
    root = _run(tmp_path, str(source), "--seeds", "12", "--no-shrink")
    _both(root)
    failures = list(root.iter("failure"))
    assert len(failures) == 2 and all(f.get("type") and f.text for f in failures)


def test_a_passing_run_is_valid_under_both_schemas(tmp_path: Path) -> None:
    root = _run(tmp_path, "counter", "--seeds", "10")
    _both(root)
    assert len(list(root.iter("testcase"))) == 1 and not list(root.iter("failure"))


def test_groups_not_kept_are_valid_under_both_schemas(tmp_path: Path) -> None:
    source = tmp_path / "two.py"
    source.write_text(TWO_BUGS, encoding="utf-8")
    root = _run(tmp_path, str(source), "--seeds", "12", "--no-shrink", "--max-groups", "1")
    _both(root)
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == ["two [] group 1", "two [] groups not kept"]


@pytest.mark.parametrize("hostile", ["plain", "a\x1b[2J\x00b\ud800 <x>&"])
def test_a_stopped_worker_is_an_error_valid_under_both_schemas(hostile: str) -> None:
    facts = RunFacts(hostile, {"k": hostile}, "random", "0..9", None, 3, 0, 0, 1.5,
                     "incomplete", [], replay=lambda p: f"dst replay {p}",
                     rerun=lambda s: f"dst run x --seed {s}",
                     stalled=f"worker stopped: {hostile}")
    text = junit(facts)
    root = ET.fromstring(text)
    _both(root)
    [error] = list(root.iter("error"))
    assert error.get("type") == "incomplete"
