"""The calendar days a query names (pure): "on 13 October, 2023", "Oct 13 2023",
"2023-10-13".

A question about a past conversation often says when it happened ("what did we
decide on 1 February, 2023?"); the rounds said that day are then the likely answer
whatever their words. Only whole dates count (day, month and year): a month alone,
or "yesterday", names no one day a round can be matched to.
"""

from __future__ import annotations

import re
from datetime import date

_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(\d{4})"
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def _day(year: str, month: int, day: str) -> date | None:
    try:
        return date(int(year), month, int(day))
    except ValueError:  # 31 February names no day
        return None


def days_named(query: str) -> set[date]:
    """The whole dates written in a query."""
    found = [
        _day(year, _MONTHS[month.lower()], day)
        for day, month, year in _DAY_MONTH_YEAR.findall(query)
    ]
    found += [
        _day(year, _MONTHS[month.lower()], day)
        for month, day, year in _MONTH_DAY_YEAR.findall(query)
    ]
    found += [_day(year, int(month), day) for year, month, day in _ISO.findall(query)]
    return {day for day in found if day is not None}
