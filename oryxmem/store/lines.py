"""A MEMORY.md's physical lines, each with its ending, held as the file's bytes.

A large file is mostly entries, and a parsed entry as Python objects (its text, stamp,
id and tuple) costs about 400 bytes; the line it is on costs its UTF-8 bytes. So the
lines are held as one buffer of the file's bytes (UTF-8; a lone surrogate, which no
file read holds, passes through) and where each line starts, and a line is decoded
when asked for: joining them gives back the file byte for byte. The file's hash, which
every reconcile asks for, is carried over lines appended rather than worked out again.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate
from typing import Any, TypeVar, overload

_ENCODING = ("utf-8", "surrogatepass")
T = TypeVar("T")


def encoded(text: str) -> bytes:
    return text.encode(*_ENCODING)


def pick(index: int | slice, count: int, read: Callable[[int], T]) -> T | list[T]:
    """Sequence indexing over ``count`` items read by position: one (negative counts
    from the end), or a slice of them."""
    if isinstance(index, slice):
        return [read(at) for at in range(*index.indices(count))]
    if not -count <= index < count:
        raise IndexError("index out of range")
    return read(index % count)


def _byte_length(line: str) -> int:
    return len(line) if line.isascii() else len(encoded(line))


class Lines(Sequence[str]):
    """The lines of a file whose lines end in ``newline`` (its first line's ending)."""

    __slots__ = ("_data", "_sha256", "_starts", "newline")

    def __init__(self, lines: Iterable[str], newline: str, data: bytes | None = None) -> None:
        """``data``: the lines joined, in UTF-8, when at hand (the bytes a file was read
        as); made from the lines otherwise."""
        lines = lines if isinstance(lines, list) else list(lines)
        self._starts = array("q", accumulate(map(_byte_length, lines), initial=0))
        # bytes as read (no copy), a bytearray once a line is appended
        self._data: bytes | bytearray = encoded("".join(lines)) if data is None else data
        if len(self._data) != self._starts[-1]:
            raise ValueError("the data are not these lines")
        self.newline = newline
        self._sha256: Any = None  # hashlib's, once worked out

    def sha256(self) -> str:
        """The SHA-256 of the file's bytes."""
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self._data)
        return str(self._sha256.hexdigest())

    def text(self) -> str:
        """The lines joined: the file."""
        return self._data.decode(*_ENCODING)

    def append(self, line: str) -> None:
        """A line at the end."""
        data = encoded(line)
        if isinstance(self._data, bytes):
            self._data = bytearray(self._data)
        self._data += data
        self._starts.append(len(self._data))
        if self._sha256 is not None:
            self._sha256.update(data)

    def __len__(self) -> int:
        return len(self._starts) - 1

    def _line(self, index: int) -> str:
        starts = self._starts
        return self._data[starts[index] : starts[index + 1]].decode(*_ENCODING)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        return pick(index, len(self), self._line)

    def __setitem__(self, index: int, line: str) -> None:
        """Line ``index`` is now ``line``: the last one grown (its line ending added)
        carries the hash on; any other change lets it be worked out again when asked."""
        index %= len(self)
        starts, data = self._starts, encoded(line)
        start, end = starts[index], starts[index + 1]
        old = self._data[start:end]
        last = index == len(self) - 1
        self._data = bytearray(self._data) if isinstance(self._data, bytes) else self._data
        self._data[start:end] = data
        grown = len(data) - len(old)
        for at in range(index + 1, len(starts)):
            starts[at] += grown
        if self._sha256 is not None and last and data.startswith(old):
            self._sha256.update(data[len(old) :])
        else:
            self._sha256 = None

    def __iter__(self) -> Iterator[str]:
        return map(self._line, range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Lines | list):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Lines({len(self)} lines)"
