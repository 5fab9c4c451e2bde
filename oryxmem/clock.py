"""Entry timestamps: wall-clock seconds, local or UTC as configured."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
TIMESTAMP_RE = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")

Clock = Callable[[], str]


def clock_for(timezone: str) -> Clock:
    """A function returning the current timestamp in the configured zone."""
    convert = time.gmtime if timezone == "UTC" else time.localtime

    def now() -> str:
        return time.strftime(TIMESTAMP_FORMAT, convert())

    return now
