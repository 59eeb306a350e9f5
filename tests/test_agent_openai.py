"""The shipped agent on the real openai SDK: a fake LLM and a tool service over the
simulated network, nothing monkeypatched; a retried turn re-running the tool is found,
and every failure replays exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dst.cli import main

pytest.importorskip("openai")


def run(*args: str, tmp: Path) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(main, ["run", "agent_openai", *args, "--out", str(tmp),
                                       "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_the_idempotent_agent_passes_and_the_retry_bug_is_found(tmp_path: Path) -> None:
    code, doc = run("--seeds", "20", tmp=tmp_path / "ok")
    assert code == 0 and doc["failures"] == [], doc
    code, doc = run("-c", "idempotent=false", "--seeds", "20", "--check-determinism",
                    tmp=tmp_path / "bug")
    assert code == 1
    failures = doc["failures"]
    assert isinstance(failures, list) and failures
    assert {v for f in failures for v in f["violated"]} == {"ToolRunsOnce"}
    trace = failures[0]["trace"]
    replayed = CliRunner().invoke(main, ["replay", trace])
    assert replayed.exit_code == 1 and replayed.output.startswith("identical"), replayed.output
