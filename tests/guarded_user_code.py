"""User-style code that reads the real world through names imported at module load."""

from datetime import datetime
from time import time


def wall_clock_now() -> float:
    return time()


def today() -> object:
    return datetime.now()
