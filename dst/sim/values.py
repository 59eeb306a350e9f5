"""Values crossing ``Env``: copied as the JSON round trip would copy them, for less.

Everything that crosses ``Env`` is JSON, and is copied on the way, so that a
process never shares memory with a store, a message or a service.  The copy
was ``json.loads(json.dumps(value))``: two passes through the ``json``
package's Python layers and a text in between.  :func:`json_copy` gives the
same value in one pass for the values that make up almost all traffic (dicts
with string keys, lists, tuples, strings, numbers, booleans, None), and hands
anything else to the round trip itself, so that every conversion and every
error is the one ``json`` makes.

``json.dumps`` with any argument other than its defaults also builds a new
encoder on each call; the encoders here are built once.

Stores and links keep canonical JSON text; :func:`fresh_value` decodes each
distinct text once and gives every reader its own copy of the dicts and lists.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
from typing import Any

_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)
_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_ascii = json.encoder.encode_basestring_ascii


def _encoder(markers: dict[int, Any] | None) -> Any:
    return _make_encoder(markers, _CANONICAL.default, _ascii, None, ":", ",", True, False, False)


#: The C encoder without ``markers`` (the containers being encoded, kept to detect
#: a cycle): it then holds no state between calls, so one serves them all.
_unmarked: Any = _encoder(None) if _make_encoder is not None else None


def _canonical_text(value: Any) -> str:
    # ``JSONEncoder.encode`` for this encoder, without its two Python frames (and the
    # closure ``iterencode`` defines on every call): the same C encoder, built with
    # the same arguments.  A cycle makes the unmarked encoder recurse until
    # RecursionError; the value is then encoded again as ``encode`` does (a fresh
    # ``markers`` dict), which raises ``encode``'s error (or, for a value merely
    # nested too deep, the same RecursionError).
    if isinstance(value, str):
        return _ascii(value)
    try:
        return "".join(_unmarked(value, 0))
    except RecursionError:
        pass  # outside the handler, so that the error raised has no context
    return "".join(_encoder({})(value, 0))


def _scanner() -> Any:
    make = getattr(json.scanner, "c_make_scanner", None)
    return make(json.JSONDecoder()) if make is not None else None


_scan: Any = _scanner()


def canonical_value(text: str) -> Any:
    """``json.loads(text)`` for a text :func:`canonical_text` wrote.

    Such a text has no whitespace around it, so ``loads`` comes down to its C
    scanner; this calls it directly (one C call instead of three Python frames
    around it), and hands anything it does not end cleanly on to ``loads``.
    """
    if _scan is not None:
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)


#: Decoded values by their text, for :func:`fresh_value`: the same few records are
#: read again and again (by every scan, every delivery, in every seed).  Only
#: texts shorter than 640 characters, the lowest digit limit Python lets
#: ``sys.set_int_max_str_digits`` set, are kept: no integer in them can be one
#: a change of that limit would make ``loads`` refuse.  Cleared when full.
_MEMO: dict[str, tuple[Any, tuple[Any, ...]]] = {}
_MEMO_TEXT = 640
_MEMO_SIZE = 1024


def _containers(value: Any) -> tuple[Any, ...]:
    """Where a decoded dict or list holds dicts or lists: ``(key, their own)`` pairs."""
    found = []  # a loop, not a generator expression: half the cost
    for key, item in value.items() if type(value) is dict else enumerate(value):
        if type(item) is dict or type(item) is list:
            found.append((key, _containers(item)))
    return tuple(found)


def _thaw(value: Any, inner: tuple[Any, ...]) -> Any:
    """A copy of every dict and list in ``value`` (``inner`` says where they are)."""
    out = value.copy()
    for key, theirs in inner:  # a flat one is copied here: a call less
        out[key] = _thaw(value[key], theirs) if theirs else value[key].copy()
    return out


def fresh_value(text: str) -> Any:
    """:func:`canonical_value`, decoding each distinct (short) text only once.

    The decoded value is kept and never handed out: each call gets its own
    copy of every dict and list in it (the strings and numbers are immutable,
    so they are shared), which costs a fraction of decoding the text again.
    """
    memo = _MEMO.get(text)
    if memo is None:
        value = canonical_value(text)
        if len(text) >= _MEMO_TEXT or (type(value) is not dict and type(value) is not list):
            return value
        try:
            memo = value, _containers(value)
        except RecursionError:
            return value
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        _MEMO[text] = memo
    value, inner = memo
    if not inner:
        return value.copy()
    try:
        return _thaw(value, inner)
    except RecursionError:
        pass  # too deep for this stack: the scanner decides (outside the handler: no context)
    return canonical_value(text)


def _checked() -> Any:
    """The fast encoder when it gives ``encode``'s text for a sample, else ``encode``."""
    sample = {"b": [1, 2.5, None, True, "\u00e9\ud800"], "a": {"z": -3, "y": ""}, "c": "x"}
    try:
        if _make_encoder is not None and _canonical_text(sample) == _CANONICAL.encode(sample):
            return _canonical_text
    except Exception:  # an interpreter whose C encoder takes other arguments
        pass
    return _CANONICAL.encode


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)``.
canonical_text: Any = _checked()

#: Integers this small print in fewer digits than any limit Python allows to be
#: set (``sys.set_int_max_str_digits``, at least 640); larger ones go through
#: the round trip, which applies the limit in force.
_BIG = 1 << 2000


class _NotPlain(Exception):
    """A value the round trip would convert (or refuse): the round trip decides."""


#: Values of these types are copied as they are (so they need no call of ``_copy``).
_ATOMS = frozenset((str, float, bool, type(None)))


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _NotPlain  # json turns 1, 1.5, True and None keys into strings
            out[key] = item if type(item) in _ATOMS else _copy(item)
        return out
    if kind is list or kind is tuple:
        return [item if type(item) in _ATOMS else _copy(item) for item in value]
    if kind in _ATOMS:
        return value
    if kind is int and -_BIG < value < _BIG:
        return value
    raise _NotPlain


def json_copy(value: Any) -> Any:
    """``json.loads(json.dumps(value))``: the same value, the same errors.

    Floats are kept as they are (the round trip gives back an equal float,
    ``NaN`` and the infinities included); a tuple becomes a list; a dict keeps
    its order.  A subclass of any of these, a non-string key or any other
    type goes through the round trip itself, as does a structure too deep
    (or circular) to copy by recursion.
    """
    try:
        return _copy(value)
    except (_NotPlain, RecursionError):
        return json.loads(json.dumps(value))
