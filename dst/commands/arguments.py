"""Checks of command-line arguments that several commands share.

Each fails in one line that says what is wrong and what to give instead, before
any work starts: an output directory found unusable after a night of seeds
would lose the night.
"""

from __future__ import annotations

import os
from pathlib import Path

from dst.errors import UsageError


def out_dir(out: str, option: str = "--out") -> Path:
    """``out`` as a directory dst can write to: made if missing, refused in one line if not."""
    path = Path(out)
    way_out = f"give {option} a directory dst can create and write to"
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {out} is a file, not a directory; {way_out}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if isinstance(exc, (FileExistsError, NotADirectoryError)):
            why = "a part of the path is a file"
        raise UsageError(f"{option} {out} cannot be created ({why}); {way_out}") from None
    probe = path / f".dst-write-test-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{option} {out} is not writable ({exc.strerror or exc}); "
                         f"{way_out}") from None
    return path


def key_values(items: tuple[str, ...] | list[str], example: str = "-c cas=false") -> dict[str, str]:
    """``-c KEY=VALUE`` options as a dict of text, each refused in one line if not KEY=VALUE."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{item!r} is not key=value (e.g. {example})")
        out[key.strip()] = text.strip()
    return out
