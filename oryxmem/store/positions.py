"""Where each archival entry of a parsed MEMORY.md is (entry id -> position), compactly.

A prompt for a query asks where its relevant entries are on every build, so the map is
kept with the parsed file and grown as entries are appended. As a dict of 100,000 ids
it held 6.7 MB; an id as format.EntryIds makes it for the first copy of an entry is 16
hex digits, kept here as one 64-bit number (intmap.py), and the ids of repeats (``-n``
after them, rare) in a dict.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from oryxmem.intmap import IntMap

if TYPE_CHECKING:
    from oryxmem.store.format import Entry

_HEX_ID = re.compile(r"[0-9a-f]{16}")


def _number(entry_id: str) -> int | None:
    """The id as a number when it is 16 lowercase hex digits (and so made again by
    f"{n:016x}"), else None."""
    return int(entry_id, 16) if _HEX_ID.fullmatch(entry_id) else None


class EntryPositions(Mapping[str, int]):
    """Entry id -> its position among the archival entries, grown at the end."""

    __slots__ = ("_count", "_numbers", "_others")

    def __init__(self) -> None:
        self._numbers = IntMap(unsigned=True)
        self._others: dict[str, int] = {}
        self._count = 0

    def follow(self, archival: Sequence[Entry]) -> None:
        """Take in the entries appended since (this map is of a prefix of these)."""
        for at in range(self._count, len(archival)):
            entry_id = archival[at].entry_id
            number = _number(entry_id)
            if number is None:
                self._others[entry_id] = at
            else:
                self._numbers.set(number, at)
        self._count = max(self._count, len(archival))
        self._numbers.settle()

    def _position(self, entry_id: str) -> int | None:
        number = _number(entry_id)
        return self._others.get(entry_id) if number is None else self._numbers.get(number)

    def __getitem__(self, entry_id: str) -> int:
        position = self._position(entry_id)
        if position is None:
            raise KeyError(entry_id)
        return position

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and self._position(entry_id) is not None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        yield from (f"{number:016x}" for number in self._numbers.items())
        yield from self._others
