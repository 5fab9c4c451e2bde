"""A MEMORY.md's physical lines, each with its ending, held compactly.

Most lines of a large file are entries written the way the format writes them; such a
line is held as its entry and made again when it is read (kept as text too, the lines of
a 100,000-entry file would hold its text a second time: 14 MB; 140 MB at a million). Any
other line (a heading, prose, an entry typed another way) is held as it is, so joining
the lines gives back the file byte for byte. Joining them makes every entry's line again
(about 100 ms at 100,000 entries), so the file's hash, which every reconcile asks for,
is kept here: taken from the bytes read or written, carried on over lines appended.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, overload


class Rendered(Protocol):
    """What renders to the body of the line that holds it (an entry)."""

    def render(self) -> str: ...


class Lines(Sequence[str]):
    """The lines of a file whose lines end in ``newline``; an entry's line that is exactly
    its rendering and that ending is held as the entry."""

    __slots__ = ("_held", "_sha256", "newline")

    def __init__(self, lines: list[str], newline: str) -> None:
        """``lines`` is taken, not copied: parse() walks it as its lines are held."""
        self._held: list[str | Rendered] = lines  # type: ignore[assignment]
        self.newline = newline
        self._sha256: Any = None  # hashlib's, once worked out

    def hash_bytes(self, data: bytes) -> None:
        """The file's bytes (these lines joined, in UTF-8), hashed while at hand."""
        self._sha256 = hashlib.sha256(data)

    def sha256(self) -> str:
        """The SHA-256 of the lines joined, in UTF-8 (joined only if not known)."""
        if self._sha256 is None:
            self._sha256 = hashlib.sha256("".join(self).encode("utf-8"))
        return str(self._sha256.hexdigest())

    def hold(self, index: int, entry: Rendered) -> None:
        """Line ``index`` is exactly the entry's rendering and this file's line ending (the
        caller checked): held as the entry."""
        self._held[index] = entry

    def hold_entry(self, index: int, entry: Rendered) -> None:
        """Line ``index`` holds this entry: kept as the entry when it renders to the line."""
        line = self._held[index]
        if isinstance(line, str) and line == entry.render() + self.newline:
            self._held[index] = entry

    def append(self, line: str, entry: Rendered | None = None) -> None:
        """A line at the end (of ``entry``, when it holds one)."""
        self._held.append(line)
        if self._sha256 is not None:
            self._sha256.update(line.encode("utf-8"))
        if entry is not None:
            self.hold_entry(len(self._held) - 1, entry)

    def _line(self, held: str | Rendered) -> str:
        return held if isinstance(held, str) else held.render() + self.newline

    def __len__(self) -> int:
        return len(self._held)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._line(held) for held in self._held[index]]
        return self._line(self._held[index])

    def __setitem__(self, index: int, line: str) -> None:
        """Line ``index`` is now ``line``: the last one grown (its line ending added) carries
        the hash on; any other change lets it be worked out again when asked."""
        old = self[index]
        self._held[index] = line
        if self._sha256 is None:
            return
        if index in (-1, len(self._held) - 1) and line.startswith(old):
            self._sha256.update(line[len(old) :].encode("utf-8"))
        else:
            self._sha256 = None

    def __iter__(self) -> Iterator[str]:
        return map(self._line, self._held)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Lines | list):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Lines({len(self)} lines)"
