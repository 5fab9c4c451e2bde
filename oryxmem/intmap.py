"""A map of 64-bit numbers to numbers that are never negative, held compactly.

A dict of 100,000 ints to ints costs about 11 MB (the table, and an object for each
number above 256); two sorted arrays of 64-bit numbers cost 1.6 MB. What is set goes
to a small dict first and is sorted into the arrays by ``settle`` once there is enough
of it; an item taken out of the arrays is marked gone (its value -1) and dropped at the
next merge.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterator

MERGE_AT = 4096  # items set before settle() sorts them into the arrays
_GONE = -1


class IntMap:
    """Keys of 64 bits (signed, or unsigned with ``unsigned=True``) to values >= 0.

    One thread writes (set, pop, settle: the caller's lock); others may read meanwhile
    (get): the arrays are swapped in as one pair, and what settle sorts into them leaves
    the dict only after."""

    __slots__ = ("_gone", "_recent", "_table")

    def __init__(self, *, unsigned: bool = False) -> None:
        self._table = (array("Q" if unsigned else "q"), array("q"))  # keys, values
        self._recent: dict[int, int] = {}
        self._gone = 0  # items of the arrays marked gone

    @staticmethod
    def _find(key: int, table: tuple[array[int], array[int]]) -> int | None:
        """Where the key is live in these arrays, if it is."""
        keys, values = table
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key and values[at] != _GONE:
            return at
        return None

    def get(self, key: int) -> int | None:
        value = self._recent.get(key)
        if value is not None:
            return value
        table = self._table  # read once: settle may swap it meanwhile
        at = self._find(key, table)
        return None if at is None else table[1][at]

    def set(self, key: int, value: int) -> None:
        if value < 0:
            raise ValueError("an IntMap holds values >= 0")
        at = self._find(key, self._table)
        if at is not None:
            self._table[1][at] = value
        else:
            self._recent[key] = value

    def pop(self, key: int) -> int | None:
        """The key's value, taken out; None: not there."""
        value = self._recent.pop(key, None)
        if value is not None:
            return value
        at = self._find(key, self._table)
        if at is None:
            return None
        values = self._table[1]
        value, values[at] = values[at], _GONE
        self._gone += 1
        return value

    def settle(self) -> None:
        """Sort what was set into the arrays, once MERGE_AT items wait in the dict."""
        if not self._recent or len(self._recent) < MERGE_AT:
            return
        merged = self._recent
        keys = self._table[0]
        if keys:
            merged = dict(self._settled())
            merged.update(self._recent)
        order = sorted(merged)
        self._table = (array(keys.typecode, order), array("q", map(merged.__getitem__, order)))
        self._recent, self._gone = {}, 0

    def _settled(self) -> Iterator[tuple[int, int]]:
        pairs = zip(*self._table, strict=True)
        return ((key, value) for key, value in pairs if value != _GONE)

    @property
    def sorted_count(self) -> int:
        """Items held in the arrays (the rest wait in the dict)."""
        return len(self._table[0]) - self._gone

    def __len__(self) -> int:
        return self.sorted_count + len(self._recent)

    def items(self) -> dict[int, int]:
        """Every item, as a dict (for a test or a look)."""
        return dict(self._settled()) | self._recent
