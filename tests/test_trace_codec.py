"""Trace format v1: what the writer produces is exactly what docs/trace-format.md says."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from dst.errors import TraceFormatError
from dst.registry import load
from dst.runner.single import RunResult, run_seeds
from dst.trace.codec import read_trace, write_trace
from dst.trace.model import Trace


def _failing_results() -> list[RunResult]:
    out: list[RunResult] = []
    for name, switch in (("counter", {"cas": "false"}), ("ping", {"dedup": "false"})):
        scenario = load(name)
        run_seeds(scenario, scenario.config(switch), range(30), out.append)
    return out


@pytest.fixture(scope="module")
def results() -> list[RunResult]:
    return _failing_results()


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def test_every_trace_written_reads_back_byte_identical(results: list[RunResult],
                                                       tmp_path: Path) -> None:
    for r in results:
        path = write_trace(r.trace(), tmp_path / f"{r.scenario}-{r.seed}.jsonl")
        again = read_trace(path)
        assert again.text() == r.trace().text() == path.read_text(encoding="utf-8")


def test_every_line_is_canonical_json_with_a_type(results: list[RunResult]) -> None:
    for r in results:
        text = r.trace().text()
        assert text.endswith("\n") and "\n\n" not in text
        lines = text.splitlines()
        objs = [json.loads(line) for line in lines]
        assert [_canonical(o) for o in objs] == lines
        assert objs[0]["type"] == "header" and objs[-1]["type"] == "footer"
        assert {o["type"] for o in objs[1:-1]} <= {"decision", "event", "fault", "violation",
                                                    "check"}


def test_the_hash_follows_the_documented_rule(results: list[RunResult]) -> None:
    """Every line before the footer plus "\\n", then the footer without sha256 plus "\\n"."""
    for r in results[:10]:
        lines = r.trace().text().splitlines()
        footer = json.loads(lines[-1])
        claimed = footer.pop("sha256")
        h = hashlib.sha256()
        for line in lines[:-1]:
            h.update(line.encode() + b"\n")
        h.update(_canonical(footer).encode() + b"\n")
        assert h.hexdigest() == claimed


def test_the_footer_summarises_the_records(results: list[RunResult]) -> None:
    for r in results:
        trace = r.trace()
        violations = [rec["invariant"] for rec in trace.records if rec["type"] == "violation"]
        assert trace.footer["violated"] == list(dict.fromkeys(violations))
        assert (trace.footer["verdict"] == "fail") == bool(violations)
        assert trace.footer["steps"] >= max(rec["step"] for rec in trace.records)


def test_the_header_names_the_run(results: list[RunResult]) -> None:
    header = results[0].trace().header
    assert header["format"] == "dst-trace" and header["version"] == 2
    assert header["scenario"] == "counter" and header["seed"] == 0
    assert header["config"] == {"cas": False, "workers": 2, "increments": 7}
    assert set(header) == {"type", "format", "version", "scenario", "config", "seed", "strategy",
                           "faults", "max_steps", "dst_version", "python", "trio", "hash_seed"}


def _rewrite(tmp_path: Path, trace: Trace, edit: Any) -> Path:
    """Apply ``edit`` to the parsed lines, then re-seal so only the edit itself is wrong."""
    header, records = dict(trace.header), [dict(r) for r in trace.records]
    footer = dict(trace.footer)
    edit(header, records, footer)
    path = tmp_path / "edited.jsonl"
    path.write_text(Trace(header, records, footer).text(), encoding="utf-8")
    return path


@pytest.mark.parametrize(("edit", "message"), [
    (lambda h, rs, f: h.pop("seed"), "lacks field 'seed'"),
    (lambda h, rs, f: h.update(seed="0"), "wrong type"),
    (lambda h, rs, f: h.update(extra=1), "unknown field"),
    (lambda h, rs, f: rs[0].update(chosen=99), "not an index"),
    (lambda h, rs, f: rs[0].update(chosen=True), "boolean"),
    (lambda h, rs, f: rs[0].update(enabled=[]), "non-empty"),
    (lambda h, rs, f: rs[0].update(type="telemetry"), "unknown record type"),
    (lambda h, rs, f: rs[-1].update(step=0, t=0.0) or rs.append(dict(rs[0], step=0)),
     "comes after"),
    (lambda h, rs, f: rs[-1].update(step=rs[-1]["step"] + 1000), "footer says"),
    (lambda h, rs, f: f.update(verdict="maybe"), "not one of pass, fail"),
])
def test_a_resealed_trace_with_a_bad_field_is_still_refused(
    results: list[RunResult], tmp_path: Path, edit: Any, message: str
) -> None:
    trace = next(r for r in results if r.scenario == "counter").trace()
    path = _rewrite(tmp_path, trace, edit)
    with pytest.raises(TraceFormatError, match=message):
        read_trace(path)


def test_nan_is_refused(results: list[RunResult], tmp_path: Path) -> None:
    text = results[0].trace().text().replace('"t":0.0', '"t":NaN', 1)
    path = tmp_path / "nan.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceFormatError, match="JSON"):
        read_trace(path)


def test_a_trace_in_memory_is_validated_like_a_file(results: list[RunResult]) -> None:
    from dst.trace.codec import loads_trace

    text = results[0].trace().text()
    assert loads_trace(text).text() == text
    with pytest.raises(TraceFormatError, match="truncated"):
        loads_trace(text[:-1])


def test_an_event_that_logs_nan_still_gets_a_valid_trace(tmp_path: Path) -> None:
    import structlog

    from dst import Env, Scenario, Sim
    from dst.runner.single import run_one

    scenario = Scenario("nan", doc="logs values canonical JSON cannot hold")

    @scenario.setup
    def setup(sim: Sim, config: Any) -> None:
        async def main(env: Env) -> None:
            await env.store.get("x")
            structlog.get_logger().info("ratio", value=float("nan"),
                                        nested={"a": [float("-inf")]})

        sim.process("p", main, stores=["db"])

    path = write_trace(run_one(scenario, {}, 0).trace(), tmp_path / "nan.jsonl")
    event = next(rec for rec in read_trace(path).records if rec["type"] == "event")
    assert event["fields"] == {"value": "nan", "nested": {"a": ["-inf"]}}
