"""`dst run` tells how to go on when it stops before its seeds are done, with every option that
shaped the run, and refuses a shard that holds no seed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from dst.cli import main


def dst(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_a_finite_range_cut_by_for_says_so_and_how_to_continue(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    told = dst("run", "counter", "--seeds", "10000000", "--for", "1s", "--no-shrink", "--out",
               out)
    assert told.exit_code == 0, told.output
    [line] = [x for x in told.stdout.splitlines() if x.startswith("time up")]
    assert line.startswith("time up (--for 1s): ") and " of 10,000,000 seeds run; " in line
    assert line.endswith(f"continue with: dst run counter --seeds 10000000 --for 1s "
                         f"--no-shrink --out {out} --resume")
    doc = json.loads(dst("run", "counter", "--seeds", "10000000", "--for", "1s", "--json",
                         "--out", out).stdout)
    assert doc["resume"] == f"dst run counter --seeds 10000000 --for 1s --out {out} --resume"


def test_an_open_ended_run_for_a_while_ends_as_asked(tmp_path: Path) -> None:
    doc = json.loads(dst("run", "counter", "--for", "1s", "--json", "--out",
                         str(tmp_path)).stdout)
    assert doc["resume"] is None


def test_the_command_that_continues_a_run_keeps_every_seed_and_no_shrink(
        tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    doc = json.loads(dst("run", "counter", "-c", "cas=false", "--seeds", "50", "-x",
                         "--every-seed", "--no-shrink", "--json", "--out", out).stdout)
    assert doc["stopped_early"]
    assert doc["resume"] == (f"dst run counter -c cas=false --seeds 50 --max-failures 1 "
                             f"--every-seed --no-shrink --out {out} --resume")


def test_a_shard_that_holds_no_seed_is_refused_in_one_line(tmp_path: Path) -> None:
    told = dst("run", "counter", "--seeds", "2", "--shard", "1/3", "--out", str(tmp_path))
    assert told.exit_code == 2
    assert told.stderr.strip() == ("error: --shard 1/3 of the 2 seeds 0..1 holds none: split "
                                   "them into fewer shards, or run more seeds")
    assert dst("run", "counter", "--seeds", "2", "--shard", "2/3", "--out",
               str(tmp_path)).exit_code == 0
