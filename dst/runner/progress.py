"""The live progress display of ``dst run``: seeds done, seeds/s, failure groups, ETA.

Drawn with ``rich`` on stderr, only for a human watching (stdout and stderr
both terminals) and never with ``--json``: CI logs and pipes get the summary
alone.  It is redrawn when a chunk of seeds comes back, from the watching
process, and never from a thread of its own: the workers are forked from that
process, and a fork taken while another thread holds a lock (rich's console
lock, say) can leave the child stuck on it.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported at once by ``dst run``, before it needs the kernel
    from .bulk import BulkSummary


def interactive() -> bool:
    """A progress display only for a human watching: both streams on a terminal."""
    return sys.stdout.isatty() and sys.stderr.isatty()


def clock(seconds: float) -> str:
    """``H:MM:SS`` (``Nd H:MM:SS`` past a day) of a wall-clock span."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86_400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{days}d " if days else "") + f"{h}:{m:02d}:{s:02d}"


def eta(done: int, base: int, total: int | None, elapsed: float,
        deadline_in: float | None) -> float | None:
    """Seconds left: by the rate so far for a known count, by the clock under ``--for``;
    the sooner of the two when both are known, None when neither is."""
    left = []
    rate = (done - base) / elapsed if elapsed > 0 else 0.0
    if total is not None and rate > 0:
        left.append(max(0, total - done) / rate)
    if deadline_in is not None:
        left.append(max(0.0, deadline_in))
    return min(left) if left else None


def status_line(summary: BulkSummary, total: int | None, base: int, elapsed: float,
                deadline_in: float | None) -> str:
    """What the display says, in one line (tested without a terminal)."""
    rate = (summary.runs - base) / elapsed if elapsed > 0 else 0.0
    done = f"{summary.runs:,}/{total:,}" if total is not None else f"{summary.runs:,}"
    groups = sum(1 for g in summary.groups.groups.values() if g.count)
    failing = (f"{groups:,} group{'s' * (groups != 1)} ({summary.failed:,} failed)"
               if summary.failed else "0 failed")
    left = eta(summary.runs, base, total, elapsed, deadline_in)
    return (f"{done} seeds  {rate:,.0f}/s  {failing}  {clock(elapsed)}"
            + (f"  ETA {clock(left)}" if left is not None else ""))


class Progress:
    """The display itself: a bar when the number of seeds is known, a line otherwise."""

    def __init__(self, total: int | None, base: int, deadline: float | None,
                 enabled: bool) -> None:
        self.total, self.base, self.deadline = total, base, deadline
        self.start = time.monotonic()
        self.bar: Any = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as Bar

        columns: list[Any] = [TextColumn("{task.fields[line]}")]
        if total is not None:
            columns.insert(0, BarColumn(bar_width=10))
        self.bar = Bar(*columns, console=Console(file=sys.stderr, force_terminal=True),
                       auto_refresh=False, redirect_stdout=False, redirect_stderr=False)
        self.task = self.bar.add_task("seeds", total=total, line="starting")
        self.bar.start()

    def update(self, summary: BulkSummary, _chunk: Any = None) -> None:
        if self.bar is None:
            return
        now = time.monotonic()
        line = status_line(summary, self.total, self.base, now - self.start,
                           None if self.deadline is None else self.deadline - now)
        self.bar.update(self.task, completed=summary.runs, line=line)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
