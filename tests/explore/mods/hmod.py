"""A user module the scenario imports only inside its setup."""

from typing import ClassVar

COUNT = 0


class Registry:
    items: ClassVar[dict[str, int]] = {"n": 0}
