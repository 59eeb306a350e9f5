"""Generators seeded from text, as ``random.Random(text)`` is, at a fraction of the cost.

Seeding a Mersenne Twister from a string hashes it (SHA-512) and then mixes
the result into 624 words of state: about 10 us, several times what a whole
decision costs.  A run makes one per process incarnation (``env.rng``) and
many scenarios never draw from it, so :class:`SeededOnFirstUse` postpones
the seeding to the first draw; the numbers it gives are those of
``random.Random(text)``, draw for draw.
"""

from __future__ import annotations

import _random
import random
from hashlib import sha512
from typing import Any

#: The C generator's own ``seed``: an integer in, no hashing, no Python layer.
_seed_state: Any = _random.Random.seed


def seeded(text: str) -> random.Random:
    """``random.Random(text)``, seeded now, without ``Random.seed``'s Python layers.

    The same state as ``random.Random(text)`` (version 2 seeding: the text and
    its SHA-512 digest as one integer), for a generator that is drawn from
    anyway.
    """
    rng = random.Random.__new__(random.Random)
    _seed_from_text(rng, text)
    return rng


def _seed_from_text(rng: random.Random, text: str) -> None:
    """``random.Random.seed(rng, text)`` (version 2), without its Python layer (and
    the guard's trap on it, which only seeding from None needs)."""
    data = text.encode()
    _seed_state(rng, int.from_bytes(data + sha512(data).digest(), "big"))
    rng.gauss_next = None  # type: ignore[attr-defined]


class SeededOnFirstUse(random.Random):
    """``random.Random(text)``, seeded when it is first used.

    Every way in goes through ``random``, ``getrandbits``, ``getstate``,
    ``setstate`` or ``seed`` (the rest of ``random.Random`` is written in
    terms of those); each seeds the generator from its text, turns it into a
    plain ``random.Random`` (so later draws pay nothing extra) and carries on.
    An explicit ``seed`` or ``setstate`` replaces the text, as it would on a
    generator seeded at once.
    """

    def __init__(self, text: str) -> None:  # no call to Random.__init__: that seeds
        self._text = text
        self.gauss_next = None

    def random(self) -> float:
        _become_seeded(self)
        return self.random()

    def getrandbits(self, k: int) -> int:
        _become_seeded(self)
        return self.getrandbits(k)

    def getstate(self) -> tuple[Any, ...]:
        _become_seeded(self)
        return self.getstate()

    def setstate(self, state: tuple[Any, ...]) -> None:
        self.__dict__.pop("_text", None)
        self.__class__ = random.Random  # type: ignore[assignment]
        self.setstate(state)

    def seed(self, a: Any = None, version: int = 2) -> None:
        if a is None:
            # Without an argument ``random.Random.seed`` reads the machine's entropy,
            # which the guard lets through from here (dst's own frame): the new seed
            # is drawn from the generator's own stream instead, like any other draw.
            _become_seeded(self)
            random.Random.seed(self, self.getrandbits(128), version)
            return
        self.__dict__.pop("_text", None)
        self.__class__ = random.Random  # type: ignore[assignment]
        self.seed(a, version)

    def __reduce__(self) -> tuple[Any, ...]:
        _become_seeded(self)
        return self.__reduce__()


#: Generators seeded from their text on first use, in this process so far: a run that
#: leaves this count as it found it drew nothing from its seed but through its
#: strategy (``dst.runner.paths``).
first_draws = 0


def _become_seeded(rng: random.Random) -> None:
    """Seed ``rng`` from its text (if not yet) and make it a plain ``random.Random``.

    A module function, not a method: a method bound before the first draw
    (``_randbelow`` binds ``getrandbits``) may still be called after it.
    """
    global first_draws
    text = rng.__dict__.pop("_text", None)
    rng.__class__ = random.Random
    if text is not None:
        first_draws += 1
        _seed_from_text(rng, text)
