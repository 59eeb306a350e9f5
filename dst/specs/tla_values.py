"""Read back the values TLC prints in a counterexample's states.

TLC prints each state of a counterexample as ``/\\ name = value`` lines, the
values in TLA+ notation: strings, numbers, ``TRUE``/``FALSE``, records and
functions ``[t1 |-> "idle", t2 |-> "ready"]``, sequences (and functions on
``1..n``) ``<<FALSE, TRUE>>``, sets ``{1, 2}``, and functions on other domains
``(1 :> "a" @@ 2 :> "b")``.  Telling which turn took a step needs those values
as data (the turn whose entry changed), so this is a small parser for exactly
that notation: records and functions become dicts, sequences tuples, sets
frozensets (a set of records a tuple); a model value or anything else unknown stays its text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TOKEN = re.compile(r'\s*("(?:[^"\\]|\\.)*"|<<|>>|\|->|:>|@@|-?\d+|[A-Za-z_][\w]*|\S)')


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = [m.group(1) for m in _TOKEN.finditer(text)]
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ValueError("value ends early")
        self.pos += 1
        return token

    def expect(self, token: str) -> None:
        got = self.take()
        if got != token:
            raise ValueError(f"expected {token!r}, got {got!r}")

    def value(self) -> Any:
        token = self.take()
        if token.startswith('"'):
            return token[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if token in ("TRUE", "FALSE"):
            return token == "TRUE"
        if token == "<<":
            return tuple(self.items(">>"))
        if token == "{":
            members = self.items("}")
            try:
                return frozenset(members)
            except TypeError:  # records are dicts: a set of them is kept in a stable order
                return tuple(sorted(members, key=repr))
        if token == "[":
            return self.record()
        if token == "(":
            return self.function()
        return token  # a model value or a name

    def items(self, close: str) -> list[Any]:
        out: list[Any] = []
        if self.peek() == close:
            self.take()
            return out
        while True:
            out.append(self.value())
            token = self.take()
            if token == close:
                return out
            if token != ",":
                raise ValueError(f"expected ',' or {close!r}, got {token!r}")

    def record(self) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        if self.peek() == "]":
            self.take()
            return out
        while True:
            key = self.value()
            self.expect("|->")
            out[key] = self.value()
            token = self.take()
            if token == "]":
                return out
            if token != ",":
                raise ValueError(f"expected ',' or ']', got {token!r}")

    def function(self) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        while True:
            key = self.value()
            self.expect(":>")
            out[key] = self.value()
            token = self.take()
            if token == ")":
                return out
            if token != "@@":
                raise ValueError(f"expected '@@' or ')', got {token!r}")


def parse_value(text: str) -> Any:
    """One TLA+ value as TLC prints it; its text if it is not one this parser reads."""
    parser = _Parser(text)
    try:
        value = parser.value()
    except (ValueError, IndexError):
        return text.strip()
    return value if parser.peek() is None else text.strip()


_STATE_HEAD = re.compile(r"^State (\d+): <?([^\s>]+)", re.M)


def parse_states(output: str) -> list[tuple[str, dict[str, Any]]]:
    """The counterexample in TLC's output: (action name, variables) per state.

    The first state's action is ``Init``.  Each state is the ``/\\ var = value``
    lines after its ``State N:`` line, up to the next blank line.
    """
    heads = list(_STATE_HEAD.finditer(output))
    states: list[tuple[str, dict[str, Any]]] = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(output)
        body = output[head.end():end].split("\n\n", 1)[0]
        body = body.split("\n", 1)[1] if "\n" in body else ""
        variables: dict[str, Any] = {}
        for part in re.split(r"^/\\ ", body.strip(), flags=re.M):
            name, sep, value = part.partition(" = ")
            if sep and name.strip():
                variables[name.strip()] = parse_value(" ".join(value.split()))
        action = "Init" if head.group(2) == "Initial" else head.group(2)
        states.append((action, variables))
    return states


def changed_keys(before: Any, after: Any) -> set[Any]:
    """The keys of a function (dict or sequence) whose entries differ between two states."""
    def entries(v: Any) -> Mapping[Any, Any]:
        if isinstance(v, dict):
            return v
        if isinstance(v, tuple):
            return {i + 1: x for i, x in enumerate(v)}
        return {}

    a, b = entries(before), entries(after)
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
