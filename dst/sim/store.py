"""A simulated durable store: survives crashes; every call is a choice point.

Values are kept as canonical JSON text, so what a process wrote can never alias
its volatile memory, and a peek by an invariant sees exactly what is durable.
"""

from __future__ import annotations

from typing import Any

from .values import canonical_text, fresh_value

#: Values of these types are immutable, so they are stored as they are: no
#: aliasing is possible and the JSON round trip (most of a store call's cost in
#: a hot run) is skipped.
_SCALARS = (int, str, float, bool)


def _encode(key: str, value: Any) -> Any:
    if type(value) in _SCALARS:
        if type(value) is float and value != value:
            raise TypeError(f"store value for key {key!r} is NaN, which JSON cannot hold")
        return value
    try:
        return canonical_text(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"store value for key {key!r} is not JSON ({type(value).__name__}): {exc}"
        ) from None


class SimStore:
    """The durable state itself.  Observers (invariants) read it with ``peek``.

    ``version`` counts the writes, so a check that depends only on this store can
    skip its work when nothing was written since it last held: invariants run
    after every step, and most steps write nothing durable.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        #: key -> a scalar, or the canonical JSON text of a list/dict.
        self.data: dict[str, Any] = {}
        self._texts: dict[str, str] = {}
        #: Writes so far (put, delete, successful cas).
        self.version = 0
        self._views: dict[str, Any] = {}

    def peek(self, key: str) -> Any:
        """The stored value, as a fresh copy the caller may change."""
        raw = self.data.get(key)
        if raw is None or key not in self._texts:
            return raw
        return fresh_value(raw)

    def view(self, key: str) -> Any:
        """The stored value without copying it: read-only, for hot checks.

        Decoded once per distinct stored text; mutating what it returns corrupts
        later views (but never the store itself).
        """
        raw = self.data.get(key)
        if raw is None or key not in self._texts:
            return raw
        cached = self._views.get(raw)
        if cached is None:
            cached = self._views[raw] = fresh_value(raw)
        return cached

    def copy_from(self, other: SimStore) -> None:
        """Start from ``other``'s contents (for seeding many runs from one template)."""
        self.data.update(other.data)
        self._texts.update(other._texts)

    def snapshot(self) -> dict[str, Any]:
        return {k: self.peek(k) for k in sorted(self.data)}

    # Operations, applied atomically when the calling task is resumed.

    def get(self, key: str) -> Any:
        raw = self.data.get(key)  # ``peek``, inlined: one frame less on every read
        if raw is None or key not in self._texts:
            return raw
        return fresh_value(raw)

    def put(self, key: str, value: Any) -> None:
        self.version += 1
        if value is None:  # as in dst.runtime's stores: storing None deletes
            self.data.pop(key, None)
            self._texts.pop(key, None)
            return
        encoded = _encode(key, value)
        self.data[key] = encoded
        if type(value) in _SCALARS:
            self._texts.pop(key, None)
        else:
            self._texts[key] = encoded

    def cas(self, key: str, expected: Any, new: Any) -> bool:
        current = self.data.get(key)
        want = None if expected is None else _encode(key, expected)
        if (
            current != want
            or type(current) is not type(want)
            or (key in self._texts) != (type(expected) not in _SCALARS and expected is not None)
        ):
            return False
        self.put(key, new)
        return True

    def delete(self, key: str) -> None:
        self.version += 1
        self.data.pop(key, None)
        self._texts.pop(key, None)

    def scan(self, prefix: str) -> list[tuple[str, Any]]:
        # ``peek`` of each key, inlined (a stored value is never None: putting None deletes).
        data, texts = self.data, self._texts
        return [(k, fresh_value(data[k]) if k in texts else data[k])
                for k in sorted(data) if k.startswith(prefix)]
