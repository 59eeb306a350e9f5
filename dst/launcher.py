"""The first moments of the ``dst`` program: the hash seed is pinned, then the command runs.

Iterating a set of strings follows their hashes, so a seed names one trace only
under one hash seed: every simulation of the ``dst`` command runs under
``HASH_SEED`` (``dst replay`` under the hash seed its trace records), whatever
the caller's ``PYTHONHASHSEED``.  Python fixes the hash seed when it starts, so
a dst started under another one re-executes itself (``python -m dst`` with the
same arguments) before it imports anything but this module, which needs only
``os`` and ``sys``: the command line itself (``dst.cli``: click, and the command
asked for) is imported once, in the process that runs it.  A dst started under
the right hash seed (``PYTHONHASHSEED=0 dst run ...``, or a worker) does not
re-execute at all.

``dst`` (the console script) and ``python -m dst`` both start here;
``dst.cli.main`` called as a program does the same before it parses anything.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

#: The hash seed every simulation of the ``dst`` command runs under.
HASH_SEED = 0
#: Set in the environment of a re-executed ``dst`` (to the program name the user
#: typed): it never re-executes a second time, and ``--help`` names the same program.
REEXEC = "DST_REEXECUTED_AS"
#: ``UsageError.exit_code``, without importing ``dst.errors`` before the re-execution.
_EXIT_USAGE = 2
#: Whether this interpreter runs the ``dst`` program (``main``), rather than dst
#: called from Python (a test, a notebook): see ``started``.
_PROGRAM: list[bool] = [False]


def in_program() -> bool:
    """Whether this interpreter runs the ``dst`` program, not dst called from Python."""
    return _PROGRAM[0]


def started() -> None:
    """Start-up is over: the program's modules, classes and scenario are loaded.

    In the ``dst`` program, what exists now lives until exit, so it is moved out
    of the cyclic garbage collector's way (``gc.freeze``): no collection walks it
    again, neither later in this process nor in the workers it forks (whose pages
    of it then stay shared, as CPython's documentation advises before a fork), nor
    the collection at interpreter exit.  A replay or a one-seed run spends a tenth of
    its time there otherwise.  Called from Python, dst leaves the caller's objects
    to the collector.  Seeds are unaffected: collection is off while one runs.
    """
    if _PROGRAM[0]:
        import gc

        gc.freeze()


def current_hash_seed() -> int | None:
    """The hash seed this interpreter runs under when it is fixed, None when it is random.

    Iterating a set of strings follows their hashes, so code under test that does
    it makes a trace that holds only under the same hash seed.  The seed is fixed
    at interpreter start from ``PYTHONHASHSEED``: 0 turns randomisation off, and
    ``-E``/``-I`` ignore the variable altogether.
    """
    if not sys.flags.hash_randomization:
        return 0
    text = os.environ.get("PYTHONHASHSEED", "")
    if sys.flags.ignore_environment or not text.isdigit():
        return None
    return int(text)


def program_name() -> str:
    """What the user typed to start dst: ``dst`` or ``python -m dst``."""
    first = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "dst"
    return "python -m dst" if first == "__main__.py" else first


def _replayed_trace(argv: list[str]) -> str | None:
    """TRACE of ``replay [--scenario REF] [--json] [-h] TRACE``, or None.

    As lenient as click's resilient parsing of the ``replay`` command (options
    anywhere, ``--scenario=REF``, ``--`` before the argument): a bad command line
    is reported by the real parse, after the re-execution.
    """
    words = [a for a in argv if not a.startswith("-")]
    if not words or words[0] != "replay":
        return None
    rest = argv[argv.index("replay") + 1:]
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--":
            return rest[i + 1] if i + 1 < len(rest) else None
        if arg == "--scenario":
            i += 2
        elif arg.startswith("-") and arg != "-":
            i += 1
        else:
            return arg
    return None


def wanted_hash_seed(argv: list[str]) -> int:
    """``HASH_SEED``, but for ``dst replay TRACE`` the hash seed TRACE was recorded under.

    Any doubt (no such file, not a trace, no hash seed recorded) means ``HASH_SEED``.
    """
    path = _replayed_trace(argv)
    if path is None:
        return HASH_SEED
    import json

    try:
        with open(path, "rb") as fh:
            header = json.loads(fh.readline(1 << 20))
        seed = header.get("hash_seed") if isinstance(header, dict) else None
    except Exception:
        return HASH_SEED
    if isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**32:
        return seed
    return HASH_SEED


def _refuse(message: str) -> NoReturn:
    """One line on stderr, exit 2: what ``dst.cli`` says of any ``UsageError``."""
    sys.stderr.write(f"error: {' '.join(message.split())}\n")
    sys.stderr.flush()
    sys.exit(_EXIT_USAGE)


def pin_hash_seed(argv: list[str], wanted: int, typed: str) -> None:
    """Re-execute this command under ``PYTHONHASHSEED=wanted`` unless it already runs so.

    ``os.execv`` keeps the process id, the open standard streams, the working
    directory and so the exit status the caller sees.  A re-executed dst that
    still does not run under ``wanted`` (python told to ignore the environment)
    stops with one line instead of re-executing again.
    """
    if current_hash_seed() == wanted:
        os.environ.pop(REEXEC, None)
        return
    import shlex
    import subprocess

    rerun = " ".join(shlex.quote(a) for a in ["dst", *argv])
    if REEXEC in os.environ:
        _refuse(f"python ignores PYTHONHASHSEED here (started with -E or -I?), so dst "
                f"cannot run under hash seed {wanted}; run without those flags: "
                f"PYTHONHASHSEED={wanted} {rerun}")
    os.environ["PYTHONHASHSEED"] = str(wanted)
    os.environ[REEXEC] = typed
    flags: list[str] = getattr(subprocess, "_args_from_interpreter_flags", list)()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, *flags, "-m", "dst", *argv])
    except OSError as exc:
        _refuse(f"cannot restart dst under PYTHONHASHSEED={wanted} ({exc.strerror}); "
                f"run: PYTHONHASHSEED={wanted} {rerun}")


def main() -> NoReturn:
    """The ``dst`` program: pin the hash seed, then (and only then) load and run the command."""
    argv = sys.argv[1:]
    typed = os.environ.get(REEXEC) or program_name()
    pin_hash_seed(argv, wanted_hash_seed(argv), typed)
    _PROGRAM[0] = True
    from .cli import main as command

    sys.exit(command.main(argv, prog_name=typed))
