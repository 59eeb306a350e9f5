"""Shared fixtures: every test leaves the global random state and structlog as it found them."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _global_random_untouched() -> Iterator[None]:
    """A simulated run must never draw from (or reseed) the global generator."""
    before = random.getstate()
    yield
    assert random.getstate() == before, "the test changed the global random state"


@pytest.fixture(autouse=True)
def _structlog_restored() -> Iterator[None]:
    before = structlog.get_config()
    yield
    structlog.configure(**before)
