"""What an editor wrote into a MEMORY.md that a rewrite had replaced meanwhile.

An editor that truncates the file and writes it again in place keeps writing into
the inode it opened. If oryxmem had to replace the file by rename while it was at it
(after waiting as long as it would for the file to be quiet), the rest of the
human's text lands in that orphaned inode, where nobody reads it. The store keeps the
orphan open for a while after such a rewrite; when the orphan changed and is quiet
again, its text is merged back here: the human's file, with what oryxmem's own
writes changed since the rewrite was planned.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass

from oryxmem.fileio import FileStat, is_being_written
from oryxmem.store.format import Entry, MemoryDocument, apply_edits, parse

# How long an orphan nobody writes is kept open, and how quiet one that was written
# must be before its text is taken.
WATCH_SECONDS = 10.0
QUIET_SECONDS = 0.3


@dataclass
class Orphan:
    """An inode a rewrite replaced while someone else had written it last."""

    fd: int
    seen: FileStat  # as it was when replaced (or when last seen changing)
    base_ids: frozenset[str]  # the entries of the file the rewrite was planned on
    until: float  # monotonic: when to stop watching it, if nothing writes it
    changed: bool = False

    def ready(self) -> bool | None:
        """True: it was written since and is quiet now, merge it; None: stop watching
        (nothing wrote it); False: look again later."""
        now = time.monotonic()
        info = os.fstat(self.fd)
        key = FileStat.of(info)
        if key != self.seen:
            self.seen, self.changed, self.until = key, True, now + WATCH_SECONDS
            return False
        if not self.changed:
            return None if now > self.until else False
        if now > self.until:  # written, then held open and untouched for long: take it
            return True
        return not is_being_written(info, QUIET_SECONDS)

    def text(self) -> str:
        """The orphan's bytes as text (undecodable bytes replaced: it is read to be merged,
        and an editor stopped mid-character is no reason to drop the rest)."""
        size = os.fstat(self.fd).st_size
        return os.pread(self.fd, size, 0).decode("utf-8", errors="replace")

    def close(self) -> None:
        os.close(self.fd)


@dataclass
class Merge:
    text: str  # the file to write: the orphan's text with oryxmem's changes
    typed: list[Entry]  # entries the orphan has that the replaced file had not (yet)


def merge(orphan_text: str, base_ids: Collection[str], current: MemoryDocument) -> Merge:
    """The orphan's text with what oryxmem changed since the rewrite was planned: the
    entries the current file has and the planned-on file had not (saves), without the
    ones it had and the current file has not (removals)."""
    theirs = parse(orphan_text)
    known = set(base_ids) | set(theirs.entry_lines)
    now_ids = set(current.entry_lines)
    ours_added = [e for e in current.all_entries() if e.entry_id not in known]
    ours_removed = [i for i in base_ids if i not in now_ids and i in theirs.entry_lines]
    typed = [e for e in theirs.all_entries() if e.entry_id not in base_ids]
    return Merge(apply_edits(theirs, ours_added, ours_removed), typed)
