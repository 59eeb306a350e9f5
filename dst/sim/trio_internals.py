"""The one place dst touches trio's private scheduler state.

trio shuffles each batch of runnable tasks.  It does so deterministically only
when ``trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING`` is true (the batch is
then sorted by task creation order before the shuffle) and its module-level
generator ``_r`` is seeded.  Both are private, so they are wrapped here, the
supported trio versions are pinned in ``pyproject.toml``, and
``tests/test_trio_determinism.py`` fails loudly if a trio release moves them.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import trio

from ..errors import InternalError

#: trio versions whose private scheduler hooks this module was checked against.
SUPPORTED_TRIO = ((0, 30), (0, 36))


def _run_module() -> object:
    module = getattr(getattr(trio, "_core", None), "_run", None)
    if module is None or not isinstance(getattr(module, "_r", None), random.Random):
        raise InternalError(
            f"trio {trio.__version__} has no trio._core._run._r; "
            "dst supports trio >=0.30,<0.36 - install a supported trio"
        )
    return module


@contextlib.contextmanager
def deterministic_trio() -> Iterator[None]:
    """Make trio's batch ordering a function of ``_r`` for the duration."""
    module = _run_module()
    previous = module._ALLOW_DETERMINISTIC_SCHEDULING  # type: ignore[attr-defined]
    module._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module._ALLOW_DETERMINISTIC_SCHEDULING = previous  # type: ignore[attr-defined]


def reseed_trio(seed: int | str) -> None:
    """Seed trio's scheduler generator; call inside the run, before each seed starts."""
    module = _run_module()
    module._r.seed(seed)  # type: ignore[attr-defined]
