"""Start-up of the ``dst`` command: what a user waits for before the first seed, and after it.

```
python benchmarks/bench_startup.py [--src PATH]... [--repeat 5] [--no-bytecode-cache]
    [--instructions] [--json]
```

For each source tree (``--src``, this checkout by default; give an old commit's
``git worktree`` to compare), the commands a user types, each a fresh process,
``--repeat`` times, interleaved across the trees so that a load that comes and goes
falls on all of them alike:

- ``python -c pass``: the interpreter and its site, the floor under every row;
- ``import dst.cli``: ``python -c "import dst.cli"``;
- ``dst --help``: the command list;
- ``dst run counter --seed 0``: one seed, ``PYTHONHASHSEED`` unset, as typed in a
  shell (dst re-executes itself under hash seed 0);
- ``... PYTHONHASHSEED=0``: the same started under hash seed 0, no re-execution;
- ``dst replay <pinned>``: ``traces/counter-lost-update.jsonl`` of that tree,
  ``PYTHONHASHSEED`` unset.

``dst`` is the console script pip writes for the tree's own ``pyproject.toml``
entry point (``[project.scripts]``), run with the tree first on ``PYTHONPATH``,
in a scratch working directory (the run writes its results database there).
Each figure is the median wall time of the process (and the CPU time of it and
the processes it waited for), with the fastest run beside it.  ``-X importtime``
of ``import dst.cli`` is summed over the modules imported after ``site``.

Python is told to write bytecode to a fresh cache directory for each tree
(``PYTHONPYCACHEPREFIX``), warmed by one run of each row first, so dst's own
modules load from bytecode as in an installed package; ``--no-bytecode-cache``
compiles them on every start instead (a checkout run with
``PYTHONDONTWRITEBYTECODE=1``).  ``--instructions`` counts the instructions of
single processes under ``valgrind --tool=cachegrind`` (load does not move them;
a forked worker or a re-executed process would be miscounted, so the ``run``
rows and the re-executing ``replay`` are not counted): ``import dst.cli``, ``dst
--help`` and ``dst replay`` under ``PYTHONHASHSEED=0``, and ``dst run, until it
re-executes``: the process a ``dst run`` typed under a random hash seed spends
before its ``os.execv`` (the entry point called with ``os.execv`` stubbed out).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PINNED = Path("traces") / "counter-lost-update.jsonl"

#: row -> (argv after the program, PYTHONHASHSEED or None for unset, expected exit status);
#: the program is ``python`` for the first two rows and the tree's ``dst`` script after.
ROWS: dict[str, tuple[list[str], str | None, int]] = {
    "python -c pass": (["-c", "pass"], None, 0),
    "import dst.cli": (["-c", "import dst.cli"], None, 0),
    "dst --help": (["--help"], None, 0),
    "dst run counter --seed 0": (["run", "counter", "--seed", "0"], None, 0),
    "  ... PYTHONHASHSEED=0": (["run", "counter", "--seed", "0"], "0", 0),
    "dst replay <pinned>": (["replay", "{pinned}"], None, 1),
}
#: Rows counted by ``--instructions`` (one process each): row -> PYTHONHASHSEED.
COUNTED = {"python -c pass": None, "import dst.cli": None, "dst --help": "0",
           "dst replay <pinned>": "0", "dst run, until it re-executes": None}
#: The tree's entry point (argv[1]) called with the rest of argv, up to its ``os.execv``.
UNTIL_EXEC = ("import importlib, os, sys\n"
              "os.execv = lambda *args: os._exit(0)\n"
              "module, attr = sys.argv[1].split(':')\n"
              "sys.argv = ['dst', *sys.argv[2:]]\n"
              "getattr(importlib.import_module(module), attr)()\n")


@dataclass
class Tree:
    src: Path
    scratch: Path
    script: Path
    env: dict[str, str]
    entry_point: str
    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    import_ms: list[float] = field(default_factory=list)
    instructions: dict[str, int] = field(default_factory=dict)

    def argv(self, row: str) -> list[str]:
        args, _, _ = ROWS[row]
        args = [a.replace("{pinned}", str(self.src / PINNED)) for a in args]
        if row in ("python -c pass", "import dst.cli"):
            return [sys.executable, *args]
        return [str(self.script), *args]

    def environ(self, row: str) -> dict[str, str]:
        env = dict(self.env)
        hash_seed = ROWS[row][1]
        if hash_seed is not None:
            env["PYTHONHASHSEED"] = hash_seed
        return env


def setup(src: Path, scratch: Path, bytecode_cache: bool) -> Tree:
    """The tree's console script, environment and working directory."""
    project = tomllib.loads((src / "pyproject.toml").read_text(encoding="utf-8"))
    entry_point = project["project"]["scripts"]["dst"]
    module, attr = entry_point.split(":")
    (scratch / "bin").mkdir(parents=True)
    script = scratch / "bin" / "dst"
    # What pip writes for a console script.
    script.write_text(
        f"#!{sys.executable}\n# -*- coding: utf-8 -*-\nimport re\nimport sys\n"
        f"from {module} import {attr}\nif __name__ == '__main__':\n"
        f"    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
        f"    sys.exit({attr}())\n", encoding="utf-8")
    script.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONHASHSEED", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
                        "PYTHONPYCACHEPREFIX", "PYTHONPROFILEIMPORTTIME")
           and not k.startswith("DST_")}
    env["PYTHONPATH"] = str(src)
    if bytecode_cache:
        env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    (scratch / "work").mkdir()
    return Tree(src, scratch, script, env, entry_point)


def run_once(tree: Tree, row: str) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``row`` (CPU: the process and what it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(tree.argv(row), cwd=tree.scratch / "work", env=tree.environ(row),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != ROWS[row][2]:
        raise SystemExit(f"error: {row} in {tree.src} exited {done.returncode}, not "
                         f"{ROWS[row][2]}: {done.stderr.decode(errors='replace')[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def import_time(tree: Tree) -> float:
    """Milliseconds ``-X importtime`` gives ``import dst.cli``: modules imported after site."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import dst.cli"],
                          cwd=tree.scratch / "work", env=tree.environ("import dst.cli"),
                          capture_output=True, text=True, check=True)
    total, after_site = 0, False
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split("|")
        if name.startswith(" ") and not name.startswith("  "):  # a top-level import
            if after_site:
                total += int(cumulative)
            after_site = after_site or name.strip() == "site"
    return total / 1000


def count_instructions(tree: Tree, row: str) -> int:
    """Instructions of one run of ``row`` under cachegrind (one process: nothing forks)."""
    out = tree.scratch / f"cg-{list(COUNTED).index(row)}.out"
    env = dict(tree.env)
    if COUNTED[row] is not None:
        env["PYTHONHASHSEED"] = str(COUNTED[row])
    if row == "dst run, until it re-executes":
        program = [sys.executable, "-c", UNTIL_EXEC, tree.entry_point, "run", "counter",
                   "--seed", "0"]
    else:
        program = tree.argv(row)
        if program[0] != sys.executable:
            program = [sys.executable, *program]  # the script, run by the same interpreter
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                           f"--cachegrind-out-file={out}", *program],
                          cwd=tree.scratch / "work", env=env, capture_output=True, check=False)
    if done.returncode != ROWS.get(row, ([], None, 0))[2]:
        raise SystemExit(f"error: {row} under valgrind exited {done.returncode}")
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"error: no summary from cachegrind for {row}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--src", action="append", type=Path, default=None, metavar="PATH",
                        help="a source tree to measure (repeatable; the first is the "
                             "baseline of the ratios); default: this checkout")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each row (median)")
    parser.add_argument("--no-bytecode-cache", action="store_true",
                        help="compile dst's modules at every start (PYTHONDONTWRITEBYTECODE)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions with valgrind (single-process rows)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    sources = [s.resolve() for s in (args.src or [ROOT])]
    for src in sources:
        if not (src / "pyproject.toml").is_file() or not (src / PINNED).is_file():
            parser.error(f"{src} is not a dst source tree (no pyproject.toml or {PINNED})")
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind on the PATH (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        trees = [setup(src, Path(tmp) / str(i), not args.no_bytecode_cache)
                 for i, src in enumerate(sources)]
        for tree in trees:  # warm-up: bytecode written, the results database created
            for row in ROWS:
                run_once(tree, row)
        for _ in range(args.repeat):
            for row in ROWS:
                for tree in trees:
                    wall, cpu = run_once(tree, row)
                    tree.wall.setdefault(row, []).append(wall)
                    tree.cpu.setdefault(row, []).append(cpu)
            for tree in trees:
                tree.import_ms.append(import_time(tree))
        if args.instructions:
            for row in COUNTED:
                for tree in trees:
                    tree.instructions[row] = count_instructions(tree, row)
    rows = {str(t.src): {row: {"wall_ms": statistics.median(t.wall[row]) * 1000,
                               "wall_min_ms": min(t.wall[row]) * 1000,
                               "cpu_ms": statistics.median(t.cpu[row]) * 1000,
                               **({"instructions": float(t.instructions[row])}
                                  if row in t.instructions else {})}
                         for row in ROWS}
            for t in trees}
    if args.json:
        print(json.dumps({"python": sys.version.split()[0], "repeat": args.repeat,
                          "bytecode_cache": not args.no_bytecode_cache,
                          "trees": {str(t.src): {"entry_point": t.entry_point,
                                                 "rows": rows[str(t.src)],
                                                 "instructions": t.instructions,
                                                 "importtime_dst_cli_ms":
                                                     statistics.median(t.import_ms)}
                                    for t in trees}}, indent=2))
        return 0
    print(f"start-up of dst: python {sys.version.split()[0]}, {args.repeat} runs a row "
          f"(median wall ms [fastest] / median CPU ms), "
          f"{'bytecode cached' if not args.no_bytecode_cache else 'no bytecode cache'}")
    base = rows[str(trees[0].src)]
    for tree in trees:
        mine = rows[str(tree.src)]
        print(f"\n{tree.src}  (dst = {tree.entry_point})")
        for row in ROWS:
            cell = mine[row]
            line = (f"  {row:28} {cell['wall_ms']:7.0f} [{cell['wall_min_ms']:5.0f}] / "
                    f"{cell['cpu_ms']:5.0f} ms")
            if tree is not trees[0]:
                line += f"   x{cell['wall_ms'] / base[row]['wall_ms']:.2f} wall"
            if "instructions" in cell:
                line += f"   {cell['instructions'] / 1e6:8.1f} M instructions"
            print(line)
        print(f"  {'-X importtime import dst.cli':28} "
              f"{statistics.median(tree.import_ms):7.1f} ms")
        for row in COUNTED:
            if row not in ROWS and row in tree.instructions:
                print(f"  {row:28} {'':30}   {tree.instructions[row] / 1e6:8.1f} M instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
