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


#: Seeds of each run below: the retry bug breaks by the second seed (tests/test_trace_digest.py
#: pins 20 seeds of each config under four strategies); the SDK's start-up in each of
#: --check-determinism's fresh workers, not the seeds, is most of the test's time.
SEEDS = "10"


def test_the_idempotent_agent_passes_and_the_retry_bug_is_found(tmp_path: Path) -> None:
    code, doc = run("--seeds", SEEDS, tmp=tmp_path / "ok")
    assert code == 0 and doc["failures"] == [], doc
    code, doc = run("-c", "idempotent=false", "--seeds", SEEDS, "--check-determinism",
                    tmp=tmp_path / "bug")
    assert code == 1
    failures = doc["failures"]
    assert isinstance(failures, list) and failures
    assert {v for f in failures for v in f["violated"]} == {"ToolRunsOnce"}
    trace = failures[0]["trace"]
    replayed = CliRunner().invoke(main, ["replay", trace])
    assert replayed.exit_code == 1 and replayed.output.startswith("identical"), replayed.output


def test_an_anthropic_agent_reaches_the_fake_over_the_network(tmp_path: Path) -> None:
    anthropic = pytest.importorskip("anthropic")
    import trio

    from dst import Env, FaultPlan, Scenario, Sim
    from dst.fakes import llm_http
    from dst.testing import check_seeds

    scenario = Scenario("claude_agent", doc="an agent on the real anthropic SDK",
                        faults=FaultPlan(preemptions=1))

    def model(turn: llm_http.Turn) -> llm_http.Reply:
        if not turn.tool_results:
            return llm_http.tool_calls(("lookup", {"sku": "A-1"}))
        return llm_http.text("in stock")

    @scenario.setup
    def setup(sim: Sim, config: dict[str, object]) -> object:
        answers = sim.store("answers")
        llm_http.anthropic(sim, "claude", model)

        async def agent(env: Env) -> None:
            client = anthropic.AsyncAnthropic(base_url="http://claude:8000", api_key="x",
                                              max_retries=0)
            tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
            messages: list[dict[str, object]] = [{"role": "user", "content": "A-1?"}]
            while True:
                reply = await client.messages.create(model="m", max_tokens=64, tools=tools,
                                                     messages=messages)
                if reply.stop_reason != "tool_use":
                    break
                use = reply.content[0]
                messages += [{"role": "assistant", "content": [use.model_dump()]},
                             {"role": "user", "content": [{
                                 "type": "tool_result", "tool_use_id": use.id,
                                 "content": "3 left"}]}]
                await trio.sleep(0)
            await env.store.put("answer", reply.content[0].text)
            await client.close()

        sim.process("agent", agent, stores=["answers"])
        return answers

    @scenario.at_end("Answered")
    def answered(answers: object) -> object:
        return answers.peek("answer") == "in stock" or "no answer"  # type: ignore[attr-defined]

    checked = check_seeds(scenario, 10, out=tmp_path)
    assert checked.runs == 10
