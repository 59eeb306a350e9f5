"""``platform`` asking the machine's processor inside a run gets it; anyone else's
subprocess is still refused.

``platform.uname().processor`` runs ``uname -p`` once per process, when first
asked, and keeps the answer.  The guard lets that one subprocess through whenever
it comes, so a library computing its platform headers in a run (openai's
``get_platform``) gets the same answer as outside, without the guard asking it at
every start.  Each case runs in a fresh interpreter, where nothing asked it yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LIMIT = 120

SCENARIO = '''
import platform
import subprocess
from typing import Any

import structlog

from dst import Env, Scenario, Sim

scenario = Scenario("platform_probe", doc="asks the platform inside a run")
scenario.switch("own", False, doc="run uname -p itself")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")

    async def main(env: Env) -> None:
        await env.store.put("n", 1)
        if config["own"]:
            subprocess.run(["uname", "-p"], check=False, capture_output=True)
        structlog.get_logger().info("asked", processor=platform.uname().processor,
                                    platform=platform.platform())

    sim.process("worker", main, stores=["db"])
    return db
'''

#: Runs seed 0 of the scenario (argv[1]) with own=argv[2]; prints its footer, its
#: events, then what platform says outside the run.
RUN = '''
import json, platform, sys
from dst.registry import load
from dst.runner.single import run_one
scen = load(sys.argv[1])
trace = run_one(scen, scen.config({"own": sys.argv[2]}), 0).trace()
print(json.dumps({"footer": trace.footer,
                  "events": [r["fields"] for r in trace.records if "event" in r],
                  "outside": {"processor": platform.uname().processor,
                              "platform": platform.platform()}}))
'''


def _run(tmp_path: Path, own: str) -> dict[str, object]:
    scenario = tmp_path / "platform_probe.py"
    scenario.write_text(SCENARIO, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DST_")}
    done = subprocess.run([sys.executable, "-c", RUN, str(scenario), own], capture_output=True,
                          text=True, timeout=LIMIT, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_platform_asking_the_processor_in_a_run_gets_what_it_gets_outside(
    tmp_path: Path,
) -> None:
    ran = _run(tmp_path, "false")
    assert ran["footer"] == {"verdict": "pass", "violated": [], "steps": 1,
                             "virtual_time": 0.0, "ended": "quiescent"}
    assert ran["events"] == [ran["outside"]]


def test_the_users_own_uname_subprocess_in_a_run_is_still_refused(tmp_path: Path) -> None:
    ran = _run(tmp_path, "true")
    footer = ran["footer"]
    assert isinstance(footer, dict)
    assert footer["violated"] == ["Nondeterminism"]
    assert ran["events"] == []
