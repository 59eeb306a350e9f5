"""trio's own TCP between simulated processes: names, ports, bytes, splits, faults, replay."""

from __future__ import annotations

import errno
import json
import socket
from collections import Counter
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from dst.cli import main
from dst.runner.single import RunResult, run_seeds

from . import echo

SCENARIO = str(Path(echo.__file__))


def _runs(seeds: range, **switches: Any) -> list[tuple[RunResult, dict[str, Any]]]:
    config = echo.scenario.checked_config(switches)
    echo.WORLDS.clear()
    results: list[RunResult] = []
    run_seeds(echo.scenario, config, seeds, results.append)
    assert len(echo.WORLDS) == len(results)
    return list(zip(results, echo.WORLDS, strict=True))


def _tcp_faults(result: RunResult) -> list[str]:
    return [r["detail"] for r in result.trace().records
            if r["type"] == "fault" and r["fault"] == "tcp"]


def test_an_echo_comes_back_intact_and_in_order_cut_differently_by_each_seed() -> None:
    runs = _runs(range(120))
    for result, world in runs:
        assert result.verdict == "pass", result.violated
        assert world["ended"] == "done"
        assert world["echoed"] == list(echo.MESSAGES)
    cuts = Counter(tuple(world["chunks"]) for _, world in runs)
    whole = tuple(len(m) for m in echo.MESSAGES)
    assert len(cuts) > 10, "the seed chooses where a recv cuts what is there"
    assert whole in cuts, "a recv often takes all there is"
    assert sum(n for cut, n in cuts.items() if cut != whole) > 20


def test_the_same_seed_cuts_the_same_way_and_records_the_same_trace() -> None:
    first = _runs(range(30))
    again = _runs(range(30))
    for (a, wa), (b, wb) in zip(first, again, strict=True):
        assert wa["chunks"] == wb["chunks"]
        assert a.trace().records == b.trace().records


def test_names_resolve_to_processes_and_fail_as_a_resolver_does() -> None:
    echo.WORLDS.clear()
    (result,) = _lookups()
    world = echo.WORLDS[-1]
    assert result.verdict == "pass", result.violated
    assert world["unknown"] == ("gaierror", socket.EAI_NONAME)
    assert world["closed port"] == ("ConnectionRefusedError", errno.ECONNREFUSED)
    assert world["closed port, high level"] == ["ConnectionRefusedError"]
    for host in ("localhost", "127.0.0.1", "prober"):  # the calling process itself
        assert world[f"self via {host}"] == host.encode()
    assert world["peer of localhost"] == "127.0.0.1"
    assert world["peer of prober"] == "10.0.0.2"
    server, prober = world["addresses"]
    assert server[0][4] == ("10.0.0.1", 1) and prober[0][4] == ("10.0.0.2", 1)


def _lookups() -> list[RunResult]:
    results: list[RunResult] = []
    run_seeds(echo.lookups, echo.lookups.config(), [0], results.append)
    return results


def test_a_crash_of_the_server_breaks_the_clients_connection() -> None:
    runs = _runs(range(150), crashes=1)
    broken: Counter[str] = Counter()
    for result, world in runs:
        assert result.verdict == "pass", result.violated
        faults = " ".join(_tcp_faults(result))
        if world["ended"] in ("EOF", "ConnectionResetError"):
            assert "server crashed" in faults, "only the crash breaks a connection here"
            broken[world["ended"]] += 1
        if "server crashed: reset" in faults and "closed" not in faults:
            assert world["ended"] in ("ConnectionResetError", "done")
        if "server crashed: closed" in faults:
            assert world["ended"] in ("EOF", "ConnectionResetError", "done")
    # A crash with the request read closes (the client reads to the end: EOF); one
    # with bytes unread, or before the accept, resets.
    assert broken["EOF"] > 10 and broken["ConnectionResetError"] > 10


def test_a_partition_cuts_the_connection_across_it() -> None:
    runs = _runs(range(100), partitions=1)
    cut = 0
    for result, world in runs:
        assert result.verdict == "pass", result.violated
        if world["ended"] == "TimeoutError":
            assert any("cut by the partition of server" in f for f in _tcp_faults(result))
            cut += 1
        else:
            assert world["ended"] == "done"
    assert cut > 20


def test_a_reset_breaks_both_ends_and_the_segment_is_lost() -> None:
    runs = _runs(range(100), resets=1)
    reset = 0
    for result, world in runs:
        assert result.verdict == "pass", result.violated
        faults = _tcp_faults(result)
        if world["ended"] == "ConnectionResetError":
            assert any(f.startswith("reset: ") and f.endswith(" lost") for f in faults)
            reset += 1
        else:
            assert world["ended"] == "done" and not faults
    assert reset > 30


def test_a_delayed_segment_arrives_late_and_the_bytes_behind_it_wait() -> None:
    runs = _runs(range(100), delays=1)
    delayed = 0
    for result, world in runs:
        assert result.verdict == "pass", result.violated
        assert world["echoed"] == list(echo.MESSAGES), "in order, intact"
        if any(f.endswith("delayed 5s") for f in _tcp_faults(result)):
            delayed += 1
            assert result.virtual_time >= 5.0
    assert delayed > 30


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_a_split_reply_finds_the_unframed_client_and_its_trace_replays_identically(
        tmp_path: Path) -> None:
    ran = _invoke("run", SCENARIO, "-c", "framed=false", "--seeds", "60", "--out",
                  str(tmp_path), "--json")
    assert ran.exit_code == 1, ran.output
    report = json.loads(ran.output)
    assert report["failures"] and {v for f in report["failures"] for v in f["violated"]} \
        == {"EchoedIntact"}
    traces = sorted(tmp_path.glob("*.jsonl"))
    assert traces
    for trace in traces:
        replayed = _invoke("replay", str(trace), "--scenario", SCENARIO)
        assert replayed.exit_code == 1, replayed.output  # the violation, reproduced
        assert "identical" in replayed.output


def test_runs_with_every_network_fault_replay_identically(tmp_path: Path) -> None:
    ran = _invoke("run", SCENARIO, "-c", "crashes=1", "-c", "partitions=1", "-c", "resets=1",
                  "-c", "delays=1", "--seeds", "80", "--check-determinism", "--out",
                  str(tmp_path))
    assert ran.exit_code == 0, ran.output
    assert "80 of 80 seeds replayed identically" in ran.output
