"""Bulk runs group failures: a few traces per group, bounded memory, -x, resume, shards."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dst.cli import main
from dst.runner.bulk import BulkSummary, run_bulk, run_chunk
from dst.runner.groups import GroupBook, KeepPolicy, Shrunk, reports, signature
from dst.runner.recorder import Recorder
from dst.runner.results import ResultsDB, run_key

#: Generous: the runs here take a second or two on an idle machine.
LIMIT = 60
#: The counter scenario with its lost-update bug switched on, as workers get it.
CAS_OFF = {"cas": False, "workers": 2, "increments": 7}


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def run_json(*args: str) -> dict[str, Any]:
    result = invoke("run", *args, "--json")
    assert result.exit_code in (0, 1), result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def failed_rows(out: Path) -> list[tuple[int, int]]:
    """``(seed, steps)`` of every failing seed recorded, from the results database."""
    with closing(sqlite3.connect(out / "results.sqlite")) as db:
        return [(int(s), int(n)) for s, n in
                db.execute("SELECT seed, steps FROM failed ORDER BY seed")]


# -- grouping -----------------------------------------------------------------------


def test_a_failure_heavy_run_keeps_one_trace_for_its_one_group(tmp_path: Path) -> None:
    doc = run_json("counter", "-c", "cas=false", "--seeds", "250", "--no-shrink",
                   "--out", str(tmp_path))
    assert doc["runs"] == 250 and doc["failed"] > 240
    [group] = doc["groups"]
    rows = failed_rows(tmp_path)
    assert group["count"] == doc["failed"] == len(rows)
    assert group["violated"] == ["NoLostIncrement"]
    assert group["first_seed"] == rows[0][0]
    fewest = min(steps for _, steps in rows)
    assert group["shortest_steps"] == fewest
    assert group["shortest_seed"] == min(seed for seed, steps in rows if steps == fewest)
    # One trace on disk, the shortest seed's, and it is the one failure listed.
    assert [p.name for p in tmp_path.glob("*.jsonl")] == \
        [f"counter-cas=false-{group['shortest_seed']}.jsonl"]
    assert [f["seed"] for f in doc["failures"]] == [group["shortest_seed"]]


def test_keep_traces_n_keeps_the_n_shortest_of_the_group(tmp_path: Path) -> None:
    doc = run_json("counter", "-c", "cas=false", "--seeds", "250", "--no-shrink",
                   "--keep-traces", "3", "--out", str(tmp_path))
    rows = sorted((steps, seed) for seed, steps in failed_rows(tmp_path))
    shortest = [seed for _, seed in rows[:3]]
    assert sorted(int(p.stem.rsplit("-")[-1]) for p in tmp_path.glob("*.jsonl")) == \
        sorted(shortest)
    assert [f["seed"] for f in doc["failures"]] == sorted(shortest)


def test_keep_traces_0_keeps_none_and_tells_how_to_run_the_seed_again(tmp_path: Path) -> None:
    done = invoke("run", "counter", "-c", "cas=false", "--seeds", "30", "--keep-traces", "0",
                  "--out", str(tmp_path))
    assert done.exit_code == 1, done.output
    assert list(tmp_path.glob("*.jsonl")) == []
    assert "  no trace kept; run it again with: dst run counter -c cas=false --seed " in \
        done.stdout


def test_keep_traces_all_keeps_every_failing_trace(tmp_path: Path) -> None:
    doc = run_json("counter", "-c", "cas=false", "--seeds", "60", "--no-shrink",
                   "--keep-traces", "all", "--out", str(tmp_path))
    assert len(list(tmp_path.glob("*.jsonl"))) == doc["failed"] == len(doc["failures"])


TWO_BUGS = '''
from dst import Env, Scenario, Sim

scenario = Scenario("two", doc="seeds 0 mod 3 break Even, 1 mod 3 break Odd")


async def worker(env: Env) -> None:
    await env.store.put("x", 1)
    await env.store.put("y", 2)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    db = sim.store("db")
    sim.process("worker", worker, stores=["db"])
    return (sim.seed, db)


@scenario.invariant("Even")
def even(state) -> bool | str:
    seed, db = state
    return seed % 3 != 0 or db.peek("y") is None or f"seed {seed} wrote y"


@scenario.invariant("Odd")
def odd(state) -> bool | str:
    seed, db = state
    return seed % 3 != 1 or db.peek("x") is None or f"seed {seed} wrote x"
'''


def test_two_bugs_are_two_groups_each_with_its_own_trace(tmp_path: Path) -> None:
    source = tmp_path / "two.py"
    source.write_text(TWO_BUGS, encoding="utf-8")
    doc = run_json(str(source), "--seeds", "30", "--no-shrink", "--out", str(tmp_path / "o"))
    by = {tuple(g["violated"]): g for g in doc["groups"]}
    assert set(by) == {("Even",), ("Odd",)}
    assert (by[("Even",)]["count"], by[("Even",)]["first_seed"]) == (10, 0)
    assert (by[("Odd",)]["count"], by[("Odd",)]["first_seed"]) == (10, 1)
    assert len(list((tmp_path / "o").glob("*.jsonl"))) == 2


def test_a_signature_ignores_the_numbers_a_seed_chose_but_not_what_broke() -> None:
    def records(actor: str, value: int, invariant: str) -> list[tuple[Any, ...]]:
        return [("decision", 1, 0.0, "schedule", ("a", "b"), 0),
                ("event", 1, 0.0, actor, "incremented", {"to": value}),
                ("violation", 2, 0.0, invariant, f"counter is {value} after {value + 1}")]

    one = signature(records("worker-1", 3, "NoLost"), ["NoLost"])
    assert one == signature(records("worker-2", 17, "NoLost"), ["NoLost"])
    assert one != signature(records("worker-1", 3, "Other"), ["Other"])
    assert one != signature(records("reader-1", 3, "NoLost"), ["NoLost"])


def sig_of(action: str) -> str:
    """A signature (``dst.runner.groups.signature``'s form) whose decisive action is ``action``."""
    return json.dumps([["X"], "broken", action], separators=(",", ":"))


def test_groups_shrunk_to_the_same_story_are_reported_as_one() -> None:
    book = GroupBook(1)
    a, b, c = sig_of("w: read"), sig_of("w: write"), sig_of("w: other")
    for sig, seed, steps in ((a, 0, 9), (b, 1, 5), (c, 2, 7)):
        book.group(sig).count_failure(seed, steps)
    same = '[["X"],["w: read","w: write"]]'
    book.group(a).shrunk = Shrunk(Path("a.min.jsonl"), 4, 9, 0, same)
    book.group(b).shrunk = Shrunk(Path("b.min.jsonl"), 4, 5, 1, same)
    merged = reports(book)
    assert [len(r.members) for r in merged] == [2, 1]
    assert (merged[0].count, merged[0].first_seed, merged[0].shortest) == (2, 0, (5, 1))


#: The complete example of docs/scenarios.md: a payment call whose reply may be lost or late.
REFUND = '''
import trio
from dst import FaultPlan, Scenario, ServiceFaults, ServiceUnavailable

scenario = Scenario(
    "refund", doc="a timeout treated as 'not charged' around a payment",
    faults=FaultPlan(services={"payments": ServiceFaults(lose_reply=1, delay=1,
                                                         delay_seconds=20)}),
)


async def agent(env):
    charged = False
    try:
        with trio.move_on_after(10):
            await env.services.call("payments", "charge", {"id": "o1", "amount": 5})
            charged = True
    except ServiceUnavailable:
        pass
    await env.store.put("order", "paid" if charged else "cancelled")


@scenario.setup
def setup(sim, config):
    charges = {}

    def payments(op, request):
        charges[request["id"]] = request["amount"]
        return {"ok": True}

    sim.service("payments", payments)
    db = sim.store("db")
    sim.process("agent", agent, stores=["db"])
    return db, charges


@scenario.at_end("NoChargeOnCancelledOrder")
def consistent(world):
    db, charges = world
    return not (db.peek("order") == "cancelled" and charges) or "cancelled, yet charged"
'''

LOST = "world: service payments: charge took effect; its reply was lost"
LATE = "world: service payments: charge took effect; its reply is #s late"


def test_a_lost_reply_and_a_late_reply_are_two_groups_each_named_by_its_fault(
        tmp_path: Path) -> None:
    source = tmp_path / "refund.py"
    source.write_text(REFUND, encoding="utf-8")
    doc = run_json(str(source), "--seeds", "60", "--out", str(tmp_path / "o"))
    by = {g["action"]: g for g in doc["groups"]}
    assert set(by) == {LOST, LATE}
    assert sum(g["count"] for g in by.values()) == doc["failed"]
    # Shrinking tells the late reply's seeds by a lost reply (shorter): that story
    # belongs to the other group, so the late one is told by its own trace.
    told = invoke("run", str(source), "--seeds", "60", "--out", str(tmp_path / "o2"))
    assert "in 2 groups" in told.output
    late = told.output[told.output.index("group 2:"):]
    assert "its reply is 20s late" in late and "shrunk:" not in late


def test_a_group_whose_shrunk_story_swapped_its_fault_is_not_merged_into_that_fault() -> None:
    book = GroupBook(1)
    book.group(sig_of(LOST)).count_failure(0, 2)
    book.group(sig_of(LATE)).count_failure(1, 3)
    lost_story = json.dumps([["X"], [LOST]], separators=(",", ":"))
    book.group(sig_of(LOST)).shrunk = Shrunk(Path("0.min.jsonl"), 2, 2, 0, lost_story)
    book.group(sig_of(LATE)).shrunk = Shrunk(Path("1.min.jsonl"), 2, 3, 1, lost_story)
    lost, late = reports(book)
    assert (lost.lead.action, late.lead.action) == (LOST, LATE)
    assert lost.shrunk is not None and late.shrunk is None
    # A fault the shrinker merely dropped (no other of its kind in the story) keeps
    # the shrunk story: it was padding, not the cause.
    book = GroupBook(1)
    book.group(sig_of(LATE)).count_failure(1, 3)
    book.group(sig_of(LATE)).shrunk = Shrunk(Path("1.min.jsonl"), 2, 3, 1,
                                             '[["X"],["agent: gave up"]]')
    [only] = reports(book)
    assert only.shrunk is not None


# -- what the workers render --------------------------------------------------------


def test_workers_render_only_the_traces_the_policy_will_keep() -> None:
    seeds = list(range(120))
    everything = run_chunk("counter", CAS_OFF, seeds)
    failing = [o for o in everything if o.verdict == "fail"]
    assert len(failing) > 100 and all(o.trace_text for o in failing)

    chosen = run_chunk("counter", CAS_OFF, seeds, keep=KeepPolicy(2))
    rendered = [o for o in chosen if o.trace_text is not None]
    shortest = sorted((o.steps, o.seed) for o in failing)[:2]
    assert sorted((o.steps, o.seed) for o in rendered) == shortest
    assert all(o.signature == failing[0].signature for o in chosen if o.verdict == "fail")

    sig = failing[0].signature
    assert sig is not None
    beaten = run_chunk("counter", CAS_OFF, seeds, keep=KeepPolicy(1, {sig: (0, -1)}))
    assert all(o.trace_text is None for o in beaten)


def test_the_watching_process_holds_counts_not_one_entry_per_failure(tmp_path: Path) -> None:
    key = run_key("counter", CAS_OFF, "random")
    recorder = Recorder(tmp_path, "counter", key)
    summary = BulkSummary(keep_traces=False, groups=GroupBook(1))
    run_bulk("counter", CAS_OFF, range(450), workers=2, summary=summary,
             on_chunk=recorder.chunk_done, keep=summary.keep_policy)
    recorder.close()
    assert summary.failed > 440 and summary.failures == [] and recorder.paths == {}
    [group] = summary.groups.groups.values()
    assert group.count == summary.failed and len(group.kept) == 1
    assert len(list(tmp_path.glob("*.jsonl"))) == 1


# -- stopping at the first failures --------------------------------------------------


@pytest.mark.parametrize("workers", ["1", "2"])
def test_max_failures_stops_after_the_nth_failing_seed_whatever_the_workers(
    tmp_path: Path, workers: str,
) -> None:
    source = tmp_path / "two.py"
    source.write_text(TWO_BUGS, encoding="utf-8")
    out = tmp_path / "o"
    result = invoke("run", str(source), "--seeds", "450", "-x", "3", "--workers", workers,
                    "--no-shrink", "--out", str(out), "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    # Failing seeds 0, 1, 3: the run stops after seed 3, and only seeds 0..3 are done.
    assert (doc["failed"], doc["runs"], doc["stopped_early"]) == (3, 4, True)
    with ResultsDB(out) as db:
        assert db.done_ranges(db.runs()[0].run_key) == [(0, 4)]
    resumed = run_json(str(source), "--seeds", "450", "-x", "3", "--resume", "--no-shrink",
                       "--out", str(out))
    assert (resumed["failed"], resumed["runs"], resumed["resumed"]) == (6, 8, 4)


def test_x_alone_stops_at_the_first_failure_and_says_how_to_continue(tmp_path: Path) -> None:
    result = invoke("run", "counter", "-c", "cas=false", "--seeds", "5000", "-x",
                    "--no-shrink", "--out", str(tmp_path))
    assert result.exit_code == 1, result.output
    assert "stopped after 1 failing seed (--max-failures 1)" in result.stdout
    assert "--max-failures 1 --no-shrink --out" in result.stdout and "--resume" in result.stdout
    assert any(line.startswith("counter [cas=false workers=2 increments=7]: 1 run, 1 failed")
               for line in result.stdout.splitlines())
    assert len(list(tmp_path.glob("*.jsonl"))) == 1  # the one failure's trace is kept


# -- resume continues the groups ------------------------------------------------------


def test_resume_continues_the_groups_as_one_run_would_have(tmp_path: Path) -> None:
    args = ("counter", "-c", "cas=false", "--no-shrink", "--keep-traces", "2")
    run_json(*args, "--seeds", "250", "--out", str(tmp_path / "a"))
    resumed = run_json(*args, "--seeds", "450", "--resume", "--out", str(tmp_path / "a"))
    fresh = run_json(*args, "--seeds", "450", "--out", str(tmp_path / "b"))
    assert resumed["resumed"] == 250
    for key in ("failed", "by_invariant"):
        assert resumed[key] == fresh[key]
    strip = ("traces", "signatures")
    assert [{k: v for k, v in g.items() if k not in strip} for g in resumed["groups"]] == \
        [{k: v for k, v in g.items() if k not in strip} for g in fresh["groups"]]
    assert [f["seed"] for f in resumed["failures"]] == [f["seed"] for f in fresh["failures"]]
    assert len(list((tmp_path / "a").glob("*.jsonl"))) == 2  # the displaced trace deleted


# -- shards and workers ---------------------------------------------------------------


def test_shards_of_a_range_are_disjoint_contiguous_and_cover_it(tmp_path: Path) -> None:
    seeds = []
    for k in (1, 2, 3):
        doc = run_json("counter", "--seed-range", "10:311", "--shard", f"{k}/3",
                       "--out", str(tmp_path / str(k)))
        start, stop = doc["seeds"]
        assert doc["runs"] == stop - start and doc["shard"] == [k, 3]
        seeds.append(range(start, stop))
    assert [s.start for s in seeds] == [10, seeds[0].stop, seeds[1].stop]
    assert seeds[-1].stop == 311 and max(map(len, seeds)) - min(map(len, seeds)) <= 1


@pytest.mark.parametrize(("bad", "says"), [
    ("0/3", "not a shard K/N"), ("4/3", "not a shard K/N"), ("1-3", "not a shard K/N"),
])
def test_a_bad_shard_is_one_line(bad: str, says: str) -> None:
    result = invoke("run", "counter", "--shard", bad)
    assert result.exit_code == 2 and says in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_shard_of_an_open_ended_run_is_refused_in_one_line() -> None:
    result = invoke("run", "counter", "--for", "1m", "--shard", "1/2")
    assert result.exit_code == 2 and "--shard needs a finite range of seeds" in result.stderr
    assert result.stderr.count("\n") == 1


def test_workers_default_to_the_cores_this_process_may_use() -> None:
    from dst.commands.run import default_workers

    assert default_workers() == len(os.sched_getaffinity(0))
    assert f"{default_workers()} here" in invoke("run", "--help").stdout


# -- a run killed outright loses and repeats nothing ----------------------------------

NOTED = '''
import os
import time

from dst import Env, Scenario, Sim

scenario = Scenario("noted", doc="notes every seed it runs; every seventh fails")


async def worker(env: Env) -> None:
    for i in range(8):
        await env.store.put("x", i)


@scenario.setup
def setup(sim: Sim, config: dict) -> object:
    while sim.seed >= {held} and not os.path.exists({gate!r}):  # held until the kill
        time.sleep(0.01)
    with open({log!r}, "a") as fh:
        fh.write(f"{{sim.seed}}\\n")
    sim.process("worker", worker, stores=["db"])
    return sim.seed


@scenario.invariant("NotSeventh")
def not_seventh(seed) -> bool | str:
    return seed % 7 != 0 or "a seventh seed"
'''

SEEDS = 1200
HELD = 400  # seeds from here on wait for the kill: the run cannot finish before it


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DST_")}
    env["PYTHONHASHSEED"] = "0"
    return env


def _chunks_done(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(db)) as conn:
            return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    except sqlite3.Error:
        return 0


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _killed_midway(tmp_path: Path, victim: str) -> tuple[list[tuple[int, int]], set[int]]:
    """Start a run, SIGKILL its ``victim`` (parent or a worker) once a chunk is recorded;
    return the seed ranges recorded done and the seeds that ran.

    Seeds from ``HELD`` on wait (in real time, outside the simulation) for a file the test
    creates after the kill, so a busy machine cannot let the run end before it is killed."""
    log, out = tmp_path / "ran.txt", tmp_path / "out"
    gate = tmp_path / "released"
    (tmp_path / "noted.py").write_text(
        NOTED.format(log=str(log), gate=str(gate), held=HELD), encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "dst", "run", "noted.py", "--seeds",
                             str(SEEDS), "--workers", "2", "--no-shrink", "--out", "out"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        began = time.monotonic()
        while _chunks_done(out / "results.sqlite") == 0:
            assert proc.poll() is None and time.monotonic() - began < LIMIT
            time.sleep(0.02)
        workers = _children(proc.pid)
        assert workers, "no worker process found"
        os.kill(proc.pid if victim == "parent" else workers[0], signal.SIGKILL)
        proc.wait(LIMIT)
        while not all(_gone(w) for w in workers):  # workers die with their parent
            assert time.monotonic() - began < LIMIT
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
        gate.touch()  # the resumed run goes through
    with ResultsDB(out) as db:
        done = db.done_ranges(db.runs()[0].run_key)
    assert done and done != [(0, SEEDS)], "the run ended before it could be killed"
    ran = {int(s) for s in log.read_text().split()}
    log.unlink()
    return done, ran


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("victim", ["parent", "worker"])
def test_a_run_killed_outright_resumes_losing_and_repeating_nothing(
    tmp_path: Path, victim: str,
) -> None:
    done, ran_before = _killed_midway(tmp_path, victim)
    recorded = {s for a, b in done for s in range(a, b)}
    assert recorded <= ran_before
    resumed = subprocess.run([sys.executable, "-m", "dst", "run", "noted.py", "--seeds",
                              str(SEEDS), "--no-shrink", "--out", "out", "--resume", "--json"],
                             cwd=tmp_path, env=_env(), capture_output=True, text=True,
                             timeout=LIMIT)
    assert resumed.returncode == 1, resumed.stderr
    doc = json.loads(resumed.stdout)
    ran_after = {int(s) for s in (tmp_path / "ran.txt").read_text().split()}
    assert not ran_after & recorded  # nothing recorded ran again
    assert ran_before | ran_after >= set(range(SEEDS))  # nothing was lost
    failing = len(range(0, SEEDS, 7))
    assert (doc["runs"], doc["resumed"], doc["failed"]) == (SEEDS, len(recorded), failing)
    assert [g["count"] for g in doc["groups"]] == [failing]  # nothing counted twice
    assert len(failed_rows(tmp_path / "out")) == failing
