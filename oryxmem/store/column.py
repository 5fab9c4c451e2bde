"""One section's entries of a parsed MEMORY.md, held as where they are and their ids.

An entry is read from its line (store/lines.py holds the file's bytes) when it is asked
for, so a large file costs its bytes and a few numbers an entry, not the entries as
Python objects. An id is held as the 64-bit number its 16 hex digits spell, with the
number of the copy (``-n``, for the n-th exact repeat) beside it when there is one; a
compact map (intmap.py) finds an entry by its id, which also counts the copies a new
entry must be numbered after.
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from oryxmem.intmap import IntMap
from oryxmem.store.lines import Lines, pick

E = TypeVar("E")
_ID = re.compile(r"([0-9a-f]{16})(?:-([1-9][0-9]*))?")


def split_id(entry_id: str) -> tuple[int, int] | None:
    """(the key as a number, the copy: 0 for the first) of an id as EntryIds makes them;
    None for any other string."""
    match = _ID.fullmatch(entry_id)
    if match is None:
        return None
    return int(match.group(1), 16), int(match.group(2) or 0)


def number_of_key(key: str) -> int | None:
    """An id's key (16 hex digits) as a number; None for anything else."""
    parts = split_id(key)
    return None if parts is None or parts[1] else parts[0]


class EntryColumn(Sequence[E], Generic[E]):
    """The entries of one section, in file order: each the line it is on (``at``) and
    its id; ``read(scope, line, entry_id)`` makes the entry from its line."""

    __slots__ = (
        "_copies",
        "_counts",
        "_first",
        "_keys",
        "_ordinals",
        "_read",
        "at",
        "lines",
        "scope",
    )

    def __init__(self, lines: Lines, scope: str, read: Callable[[str, str, str], E]) -> None:
        self.lines = lines
        self.scope = scope
        self._read = read
        self.at = array("i")  # entry -> index of its line
        self._keys = array("Q")  # entry -> its key
        self._ordinals: dict[int, int] = {}  # entry -> its copy, for repeats (copy >= 1)
        self._first = IntMap(unsigned=True)  # key -> the entry of its first copy
        self._copies: dict[tuple[int, int], int] = {}  # (key, copy >= 1) -> its entry
        self._counts: dict[int, int] = {}  # key -> its copies, for keys of more than one

    # --- growing ----------------------------------------------------------------

    def add(self, index: int, key: int) -> None:
        """The next entry: on line ``index``, its key as a number (its copy is counted)."""
        self._add(index, key, self.count(key))

    def add_id(self, index: int, entry_id: str) -> None:
        """The next entry, on line ``index``, with this id (one EntryIds made for it)."""
        parts = split_id(entry_id)
        if parts is None or parts[1] != self.count(parts[0]):
            raise ValueError(f"{entry_id!r} is not the id of the next copy of its entry")
        self._add(index, *parts)

    def _add(self, index: int, key: int, copy: int) -> None:
        position = len(self._keys)
        if copy:
            self._ordinals[position] = copy
            self._copies[(key, copy)] = position
            self._counts[key] = copy + 1
        else:
            self._first.set(key, position)
        self._keys.append(key)
        self.at.append(index)

    def settle(self) -> None:
        """Sort what was added into the compact map (when enough waits)."""
        self._first.settle()

    # --- ids --------------------------------------------------------------------

    def count(self, key: int) -> int:
        """How many copies of this key the section holds."""
        copies = self._counts.get(key)
        if copies is not None:
            return copies
        return 0 if self._first.get(key) is None else 1

    def entry_id(self, position: int) -> str:
        copy = self._ordinals.get(position)
        key = f"{self._keys[position]:016x}"
        return key if copy is None else f"{key}-{copy}"

    def position(self, entry_id: str) -> int | None:
        """Where the entry with this id is, if the section holds it."""
        parts = split_id(entry_id)
        if parts is None:
            return None
        key, copy = parts
        return self._first.get(key) if copy == 0 else self._copies.get((key, copy))

    def ids(self) -> Iterator[str]:
        return map(self.entry_id, range(len(self)))

    # --- reading ----------------------------------------------------------------

    def _entry(self, position: int) -> E:
        return self._read(self.scope, self.lines[self.at[position]], self.entry_id(position))

    def __len__(self) -> int:
        return len(self.at)

    @overload
    def __getitem__(self, index: int) -> E: ...
    @overload
    def __getitem__(self, index: slice) -> list[E]: ...
    def __getitem__(self, index: int | slice) -> E | list[E]:
        return pick(index, len(self), self._entry)

    def __iter__(self) -> Iterator[E]:
        return map(self._entry, range(len(self)))

    def on_line(self, index: int) -> E | None:
        """The entry on line ``index``, if one is."""
        at = self.at
        position = bisect.bisect_left(at, index)
        return self._entry(position) if position < len(at) and at[position] == index else None

    def where(self, line_says: Callable[[str], bool]) -> Iterator[E]:
        """The entries whose line ``line_says`` yes to, read from their lines."""
        lines, at = self.lines, self.at
        return (self._entry(n) for n in range(len(at)) if line_says(lines[at[n]]))

    def upto(self, count: int) -> Prefix[E]:
        """The first ``count`` entries, as they stay while the section grows."""
        return Prefix(self, count)

    def __eq__(self, other: object) -> bool:
        return _same(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EntryColumn({self.scope}, {len(self)} entries)"


def _same(entries: Sequence[object], other: object) -> bool:
    """Does ``other`` hold the same entries (a column, a prefix of one, a list)?"""
    if not isinstance(other, Sequence) or isinstance(other, str):
        return NotImplemented  # type: ignore[no-any-return]
    return len(entries) == len(other) and all(
        bool(a == b) for a, b in zip(entries, other, strict=True)
    )


class Prefix(Sequence[E], Generic[E]):
    """The first entries of a column: what a reader took while the lock was held, read
    after it was let go (the column only grows at its end: a rewrite makes a new one)."""

    __slots__ = ("_column", "_count")

    def __init__(self, column: EntryColumn[E], count: int) -> None:
        self._column = column
        self._count = count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> E: ...
    @overload
    def __getitem__(self, index: slice) -> list[E]: ...
    def __getitem__(self, index: int | slice) -> E | list[E]:
        return pick(index, self._count, self._column.__getitem__)

    def __iter__(self) -> Iterator[E]:
        return map(self._column.__getitem__, range(self._count))

    def position(self, entry_id: str) -> int | None:
        at = self._column.position(entry_id)
        return at if at is not None and at < self._count else None

    def ids(self) -> Iterator[str]:
        return map(self._column.entry_id, range(self._count))

    def positions(self) -> Mapping[str, int]:
        return Positions(self)

    def __eq__(self, other: object) -> bool:
        return _same(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Prefix({self._count} of {self._column!r})"


class Positions(Mapping[str, int]):
    """Entry id -> where it is, over a prefix of a column."""

    __slots__ = ("_prefix",)

    def __init__(self, prefix: Prefix[Any]) -> None:
        self._prefix = prefix

    def __getitem__(self, entry_id: str) -> int:
        at = self._prefix.position(entry_id)
        if at is None:
            raise KeyError(entry_id)
        return at

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and self._prefix.position(entry_id) is not None

    def __len__(self) -> int:
        return len(self._prefix)

    def __iter__(self) -> Iterator[str]:
        return self._prefix.ids()


class EntryLines(Mapping[str, int]):
    """Entry id -> the index of its line, over the columns of a file."""

    __slots__ = ("_columns",)

    def __init__(self, *columns: EntryColumn[Any]) -> None:
        self._columns = columns

    def __getitem__(self, entry_id: str) -> int:
        for column in self._columns:
            at = column.position(entry_id)
            if at is not None:
                return column.at[at]
        raise KeyError(entry_id)

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and any(
            column.position(entry_id) is not None for column in self._columns
        )

    def __len__(self) -> int:
        return sum(map(len, self._columns))

    def __iter__(self) -> Iterator[str]:
        for column in self._columns:
            yield from column.ids()
