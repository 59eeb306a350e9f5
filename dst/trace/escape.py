"""Making text from a trace safe to print: on a terminal, and in Markdown.

A trace is input, possibly hostile: every string in it (an actor, an event, a
field, an invariant's message, a config key) was chosen by code under test or by
whoever edited the file.  Printed raw, an ``ESC`` starts a terminal escape
sequence (a hyperlink, a new window title, "erase this line"), ``\\r`` rewrites
the line already shown, and a bidi override reorders what the reader sees; so
a trace could show a verdict it does not hold.  Every renderer therefore passes
what it takes from a trace through :func:`visible` (terminal) or
:func:`markdown_inline` (Markdown), which show such characters as escapes
instead of emitting them.
"""

from __future__ import annotations

import re

#: Characters never emitted as themselves: C0 controls (tab and newline too),
#: DEL, C1 controls, the line and paragraph separators, and the bidi controls
#: (marks, embeddings, overrides, isolates).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\r``, ...).

    Printable text, non-ASCII letters included, is left as it is; so is a
    backslash, which makes ``\\x1b`` in the output ambiguous between the four
    characters and the escape character, but never lets the latter through.
    """
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


#: ASCII punctuation that GitHub Markdown gives a meaning inline: backslash, code span,
#: emphasis, links and images, autolinks and raw HTML, table cells, strikethrough,
#: entities, URL schemes and ``www.`` autolinks, mentions and e-mail autolinks, issue
#: references, math.  CommonMark renders a backslash before any ASCII punctuation as
#: the character itself, so escaping these leaves no inline syntax active.  The rest
#: (``( ) - + = , / ;`` ...) stays readable: it means something only after one of
#: these (``](``, ``&...;``) or at the start of a line, and text from a trace never
#: starts a line (it sits in a table cell or after a fixed prefix, and newlines in it
#: are made visible).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>!|~&:@#$.])")


def markdown_inline(text: str) -> str:
    """``text`` as inert Markdown inline content, safe inside a table cell.

    Control characters are made :func:`visible` first, so no newline can end a
    table row or start a block (a heading, an image on a line of its own).
    """
    return _MD_SPECIAL.sub(r"\\\1", visible(text))
