"""Shrinking: a failing trace becomes the shortest story that breaks the same invariant.

``Follow`` (the lenient replay shrinking runs its candidates under), the library
function ``shrink``, ``dst shrink``, and ``dst run`` telling the shrunk story of
its first failure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.explore.follow import Follow, default_index, is_fault
from dst.explore.shrink import shrink
from dst.registry import load
from dst.runner.single import RunResult, run_one, run_seeds
from dst.trace.codec import read_trace, write_trace
from dst.trace.model import Trace
from dst.verdict_table import ACTIONS


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def protocol_actions(trace: Trace) -> int:
    """The approval runtime's protocol actions in a trace (restore, check, spend, ...)."""
    return sum(1 for r in trace.records
               if r["type"] == "event" and r["fields"].get("action") in ACTIONS)


def failing_runs(name: str, switches: dict[str, str], seeds: int) -> list[RunResult]:
    scenario = load(name)
    runs: list[RunResult] = []
    run_seeds(scenario, scenario.config(switches), range(seeds), runs.append)
    return [r for r in runs if r.verdict == "fail"]


def counter_trace(tmp_path: Path, cas: str = "false", seed: int = 0) -> Path:
    scenario = load("counter")
    result = run_one(scenario, scenario.config({"cas": cas}), seed)
    return write_trace(result.trace(), tmp_path / f"counter-{seed}.jsonl")


# -- Follow ------------------------------------------------------------------------


def test_follow_takes_the_recorded_label_wherever_it_is_enabled_now() -> None:
    follow = Follow(["b@get(x)", "timer@1.000"])
    assert follow.choose(1, ["a@get(x)", "b@get(x)"], None) == 1
    # Another position: the label recorded at step 2 is not there, so the default.
    assert follow.choose(2, ["a@get(x)", "b@get(x)"], None) == 0
    assert (follow.followed, follow.defaulted) == (1, 1)


def test_follow_defaults_to_the_calm_option_beyond_the_recording() -> None:
    follow = Follow([])
    assert follow.choose(1, ["crash:p", "drop:m1(a->b)", "timer@2.000", "p@put(k)"], None) == 3
    assert follow.choose(2, ["p@call:pay.charge", "p@call:pay.charge!fail"], None) == 0
    assert follow.choose(3, ["crash:p", "timer@2.000"], None) == 1  # only a timer is calm
    # Letting the task that yielded go on (weight 1.0) spends no preemption.
    assert follow.choose(4, ["p/a@run", "p/b@run"], [0.2, 1.0]) == 1
    assert all(map(is_fault, ["crash:p", "dup:m2(a->b)", "partition:p",
                              "p/t@call:svc.op!lose_reply"]))
    assert not any(map(is_fault, ["deliver:m1(a->b)", "restart:p", "llm:fail", "p@run"]))


def test_follow_takes_a_renumbered_message_for_the_recorded_one() -> None:
    """Without an earlier duplicate, the third message is the second: same route, same story."""
    follow = Follow(["deliver:m3(conn-2->agent)"])
    assert follow.choose(1, ["agent@scan(c/)", "deliver:m2(conn-2->agent)"], None) == 1
    assert default_index(["deliver:m2(conn-2->agent)"], None) == 0


def test_a_run_followed_from_its_own_decisions_is_the_same_run() -> None:
    scenario = load("approval")
    config = scenario.config({"spend_mode": "after"})
    original = run_one(scenario, config, 7)
    followed = run_one(scenario, config, 7,
                       strategy=lambda _s: Follow(original.trace().decisions))
    assert followed.trace().records == original.trace().records


# -- shrink, the library -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["after", "before"])
def test_an_approval_failure_shrinks_no_longer_than_the_shortest_random_story(mode: str) -> None:
    """The longest failing story among many seeds shrinks to at most the shortest any seed
    found: in decisions, and in the protocol actions a model checker would count."""
    fails = failing_runs("approval", {"spend_mode": mode}, 400 if mode == "before" else 100)
    shortest = min(r.steps for r in fails)
    fewest_actions = min(protocol_actions(r.trace()) for r in fails)
    longest = max(fails, key=lambda r: (r.steps, -r.seed))
    assert longest.steps > shortest

    res = shrink(load("approval"), longest.trace(), budget=60)
    assert res.stopped == "fixpoint"
    assert res.invariant == longest.violated[0]
    assert res.trace.violated[0] == longest.violated[0]  # the same invariant, first
    assert res.after.steps == res.trace.footer["steps"] <= shortest < res.before.steps
    assert protocol_actions(res.trace) <= fewest_actions
    assert res.after.faults <= res.before.faults


def test_shrinking_gives_the_same_trace_every_time() -> None:
    (first,) = failing_runs("approval", {"spend_mode": "before"}, 30)[:1]
    one = shrink(load("approval"), first.trace(), budget=60)
    two = shrink(load("approval"), first.trace(), budget=60)
    assert one.stopped == two.stopped == "fixpoint"
    assert one.trace.text() == two.trace.text()
    assert (one.runs, one.accepted) == (two.runs, two.accepted)


def test_faults_that_do_not_matter_are_dropped() -> None:
    with_faults = next(r for r in failing_runs("approval", {"spend_mode": "after"}, 40)
                       if any(is_fault(e[c]) for e, c in r.trace().decisions))
    res = shrink(load("approval"), with_faults.trace(), budget=60)
    assert res.before.faults > 0 and res.after.faults == 0


def test_a_shorter_story_of_another_shape_among_random_walks_wins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A retry after a timeout cannot be shrunk into the duplicated request that double
    applies one step sooner (no deletion turns the one into the other); a random walk
    with a duplicate, shrunk within its shape, gives the shorter story.  The timeout
    fires before the ack only as a slow fault (``timer@T!slow``): the shape is "slow
    faults only"."""
    scenario = load("ping")
    runs: list[RunResult] = []
    run_seeds(scenario, scenario.config({"dedup": "false"}), range(50), runs.append)

    def only_slow(decisions: list[tuple[tuple[str, ...], int]]) -> bool:
        return all(e[c].endswith("!slow") for e, c in decisions if is_fault(e[c]))

    calm = next(r for r in runs if r.verdict == "fail" and only_slow(r.trace().decisions))
    monkeypatch.setattr("dst.explore.shrink.RESTARTS", 0)
    alone = shrink(scenario, calm.trace(), budget=60)
    assert alone.stopped == "fixpoint" and only_slow(alone.trace.decisions)
    monkeypatch.undo()
    res = shrink(scenario, calm.trace(), budget=60)
    assert res.stopped == "fixpoint" and res.after.steps < alone.after.steps
    assert any(e[c].startswith("dup:") for e, c in res.trace.decisions)
    assert res.trace.violated == calm.violated


def test_a_run_budget_returns_the_best_found_so_far(tmp_path: Path) -> None:
    trace = read_trace(counter_trace(tmp_path))
    res = shrink(load("counter"), trace, max_runs=1)  # only the check that it reproduces
    assert res.stopped == "budget" and res.runs == 1 and not res.improved
    assert res.trace.records == trace.records


# -- dst shrink --------------------------------------------------------------------


def test_the_shrunk_trace_replays_identically_through_the_cli(tmp_path: Path) -> None:
    source = counter_trace(tmp_path)
    done = invoke("shrink", str(source))
    assert done.exit_code == 1, done.output
    out = tmp_path / "counter-0.min.jsonl"
    assert f"replay: dst replay {out}" in done.stdout
    assert "NoLostIncrement violated in 4 steps (from 7)" in done.stdout
    replayed = invoke("replay", str(out))
    assert replayed.exit_code == 1, replayed.output
    assert replayed.stdout.startswith("identical: ")
    assert "NoLostIncrement violated again" in replayed.stdout


def test_dst_shrink_writes_the_same_bytes_twice_and_reports_in_json(tmp_path: Path) -> None:
    source = counter_trace(tmp_path, seed=3)
    texts = []
    for name in ("a.jsonl", "b.jsonl"):
        done = invoke("shrink", str(source), "-o", str(tmp_path / name), "--json")
        assert done.exit_code == 1, done.output
        texts.append((tmp_path / name).read_bytes())
    doc = json.loads(done.stdout)
    assert texts[0] == texts[1]
    assert doc["invariant"] == "NoLostIncrement" and doc["stopped"] == "fixpoint"
    assert doc["steps"]["after"] < doc["steps"]["before"]
    assert doc["out"] == str(tmp_path / "b.jsonl")


def test_a_passing_trace_is_refused_in_one_line(tmp_path: Path) -> None:
    source = counter_trace(tmp_path, cas="true")
    done = invoke("shrink", str(source))
    assert done.exit_code == 2, done.output
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ")
    assert "passing run" in done.stderr and "only a failing trace can be shrunk" in done.stderr
    assert not (tmp_path / "counter-0.min.jsonl").exists()


def test_a_tiny_budget_still_writes_a_trace_that_replays(tmp_path: Path) -> None:
    source = counter_trace(tmp_path)
    done = invoke("shrink", str(source), "--budget", "1ms", "--json")
    assert done.exit_code == 1, done.output
    doc = json.loads(done.stdout)
    assert doc["stopped"] == "budget"
    assert doc["steps"]["after"] <= doc["steps"]["before"]
    assert invoke("replay", doc["out"]).exit_code == 1


def test_a_bad_budget_is_a_usage_error() -> None:
    done = invoke("shrink", "x.jsonl", "--budget", "soon")
    assert done.exit_code == 2 and "duration" in done.stderr


SCENARIO = '''
from dst import Env, Scenario, Sim

scenario = Scenario("tally", doc="two clerks add one each to a tally")


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    db = sim.store("db")

    async def clerk(env: Env) -> None:
        {extra}
        n = await env.store.get("n") or 0
        await env.store.put("n", n + 1)
        await env.store.put(f"done/{{env.name}}", 1)

    sim.process("clerk-1", clerk, stores=["db"])
    sim.process("clerk-2", clerk, stores=["db"])
    return db


@scenario.invariant("NoLostAdd")
def no_lost_add(db) -> bool | str:
    done = len(db.scan("done/"))
    return (db.peek("n") or 0) >= done or f"tally {{db.peek('n')}} after {{done}} adds"
'''


def test_a_trace_the_changed_code_no_longer_reproduces_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "tally.py"
    source.write_text(SCENARIO.format(extra="pass"), encoding="utf-8")
    found = invoke("run", str(source), "--seeds", "20", "--out", str(tmp_path / "t"),
                   "--json")
    trace = json.loads(found.stdout)["failures"][0]["trace"]
    shrunk = invoke("shrink", trace, "--scenario", str(source))
    assert shrunk.exit_code == 1, shrunk.output
    source.write_text(SCENARIO.format(extra='await env.store.get("warm-up")'),
                      encoding="utf-8")
    changed = invoke("shrink", trace, "--scenario", str(source), "-o", str(tmp_path / "x"))
    assert changed.exit_code == 3, changed.output
    assert "does not reproduce" in changed.stderr and changed.stderr.count("\n") == 1


# -- dst run -----------------------------------------------------------------------


def test_dst_run_tells_the_shrunk_story_and_keeps_both_traces(tmp_path: Path) -> None:
    # One seed: its group's shortest trace is its own, 7 steps, which shrinks to 4.
    done = invoke("run", "counter", "-c", "cas=false", "--seeds", "1", "--out", str(tmp_path))
    assert done.exit_code == 1, done.output
    assert "  story (5 lines, shrunk from 7 to 4 steps):" in done.stdout
    shrunk = tmp_path / "counter-cas=false-0.min.jsonl"
    assert f"  shrunk: {shrunk} (4 steps, from 7)" in done.stdout
    assert f"  replay: dst replay {shrunk}" in done.stdout
    assert f"  trace:  {tmp_path / 'counter-cas=false-0.jsonl'}" in done.stdout
    assert [p.name for p in tmp_path.glob("*.min.jsonl")] == ["counter-cas=false-0.min.jsonl"]
    assert invoke("replay", str(shrunk)).exit_code == 1


def test_no_shrink_tells_the_story_as_found(tmp_path: Path) -> None:
    done = invoke("run", "counter", "-c", "cas=false", "--seeds", "1", "--out", str(tmp_path),
                  "--no-shrink")
    assert done.exit_code == 1, done.output
    assert "  story (8 lines, 7 steps):" in done.stdout and "shrunk" not in done.stdout
    assert list(tmp_path.glob("*.min.jsonl")) == []


def test_json_shrinks_only_when_asked(tmp_path: Path) -> None:
    plain = invoke("run", "counter", "-c", "cas=false", "--seeds", "5", "--out",
                   str(tmp_path / "a"), "--json")
    assert all(f["shrunk"] is None for f in json.loads(plain.stdout)["failures"])
    assert list((tmp_path / "a").glob("*.min.jsonl")) == []
    asked = invoke("run", "counter", "-c", "cas=false", "--seeds", "1", "--out",
                   str(tmp_path / "b"), "--json", "--shrink")
    first = json.loads(asked.stdout)["failures"][0]
    shrunk = tmp_path / "b" / "counter-cas=false-0.min.jsonl"
    assert first["shrunk"] == {"trace": str(shrunk), "steps": 4, "from_steps": 7,
                               "replay": f"dst replay {shrunk}"}
