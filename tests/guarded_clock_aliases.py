"""User-style code that binds datetime's clocks to module-level names at import.

``time.time`` is one object, and ``from time import time`` holds it; these
aliases are bound methods made by the attribute access itself, so the guard has
to recognise them rather than find them by identity.
"""

import datetime
from datetime import date
from datetime import datetime as DateTime

NOW = datetime.datetime.now
UTCNOW = datetime.datetime.utcnow
TODAY = datetime.date.today
#: The same clocks bound through names imported from datetime.
DT_TODAY = DateTime.today
DATE_TODAY = date.today
#: Bound methods of datetime that read no clock stay as they are.
FROM_ISO = datetime.datetime.fromisoformat


def now() -> object:
    return NOW()


def utcnow() -> object:
    return UTCNOW()


def today() -> object:
    return TODAY()


def datetime_today() -> object:
    return DT_TODAY()


def date_today() -> object:
    return DATE_TODAY()


def from_iso() -> object:
    return FROM_ISO("2024-01-02T03:04:05")
