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

A lone surrogate (half of a UTF-16 pair: code under test logging ``"\\ud800"``,
a supplier's e-mail in broken UTF-16) is no character at all, and writing one
as UTF-8 raises.  Every view shows it as the escape ``\\ud800``, which is also
how the trace file holds it (``dst.trace.model.canonical``).
"""

from __future__ import annotations

import re

#: Characters never emitted as themselves: C0 controls (tab and newline too),
#: DEL, C1 controls, the line and paragraph separators, the bidi controls
#: (marks, embeddings, overrides, isolates), and lone surrogates.  A surrogate is
#: half of a UTF-16 pair, not a character: no UTF-8 output can hold one (writing
#: it raises), so it is shown as ``\\ud800``, the escape a trace file holds it as.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


#: A surrogate code point, paired or not.
SURROGATE = re.compile("[\ud800-\udfff]")


def paired(text: str) -> str:
    """``text`` with each high surrogate followed by a low one joined into their character.

    Python strings may hold surrogates (``"\\ud83d\\ude00"`` built by code, a
    file name decoded with ``surrogateescape``, broken UTF-16 from outside); a
    JSON reader joins an escaped pair into one character, so the trace joins it
    first, and what a run recorded reads back the same.  Lone surrogates stay.
    """
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def encodable(text: str) -> str:
    """``text`` as UTF-8 can hold it: each lone surrogate as ``\\ud800``, nothing else changed.

    For text that is not made :func:`visible` (a command line to copy, a path),
    but must still be printed or stored: a surrogate there (an argument that was
    not UTF-8, decoded by Python with ``surrogateescape``) would make the write fail.
    """
    if not SURROGATE.search(text):
        return text
    return paired(text).encode("utf-8", "backslashreplace").decode("utf-8")


def visible(text: str) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``, ``\\r``, ...).

    Printable text, non-ASCII letters included, is left as it is; so is a
    backslash, which makes ``\\x1b`` in the output ambiguous between the four
    characters and the escape character, but never lets the latter through.
    A lone surrogate is shown as ``\\ud800``; a pair, as the character it makes.
    """
    if not _UNSAFE.search(text):
        return text
    if SURROGATE.search(text):
        text = paired(text)
    return _UNSAFE.sub(_escape, text)


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
