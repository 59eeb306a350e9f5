"""Checks of command-line arguments that several commands share.

Each fails in one line that says what is wrong and what to give instead, before
any work starts: an output directory found unusable after a night of seeds
would lose the night.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

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


class Seed(click.ParamType):  # type: ignore[type-arg]  # generic only in click>=8.2
    """``--seed N``: one run's seed, a whole number from 0 (what a trace header records)."""

    name = "N"

    def __init__(self, several: str = "") -> None:
        #: How the command takes more than one seed, for the message (``--seed-range A:B``).
        self.several = several

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        text = str(value).strip()
        if not (text.isascii() and text.isdigit()):
            more = f"; for several seeds give {self.several}" if self.several else ""
            self.fail(f"{value!r} is not a seed: a seed is a whole number, 0 or more "
                      f"(e.g. --seed 3){more}", param, ctx)
        return int(text)
