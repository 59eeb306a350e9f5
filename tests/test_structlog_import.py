"""structlog is imported by the code under test, and a run's trace does not depend on when.

dst does not import structlog itself (``dst/sim/logs.py``): a run routes it into the
trace from its start when it is already imported, and from the moment the code under
test imports it otherwise.  structlog imported after dst takes rich (which it only
needs to render an exception) and asyncio (for its async methods) on first use, and
renders and logs exactly as it would have.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

LIMIT = 120

#: A scenario whose process imports structlog in the middle of its main, then logs.
SCENARIO = '''
from typing import Any

from dst import Env, Scenario, Sim

scenario = Scenario("late_structlog", doc="a process that imports structlog as it runs")


@scenario.setup
def setup(sim: Sim, config: dict[str, Any]) -> Any:
    db = sim.store("db")

    async def main(env: Env) -> None:
        await env.store.put("n", 1)
        import structlog

        structlog.contextvars.bind_contextvars(request="r1")
        structlog.get_logger().info("imported", n=await env.store.get("n"))
        structlog.get_logger().bind(worker=1).warning("bound", ms=5)
        structlog.contextvars.clear_contextvars()
        await env.store.put("n", 2)

    sim.process("worker", main, stores=["db"])
    return db
'''

#: Runs the scenario of argv[1] (seed 0) once per entry of argv[2] in one fresh process:
#: each entry says whether structlog is imported before that run.  Prints each trace.
RUNS = '''
import json, sys
import_first = json.loads(sys.argv[2])
if import_first[0]:
    import structlog
from dst.registry import load
from dst.runner.single import run_one
out = []
scen = load(sys.argv[1])
for first in import_first:
    assert ("structlog" in sys.modules) == first, (first, sorted(sys.modules))
    out.append(run_one(scen, scen.config(), 0).trace().text())
    assert "structlog" in sys.modules
print(json.dumps(out))
'''


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DST_", "PYTHON"))}
    env["PYTHONHASHSEED"] = "0"
    return env


def _traces(tmp_path: Path, import_first: list[bool]) -> list[str]:
    scenario = tmp_path / "late_structlog.py"
    scenario.write_text(SCENARIO, encoding="utf-8")
    done = subprocess.run([sys.executable, "-c", RUNS, str(scenario), json.dumps(import_first)],
                          capture_output=True, text=True, timeout=LIMIT, cwd=tmp_path,
                          env=_env())
    assert done.returncode == 0, done.stderr
    traces: list[str] = json.loads(done.stdout)
    return traces


def test_a_run_records_the_same_trace_whether_structlog_was_imported_before_it_or_in_it(
    tmp_path: Path,
) -> None:
    imported_in_the_run, imported_before = _traces(tmp_path, [False, True])
    imported_before_dst, = _traces(tmp_path, [True])
    assert imported_in_the_run == imported_before == imported_before_dst
    events = [json.loads(line) for line in imported_in_the_run.splitlines()
              if '"event"' in line]
    told = [(e["event"], e["fields"]) for e in events]
    assert told == [("imported", {"request": "r1", "n": 1}),
                    ("bound", {"worker": 1, "request": "r1", "ms": 5, "level": "warning"})]


#: Prints what structlog's default renderer makes of a logged exception (argv[1]:
#: import dst's logging module first or not), what its async methods log, and whether
#: rich or asyncio was imported before they were used.
RENDER = '''
import io, json, sys
if sys.argv[1] in ("dst", "library"):
    import dst.sim.logs
if sys.argv[1] == "dst":  # as in the dst program (dst.launcher.main), not dst called from Python
    import dst.launcher
    dst.launcher._PROGRAM[0] = True
import structlog
from structlog.tracebacks import ExceptionDictTransformer
before = sorted(m for m in sys.modules if m.split(".")[0] in ("rich", "pygments", "asyncio"))
def caught():
    table = {"present": 1}
    try:
        table["missing"]
    except KeyError:
        return sys.exc_info()
exc_info = caught()
renderer = structlog.dev.ConsoleRenderer(colors=False)
plain = renderer(None, "error", {"event": "failed", "exc_info": exc_info})
colored = structlog.dev.ConsoleRenderer(colors=True)(None, "error",
                                                     {"event": "failed", "exc_info": exc_info})
frames = ExceptionDictTransformer(show_locals=True)(exc_info)
from structlog.testing import capture_logs
async def log_async():
    await structlog.get_logger().ainfo("async", n=1)
    await structlog.stdlib.get_logger().ainfo("async stdlib", n=2)
with capture_logs() as logged:
    import asyncio
    asyncio.run(log_async())
print(json.dumps({"before": before, "plain": plain, "colored": colored,
                  "dict": json.dumps(frames, default=repr, sort_keys=True),
                  "async": logged,
                  "formatter": type(structlog.dev.default_exception_formatter).__name__}))
'''


def test_structlog_imported_after_dst_takes_rich_and_asyncio_on_first_use_and_logs_the_same(
    tmp_path: Path,
) -> None:
    shown = {}
    for how in ("dst", "plain", "library"):
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(RENDER), how],
                              capture_output=True, text=True, timeout=LIMIT, cwd=tmp_path,
                              env={**_env(), "COLUMNS": "100"})
        assert done.returncode == 0, done.stderr
        shown[how] = json.loads(done.stdout)
    assert shown["dst"]["before"] == []
    assert {m.split(".")[0] for m in shown["plain"]["before"]} == {"rich", "pygments", "asyncio"}
    # dst called from Python (a pytest session) leaves structlog's import as it is.
    assert shown["library"] == shown["plain"]
    assert shown["dst"]["formatter"] == shown["plain"]["formatter"] == "RichTracebackFormatter"
    for part in ("plain", "colored", "dict", "async"):
        assert shown["dst"][part] == shown["plain"][part], part
    assert "KeyError" in shown["dst"]["plain"]
    assert [e["event"] for e in shown["dst"]["async"]] == ["async", "async stdlib"]


#: Imports the structlog found first on sys.path (argv[1] put first) after dst's logging
#: module; prints what its ``dev`` module holds as rich, and whether rich is imported.
FALLBACK = '''
import json, sys
import dst.launcher, dst.sim.logs
dst.launcher._PROGRAM[0] = True  # as in the dst program, where stand-ins are given
sys.path.insert(0, sys.argv[1])
import structlog
print(json.dumps({"file": structlog.__file__, "rich": repr(structlog.dev.rich),
                  "imported": "rich" in sys.modules, "width": structlog.dev.WIDTH}))
'''


def test_a_structlog_that_uses_rich_as_it_imports_gets_the_real_rich(tmp_path: Path) -> None:
    """Stand-ins hold only while structlog uses rich after its import (a later structlog
    might not): one it uses otherwise, or cannot import, is imported again without them."""
    for dev in ("import rich.console\nWIDTH = rich.console.Console.__init__.__name__\n",
                "try:\n    import rich.table\nexcept ImportError:\n    rich = None\n"
                "WIDTH = rich.table.Table.__name__ if rich else None\n"):
        fake = tmp_path / f"fake{len(dev)}" / "structlog"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("from structlog import dev, tracebacks, _native, "
                                          "stdlib\n", encoding="utf-8")
        (fake / "dev.py").write_text(dev, encoding="utf-8")
        (fake / "tracebacks.py").write_text("import rich\n", encoding="utf-8")
        for name in ("_native", "stdlib"):
            (fake / f"{name}.py").write_text("import asyncio\n", encoding="utf-8")
        done = subprocess.run([sys.executable, "-c", FALLBACK, str(fake.parent)],
                              capture_output=True, text=True, timeout=LIMIT, cwd=tmp_path,
                              env=_env())
        assert done.returncode == 0, done.stderr
        shown = json.loads(done.stdout)
        assert shown["file"] == str(fake / "__init__.py")
        assert shown["rich"].startswith("<module 'rich' from ") and shown["imported"]
        assert shown["width"] in ("__init__", "Table")
