"""MarkdownMemoryStore: long-term memory kept in one MEMORY.md.

Every operation holds the file's lock. The parsed file is cached and reused
while the file's stat (inode, size, mtime, ctime) is unchanged, so a save to a
large file costs one fsync'd append, not a parse and a rewrite.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from oryxmem.clock import Clock
from oryxmem.errors import MemoryFileConflictedError, MemoryFileUnreadableError
from oryxmem.fileio import (
    AppendHandle,
    ConcurrentChange,
    FileLock,
    append_durably,
    atomic_write,
    remove_stale_temp_files,
    repair_torn_append,
)
from oryxmem.store.base import LongTermMemoryStore, MemorySnapshot, StoreLimits
from oryxmem.store.format import (
    Entry,
    MemoryDocument,
    NewEntry,
    append_at_end,
    apply_edits,
    archival_window,
    new_file_text,
    parse,
    plan_entries,
    record_appended_many,
)

StatKey = tuple[int, int, int, int]
_MAX_RETRIES = 20


def stat_key(info: os.stat_result) -> StatKey:
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


@dataclass
class _Cached:
    key: StatKey | None  # None: the file does not exist
    doc: MemoryDocument
    folded_archival: list[str] = field(default_factory=list)


class MarkdownMemoryStore(LongTermMemoryStore):
    def __init__(self, path: Path, lock: FileLock, *, clock: Clock, limits: StoreLimits) -> None:
        super().__init__(clock=clock, limits=limits)
        self.path = path
        self.lock = lock
        self._appender = AppendHandle(path)
        self._cached: _Cached | None = None
        self.repairs: list[str] = []  # what lock-time repairs found, for status and logs
        # The stat of the file as our own last write left it: a file event whose file
        # still has exactly this stat is the echo of that write, not news.
        self.written_key: StatKey | None = None

    # --- reading -------------------------------------------------------------

    def _read_locked(self) -> _Cached:
        """The current parsed file; the caller holds the lock."""
        intent = self.lock.pending_intent()
        if intent is not None:
            self.repairs.append(repair_torn_append(self.path, intent))
            self.lock.clear_intent()
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            if self._cached is None or self._cached.key is not None:
                self._cached = _Cached(None, parse(""))
            return self._cached
        if self._cached is not None and self._cached.key == stat_key(info):
            return self._cached
        for _ in range(_MAX_RETRIES):
            with open(self.path, "rb") as handle:
                before = stat_key(os.fstat(handle.fileno()))
                raw = handle.read()
                after = stat_key(os.fstat(handle.fileno()))
            if before == after:
                break
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise MemoryFileUnreadableError(
                f"{self.path} is not UTF-8 text (byte {error.start}); fix it in an editor",
                data={"path": str(self.path)},
            ) from None
        self._cached = _Cached(after, parse(text))
        return self._cached

    def document(self) -> MemoryDocument:
        """The parsed file as it is now (conflicted or not). Do not mutate it."""
        with self.lock.hold():
            return self._read_locked().doc

    def _parseable_locked(self) -> _Cached:
        cached = self._read_locked()
        if not cached.doc.parseable:
            lines = ", ".join(map(str, cached.doc.conflict_lines))
            raise MemoryFileConflictedError(
                f"{self.path} has git conflict markers (lines {lines}); resolve them first",
                data={"path": str(self.path), "conflict_lines": cached.doc.conflict_lines},
            )
        return cached

    def load(self) -> MemorySnapshot:
        with self.lock.hold():
            doc = self._parseable_locked().doc
            core = list(doc.core)
            window = archival_window(doc.archival, self.limits.archival_limit_chars)
            return MemorySnapshot(core, window, len(doc.archival))

    def entries(self) -> tuple[list[Entry], list[Entry]]:
        with self.lock.hold():
            doc = self._parseable_locked().doc
            return list(doc.core), list(doc.archival)

    def _recall(self, folded_keyword: str) -> list[Entry]:
        with self.lock.hold():
            cached = self._parseable_locked()
            archival = cached.doc.archival
            folded = cached.folded_archival
            folded.extend(entry.content.casefold() for entry in archival[len(folded) :])
            return [
                entry
                for entry, text in zip(archival, folded, strict=True)
                if folded_keyword in text
            ]

    # --- writing -------------------------------------------------------------

    def _append(self, addition: NewEntry) -> Entry:
        with self.lock.hold():
            for _ in range(_MAX_RETRIES):
                try:
                    return self.append_locked([addition])[0][0]
                except ConcurrentChange:
                    self.forget()
        raise ConcurrentChange(self.path)

    # --- for callers that hold the lock across a longer operation (sync) ------

    def forget(self) -> None:
        """Drop the parsed copy: the next read parses the file again."""
        self._cached = None

    def close(self) -> None:
        self._appender.close()
        self.lock.close()

    def current_locked(self) -> tuple[MemoryDocument, StatKey | None]:
        """The file as it is now, and its stat (None: no file). The caller holds the lock."""
        cached = self._read_locked()
        return cached.doc, cached.key

    def edit_locked(
        self,
        additions: Sequence[NewEntry],
        removals: Collection[str],
        *,
        based_on: StatKey | None,
    ) -> list[Entry]:
        """Write additions and removals to the file the caller read; it holds the lock.

        ``based_on`` is the stat of the file the edits were planned against (None: no
        file); if the file is not that one any more (git, an editor wrote meanwhile),
        raises ConcurrentChange: read again and plan again. Entries that all land at
        the very end of the file are appended in place (journaled, fsynced); anything
        else is one atomic rewrite.
        """
        cached = self._parseable_locked()
        if cached.key != based_on:
            raise ConcurrentChange(self.path)
        return self._write_locked(cached, additions, removals)

    def append_locked(self, additions: Sequence[NewEntry]) -> tuple[list[Entry], StatKey | None]:
        """Add entries to the file as it is now, read once; the caller holds the lock.

        Returns the entries and the stat of the file they were added to (None: there
        was no file). Raises ConcurrentChange when the file changes under the write."""
        cached = self._parseable_locked()
        before = cached.key
        return self._write_locked(cached, additions, ()), before

    def _write_locked(
        self, cached: _Cached, additions: Sequence[NewEntry], removals: Collection[str]
    ) -> list[Entry]:
        added = plan_entries(cached.doc, additions)
        if not (additions or removals):
            return added
        key = cached.key
        tail = append_at_end(cached.doc, additions) if key and not removals else None
        if key is None or tail is None:
            self._rewrite_locked(cached, additions, removals)
            return added
        info = append_durably(self._appender, key[0], tail.encode(), self.lock, key[1])
        record_appended_many(cached.doc, tail, added)
        cached.key = self.written_key = stat_key(info)
        return added

    def _rewrite_locked(
        self, cached: _Cached, additions: Sequence[NewEntry], removals: Collection[str]
    ) -> None:
        if cached.key is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            base = parse(new_file_text())
        else:
            base = cached.doc
        text = apply_edits(base, additions, removals)

        def still_as_read() -> None:
            try:
                now: StatKey | None = stat_key(os.stat(self.path))
            except FileNotFoundError:
                now = None
            if now != cached.key:
                raise ConcurrentChange(self.path)

        info = atomic_write(self.path, text.encode("utf-8"), before_replace=still_as_read)
        self._appender.close()  # it holds the inode just replaced
        self._cached = _Cached(stat_key(info), parse(text))
        self.written_key = stat_key(info)

    def clean_temp_files(self) -> list[Path]:
        with self.lock.hold():
            if not self.path.parent.is_dir():
                return []
            return remove_stale_temp_files(self.path.parent, self.path.name)
