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
    """Keys of 64 bits (signed, or unsigned with ``unsigned=True``) to values >= 0."""

    __slots__ = ("_gone", "_keys", "_recent", "_values")

    def __init__(self, *, unsigned: bool = False) -> None:
        self._keys = array("Q" if unsigned else "q")
        self._values = array("q")
        self._recent: dict[int, int] = {}
        self._gone = 0  # items of the arrays marked gone

    def _find(self, key: int) -> int | None:
        """Where the key is live in the arrays, if it is."""
        keys = self._keys
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key and self._values[at] != _GONE:
            return at
        return None

    def get(self, key: int) -> int | None:
        value = self._recent.get(key)
        if value is not None:
            return value
        at = self._find(key)
        return None if at is None else self._values[at]

    def set(self, key: int, value: int) -> None:
        if value < 0:
            raise ValueError("an IntMap holds values >= 0")
        at = self._find(key)
        if at is not None:
            self._values[at] = value
        else:
            self._recent[key] = value

    def pop(self, key: int) -> int | None:
        """The key's value, taken out; None: not there."""
        value = self._recent.pop(key, None)
        if value is not None:
            return value
        at = self._find(key)
        if at is None:
            return None
        value, self._values[at] = self._values[at], _GONE
        self._gone += 1
        return value

    def settle(self) -> None:
        """Sort what was set into the arrays, once MERGE_AT items wait in the dict."""
        if not self._recent or len(self._recent) < MERGE_AT:
            return
        merged = self._recent
        if self._keys:
            merged = dict(self._settled())
            merged.update(self._recent)
        keys = sorted(merged)
        self._keys = array(self._keys.typecode, keys)
        self._values = array("q", map(merged.__getitem__, keys))
        self._recent, self._gone = {}, 0

    def _settled(self) -> Iterator[tuple[int, int]]:
        pairs = zip(self._keys, self._values, strict=True)
        return ((key, value) for key, value in pairs if value != _GONE)

    @property
    def sorted_count(self) -> int:
        """Items held in the arrays (the rest wait in the dict)."""
        return len(self._keys) - self._gone

    def __len__(self) -> int:
        return self.sorted_count + len(self._recent)

    def items(self) -> dict[int, int]:
        """Every item, as a dict (for a test or a look)."""
        return dict(self._settled()) | self._recent
