"""Tombstones: the entries taken out of a MEMORY.md, so that none comes back.

A removal (a line deleted by hand, ``oryxmem forget``, a row deleted in SQL) is noted in
``TOMBSTONES`` beside the MEMORY.md, a small file tracked in git with it: one line per
entry, its id, when it went (UTC) and the entry's own time (``-`` for none, so a merge
finds the lines to check without hashing every entry), never its text. The merge driver drops every
entry a tombstone names (a clone that still has it cannot bring it back), and so does
the reconcile (a merge made without the driver, a restored backup). Writing an entry
anew on purpose (an edit back to what it said) lifts its tombstone.

    # oryxmem tombstones v1: ...
    3f2a9c0d1e2b4a5f 2026-12-03T06:50:00Z 2026-12-01 09:30:00

The lines are kept sorted by (when, id), one per id (the earliest when): two clones that
forgot the same entries write the same bytes, and the merge of two such files is their
union, sorted again.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from oryxmem.fileio import atomic_write

FILE_NAME = "TOMBSTONES"
HEADER = (
    "# oryxmem tombstones v1: entries removed from the MEMORY.md beside this file (id, when"
    " removed (UTC), the entry's time),\n# kept so that no merge brings them back. Delete a"
    " line to let that entry return.\n"
)
_LINE_RE = re.compile(
    r"([0-9a-f]{16}(?:-\d+)?) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
    r"(?: (-|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d))?"
)
NO_TIME = "-"


class Stone(NamedTuple):
    when: str  # removed, UTC
    ts: str  # the entry's own time, or NO_TIME


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def parse(text: str) -> dict[str, Stone]:
    """id -> Stone, from a tombstones file's text; lines that are not tombstones are
    skipped (comments, a person's notes)."""
    found: dict[str, Stone] = {}
    for line in text.splitlines():
        match = _LINE_RE.fullmatch(line.strip())
        if match:
            entry_id, when, ts = match.groups()
            _keep_earliest(found, entry_id, Stone(when, ts or NO_TIME))
    return found


def _keep_earliest(stones: dict[str, Stone], entry_id: str, stone: Stone) -> None:
    if entry_id not in stones or stone.when < stones[entry_id].when:
        stones[entry_id] = stone


def render(stones: Mapping[str, Stone]) -> str:
    ordered = sorted(stones.items(), key=lambda item: (item[1].when, item[0]))
    return HEADER + "".join(f"{i} {stone.when} {stone.ts}\n" for i, stone in ordered)


def merge_texts(*texts: str) -> str:
    """The union of tombstone files (each id once, its earliest time), as bytes every
    clone writes the same."""
    merged: dict[str, Stone] = {}
    for text in texts:
        for entry_id, stone in parse(text).items():
            _keep_earliest(merged, entry_id, stone)
    return render(merged)


class Tombstones:
    """One agent's TOMBSTONES file. Read when it changed (a stat); written atomically,
    and only by a caller that holds the agent's file lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._stones: dict[str, Stone] = {}

    def stamp(self) -> tuple[int, int, int] | None:
        """The file's (inode, size, mtime): changed, it may name entries still here."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (info.st_ino, info.st_size, info.st_mtime_ns)

    def read(self) -> dict[str, Stone]:
        key = self.stamp()
        if key is None:
            self._seen, self._stones = None, {}
            return self._stones
        if key != self._seen:
            self._stones = parse(self.path.read_text(encoding="utf-8", errors="replace"))
            self._seen = key
        return self._stones

    def add(self, entries: Iterable[tuple[str, str | None]], when: str | None = None) -> list[str]:
        """Note these (id, entry time) as removed now; gives the ids not noted before."""
        stones = self.read()
        new = {entry_id: ts for entry_id, ts in entries if entry_id not in stones}
        if new:
            stamp = when or now_utc()
            self._write({**stones, **{i: Stone(stamp, ts or NO_TIME) for i, ts in new.items()}})
        return list(new)

    def lift(self, entry_ids: Iterable[str]) -> list[str]:
        """Let these entries be again (written anew on purpose); gives those lifted. Asked
        at every save that finds tombstones: nothing is copied unless one is lifted."""
        stones = self.read()
        lifted = [entry_id for entry_id in entry_ids if entry_id in stones]
        if lifted:
            gone = set(lifted)
            self._write({i: stone for i, stone in stones.items() if i not in gone})
        return lifted

    def _write(self, stones: Mapping[str, Stone]) -> None:
        atomic_write(self.path, render(stones).encode("utf-8"))
        self._seen = None
