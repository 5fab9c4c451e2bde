"""Entry timestamps: wall-clock seconds, local or UTC as configured."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
TIMESTAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")

Clock = Callable[[], str]


def clock_for(timezone: str | Callable[[], str]) -> Clock:
    """A function returning the current timestamp in the zone given ("UTC" or "local"),
    or in the zone a function says at each call (a configuration that may change)."""
    zone = timezone if callable(timezone) else lambda: timezone

    def now() -> str:
        return time.strftime(
            TIMESTAMP_FORMAT, time.gmtime() if zone() == "UTC" else time.localtime()
        )

    return now
