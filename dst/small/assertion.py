"""What a run records of a ``@dst.test`` body's failed assertion.

The message a violation records must read the same in ``dst replay`` as under
pytest, which rewrites ``assert`` statements to explain them
(``assert 1 == 2``): so the trace holds the first line of the assertion's own
message, or, for a bare ``assert``, the statement's source, and pytest's
explanation is printed beside the story, not recorded.
"""

from __future__ import annotations

import ast
import linecache
import os
from types import TracebackType


def assertion_message(exc: BaseException) -> str:
    """What a run records of a failed assertion: the same under pytest's rewriting as without.

    The first line of the assertion's own message when it has one, else the
    ``assert`` statement's source, then where it failed (``file:line in
    function``, the user's innermost frame).
    """
    from ..sim.blocked import user_frames

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    node = _assert_at(tb.tb_frame.f_code.co_filename, tb.tb_lineno) if tb else None
    if node is not None and node.msg is None:
        source = "".join(linecache.getlines(tb.tb_frame.f_code.co_filename)) if tb else ""
        test = ast.get_source_segment(source, node.test) or "..."
        text = f"assert {' '.join(test.split())}"
    else:
        text = str(exc).strip().partition("\n")[0] or (
            "AssertionError" if isinstance(exc, AssertionError) else "pytest.fail()")
    frames = user_frames(_without_libraries(exc.__traceback__))
    return f"{text} ({frames[-1]})" if frames else text


#: Packages whose frames a failure is not told at: ``pytest.fail()`` raises in pytest's,
#: and what trio refuses of asyncio is raised in asyncio's.
_NOT_USERS = ("pytest", "_pytest", "asyncio")


def _without_libraries(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the frames of :data:`_NOT_USERS`: the failure is told at the
    user's line."""
    kept = []
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).partition(".")[0] not in _NOT_USERS:
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _assert_at(filename: str, line: int) -> ast.Assert | None:
    """The innermost ``assert`` statement of ``filename`` that spans ``line``, if any."""
    source = "".join(linecache.getlines(filename))
    if not source or not os.path.basename(filename).endswith(".py"):
        return None
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Assert)
             and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return min(found, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if found else None
