"""MarkdownMemoryStore: long-term memory kept in one MEMORY.md.

Every operation holds the file's lock. The parsed file is cached and reused
while the file's stat (inode, size, mtime, ctime) is unchanged, so a save to a
large file costs one fsync'd append, not a parse and a rewrite.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from oryxmem.clock import Clock
from oryxmem.errors import (
    MemoryFileConflictedError,
    MemoryFileUnreadableError,
    OryxError,
    StorageError,
)
from oryxmem.fileio import (
    ConcurrentChange,
    FileLock,
    FileStat,
    atomic_write,
    file_stat,
    is_being_written,
    open_regular,
    remove_stale_temp_files,
    retry_on_change,
    wait_until_quiet,
)
from oryxmem.heap import give_back_freed_memory
from oryxmem.store.answered import AnsweredLog
from oryxmem.store.base import LongTermMemoryStore, MemorySnapshot, StoreLimits, StoreResources
from oryxmem.store.column import Prefix
from oryxmem.store.format import (
    Entry,
    EntryText,
    MemoryDocument,
    append_at_end,
    apply_edits,
    entries_holding,
    new_file_text,
    parse,
    plan_entries,
    record_appended_many,
)
from oryxmem.store.journal import MemoryJournal
from oryxmem.store.orphans import WATCH_SECONDS, Orphan, merge
from oryxmem.store.tombstones import FILE_NAME as TOMBSTONES
from oryxmem.store.tombstones import Tombstones
from oryxmem.store.window import archival_window
from oryxmem.workspace import Workspace

log = logging.getLogger("oryxmem")
# How often a save reads the file again when another writer keeps changing it, and
# how often a read starts over when the file changes while it is being read.
SAVE_ATTEMPTS = 20
# And for how long at least: well past a spell's QUIET_PATIENCE. Within the spell each
# try waits for the other writer, and one that replaces the file more often than a try
# takes (an editor saving again and again from old buffers, on a busy machine) moves
# it under every try; after the spell only a replace between the read and the write does.
SAVE_PATIENCE_SECONDS = 5.0
# A file someone else wrote in place is written (appended to, or replaced) only once
# nothing has written it for QUIET_SECONDS, waiting at most QUIET_PATIENCE: an editor that
# truncates and writes again in pieces would write over an append, or into the inode a
# rename orphans. One they replaced (a new inode) is written once nobody holds it open.
QUIET_SECONDS = 0.3
QUIET_PATIENCE = 1.0  # in all, for one spell of someone else's writing: then write anyway
READ_ATTEMPTS = 20
# A file this large leaves the heap tens of megabytes it no longer needs once parsed (the
# text, its lines split, the parse's pieces): given back to the system at once (at
# 100,000 entries, 38 of the 95 MB a parse added to the daemon).
TRIM_AFTER_BYTES = 1 << 20


class Append(NamedTuple):
    """Entries one write appended to a file, with the file's stat before and after (None
    after: someone else wrote it too, unseen), when the write was done (epoch ns), and
    whether it went onto a file someone else had written (or removed) since oryxmem last
    wrote it: what they dropped was missing when these entries came (rows.protected_entries)."""

    before: FileStat | None
    entries: list[Entry]
    after: FileStat | None
    written_ns: int
    after_others: bool


@dataclass
class _Cached:
    key: FileStat | None  # None: the file does not exist
    doc: MemoryDocument

    @classmethod
    def of(cls, key: FileStat, text: str, data: bytes) -> _Cached:
        """The file as read or written: its text parsed, its bytes (the text in UTF-8)
        held as its lines."""
        return cls(key, parse(text, data))


class MarkdownMemoryStore(LongTermMemoryStore):
    def __init__(self, path: Path, lock: FileLock, *, clock: Clock, limits: StoreLimits) -> None:
        super().__init__(clock=clock, limits=limits)
        self.path = path
        self.lock = lock
        self._cached: _Cached | None = None
        # The stat of the file as our own last write left it: a file event whose file
        # still has exactly this stat is the echo of that write, not news.
        self.written_key: FileStat | None = None
        self._waiting_since: float | None = None  # when a wait for an editor began
        self._orphans: list[Orphan] = []  # inodes replaced while an editor may write on
        # The journal of its appends, and of saves answered and not yet in the rows.
        log_path = lock.lock_path.with_name(lock.lock_path.name + ".answered")
        self.journal = MemoryJournal(path, log_path, MemoryFileUnreadableError)
        self.tombstones = Tombstones(path.with_name(TOMBSTONES))  # what was taken out

    @classmethod
    def for_agent(cls, agent: str, resources: StoreResources) -> MarkdownMemoryStore:
        return resources.files.get(agent)

    # --- reading -------------------------------------------------------------

    def _read_locked(self) -> _Cached:
        """The current parsed file; the caller holds the lock."""
        if self._orphans:
            self._merge_orphans_locked()
        self.repair_locked()
        try:
            info = os.lstat(self.path)  # a link is refused when opened, below
        except FileNotFoundError:
            if self._cached is None or self._cached.key is not None:
                self._cached = _Cached(None, parse(""))
            return self._cached
        if self._cached is not None and self._cached.key == FileStat.of(info):
            return self._cached
        for _ in range(READ_ATTEMPTS):
            with os.fdopen(self._open_to_read(), "rb") as handle:
                before = FileStat.of(os.fstat(handle.fileno()))
                raw = handle.read()
                after = FileStat.of(os.fstat(handle.fileno()))
            if before == after:
                break
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise MemoryFileUnreadableError(
                f"{self.path} is not UTF-8 text (byte {error.start}); fix it in an editor",
                data={"path": str(self.path)},
            ) from None
        self._cached = _Cached.of(after, text, raw)
        if len(raw) >= TRIM_AFTER_BYTES:
            del raw, text
            give_back_freed_memory()  # the parse's pieces: tens of megabytes, once
        return self._cached

    def repair_locked(self) -> None:
        """Replay what the journal's open records say a crash left undone; the caller
        holds the lock."""
        self.journal.repair_locked()

    @property
    def answered(self) -> AnsweredLog:
        """The log of saves answered and not yet in the rows (and of their appends)."""
        return self.journal.log

    @property
    def repairs(self) -> list[str]:
        return self.journal.repairs

    def _open_to_read(self) -> int:
        """MEMORY.md, only as the regular file it should be (never through a link, never
        blocking on a FIFO): anything else is a clear error for this agent (2002)."""
        return open_regular(self.path, os.O_RDONLY, refuse=MemoryFileUnreadableError)

    def take_repairs(self) -> list[str]:
        """What lock-time repairs did since last asked, each as 'path:line: what'."""
        return self.journal.take_untold()

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

    def entries(self) -> tuple[Sequence[Entry], Sequence[Entry]]:
        """The file's entries as they are now, each read from its line when asked for
        (appends after this call do not show; a rewrite leaves them as they were)."""
        with self.lock.hold():
            doc = self._parseable_locked().doc
            return doc.core.upto(len(doc.core)), doc.archival.upto(len(doc.archival))

    def archival_positions(self, archival: Sequence[Entry]) -> Mapping[str, int]:
        """Those of the parsed file, when ``archival`` is what entries() gave: its ids
        are found through its column's map (a prompt for a query asks on every build)."""
        if isinstance(archival, Prefix):
            return archival.positions()
        return super().archival_positions(archival)

    def _recall(self, folded_keyword: str) -> list[Entry]:
        with self.lock.hold():
            return entries_holding(self._parseable_locked().doc.archival, folded_keyword)

    # --- writing -------------------------------------------------------------

    def _append(self, addition: EntryText) -> Entry:
        return self.append_many([addition]).entries[0]

    def append_many(self, additions: Sequence[EntryText], *, settle: bool = True) -> Append:
        """Add entries at the end of their sections in one durable write, with the stat of
        the file they were added to (None: there was none) and the stat this write left.
        Another writer changing the file meanwhile makes it read the file again and retry.

        Without ``settle`` an append in place is durable by its journal record alone (one
        sync, not two): MEMORY.md is synced by ``rows_have_answered`` or ``settle``."""
        with self.lock.hold():
            entries, before, after_others = retry_on_change(
                SAVE_ATTEMPTS,
                lambda: self.append_locked(additions, sync=settle),
                self.forget,
                patience=SAVE_PATIENCE_SECONDS,
            )
            written_ns = time.time_ns()  # under the lock: writes to the file are in its order
            self.tombstones.lift(entry.entry_id for entry in entries)  # saved again on purpose
        return Append(before, entries, self.written_key, written_ns, after_others)

    # --- for callers that hold the lock across a longer operation (sync) ------

    def left_by_others(self) -> bool:
        """Is the file as someone else (an editor, git) left it, not as oryxmem did?"""
        stat = file_stat(self.path)
        if stat is None or stat == self.written_key:
            return False
        with self.lock.hold():
            return self._left_by_others(stat)

    def others_are_writing(self) -> bool:
        """Is someone else at work on the file (see quiet_wanted)? A write now would wait."""
        if not self.left_by_others():
            return False
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return False
        return is_being_written(info, quiet_wanted(FileStat.of(info), self.lock.last_written()))

    def _left_by_others(self, key: FileStat | None) -> bool:
        """Is this file as someone else left it (an editor, git)? Not as this process's
        last write left it, nor as another oryxmem process did (it notes what it left,
        and is done when it lets go of the lock); the caller holds the lock."""
        return key is not None and key != self.written_key and key != self.lock.last_written()

    def rows_have_answered(self, keep: Collection[str] = ()) -> None:
        """The saves this process answered are in the rows now: MEMORY.md is synced, and
        their records leave the log, but for those of the entries in ``keep`` (answered
        since, their rows not in yet)."""
        with self.lock.hold():
            self.journal.rows_have_answered_locked(keep)

    def settle(self) -> None:
        """Sync what saves appended to MEMORY.md, and mark their records done."""
        if self.journal.unsettled:
            with self.lock.hold():
                self.journal.settle_locked()

    def forget(self) -> None:
        """Drop the parsed copy: the next read parses the file again."""
        self._cached = None

    def close(self) -> None:
        try:
            self.settle()
        except StorageError as error:  # its records stay open: replayed at the next lock
            log.warning("%s; its journal has what it lacks", error)
        self.journal.close()
        for orphan in self._orphans:
            orphan.close()
        self._orphans = []
        self.lock.close()

    def current_locked(self) -> tuple[MemoryDocument, FileStat | None]:
        """The file as it is now, and its stat (None: no file). The caller holds the lock."""
        cached = self._read_locked()
        return cached.doc, cached.key

    def edit_locked(
        self,
        additions: Sequence[EntryText],
        removals: Collection[str],
        *,
        based_on: FileStat | None,
        replacements: Mapping[str, EntryText] | None = None,
    ) -> list[Entry]:
        """Write additions and removals to the file the caller read; it holds the lock.

        ``based_on`` is the stat of the file the edits were planned against (None: no
        file); if the file is not that one any more (git, an editor wrote meanwhile),
        raises ConcurrentChange: read again and plan again. Entries that all land at
        the very end of the file are appended in place (journaled, fsynced); anything
        else (``replacements``: entries written anew in their place) is one atomic rewrite.
        """
        cached = self._parseable_locked()
        if cached.key != based_on:
            raise ConcurrentChange(self.path)
        return self._write_locked(cached, additions, removals, replacements=replacements)

    def append_locked(
        self, additions: Sequence[EntryText], *, sync: bool = True
    ) -> tuple[list[Entry], FileStat | None, bool]:
        """Add entries to the file as it is now, read once; the caller holds the lock.

        Returns the entries, the stat of the file they were added to (None: there was no
        file), and whether someone else had written or removed it since oryxmem last did.
        Raises ConcurrentChange when the file changes under the write. Without ``sync``,
        an append in place is durable by its journal record (see append_many)."""
        cached = self._parseable_locked()
        before = cached.key
        after_others = self._left_by_others(before) or (
            before is None and self.lock.last_written() is not None
        )
        added = self._write_locked(cached, additions, (), answers=True, sync=sync)
        return added, before, after_others

    def _write_locked(
        self,
        cached: _Cached,
        additions: Sequence[EntryText],
        removals: Collection[str],
        *,
        answers: bool = False,
        sync: bool = True,
        replacements: Mapping[str, EntryText] | None = None,
    ) -> list[Entry]:
        """Write the edits; ``answers``: they are saves about to be answered, noted in the
        journal until the rows have them (a crash, a stale buffer); without ``sync`` an
        append of them is durable by that record alone until settle_locked."""
        added = plan_entries(cached.doc, additions)
        if not (additions or removals or replacements):
            return added
        key = cached.key
        if key is not None and self._left_by_others(key):  # an editor, git: once it is done
            quiet = quiet_wanted(key, self.lock.last_written())
            self._waiting_since, moved = wait_for_writer(self.path, key, self._waiting_since, quiet)
            if moved:
                raise ConcurrentChange(self.path)  # read and plan again
        in_place = key and not (removals or replacements)
        tail = append_at_end(cached.doc, additions) if in_place else None
        if key is None or tail is None:
            self._rewrite_locked(cached, additions, removals, replacements)
            if answers:
                self.journal.note_rewritten(added)
            return added
        data = tail.encode()
        answered = added if answers else ()
        info = self.journal.append_locked(key.inode, key.size, data, answered, sync=sync)
        self._waiting_since = None
        if info.st_size != key.size + len(data):
            # Someone appended without the lock (`>>`) between our look and our write: both
            # are in the file, which is no longer our copy plus our lines. Read it again,
            # and let its change be news (reconcile takes their line in).
            self._cached = None
            self.written_key = None
            return added
        record_appended_many(cached.doc, tail, added)
        cached.key = self.written_key = FileStat.of(info)
        self.lock.note_written(self.written_key)
        return added

    def _rewrite_locked(
        self,
        cached: _Cached,
        additions: Sequence[EntryText],
        removals: Collection[str],
        replacements: Mapping[str, EntryText] | None,
    ) -> None:
        if cached.key is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        base = parse(new_file_text()) if cached.key is None else cached.doc
        self._replace_locked(cached, apply_edits(base, additions, removals, replacements), base)

    def _replace_locked(self, cached: _Cached, text: str, base: MemoryDocument) -> None:
        """Replace the file as read (``cached``) by text planned on ``base``."""
        self.journal.settle_locked()  # appends of saves not synced yet are durable first

        def still_as_read() -> None:
            if file_stat(self.path) != cached.key:
                raise ConcurrentChange(self.path)

        # Someone else wrote it last: keep the inode this replaces, to take in what an
        # editor still writing in place writes into it (store/orphans.py).
        kept = self._keep_open(cached.key) if self._left_by_others(cached.key) else None
        try:
            data = text.encode("utf-8")
            info = atomic_write(self.path, data, before_replace=still_as_read)
        except BaseException:
            if kept is not None:
                os.close(kept)
            raise
        if kept is not None:
            self._orphans.append(
                Orphan(
                    kept,
                    FileStat.of(os.fstat(kept)),
                    frozenset(base.entry_lines),
                    time.monotonic() + WATCH_SECONDS,
                )
            )
        self.journal.appender.close()  # it holds the inode just replaced
        self._cached = _Cached.of(FileStat.of(info), text, data)
        self.written_key = FileStat.of(info)
        self.lock.note_written(self.written_key)
        self._waiting_since = None

    def _keep_open(self, key: FileStat | None) -> int | None:
        """An fd on the file as read (``key``), or None when it is not that file now."""
        try:
            fd = self._open_to_read()
        except (OSError, OryxError):
            return None
        if key is None or os.fstat(fd).st_ino != key.inode:
            os.close(fd)
            return None
        return fd

    def merge_orphans(self) -> bool:
        """Take in what editors wrote into inodes this store's rewrites replaced, once each
        is quiet; True when the file was written."""
        if not self._orphans:
            return False
        with self.lock.hold():
            return self._merge_orphans_locked()

    def _merge_orphans_locked(self) -> bool:
        orphans, self._orphans = self._orphans, []
        merged = False
        pending = []
        for orphan in orphans:
            ready = orphan.ready()
            if ready is False:
                pending.append(orphan)
                continue
            try:
                if ready:
                    merged = self._merge_locked(orphan) or merged
            finally:
                orphan.close()
        self._orphans = pending + self._orphans  # a merge may have left one of its own
        return merged

    def _merge_locked(self, orphan: Orphan) -> bool:
        cached = self._read_locked()
        if not cached.doc.parseable:
            self.journal.untold.append(
                f"{self.path}: conflicted; an editor's text left in a file it "
                "replaced was not merged"
            )
            return False
        result = merge(orphan.text(), orphan.base_ids, cached.doc)
        if cached.key is not None and cached.key == self.written_key:
            # As our last write left it: the human's text, with our changes since.
            if result.text == cached.doc.text:
                return False
            self._replace_locked(cached, result.text, cached.doc)
        else:  # someone wrote it since: only add what they typed that it lacks
            lacking = [e for e in result.typed if e.entry_id not in cached.doc.entry_lines]
            if not lacking:
                return False
            self._write_locked(cached, lacking, ())
        self.journal.untold.append(
            f"{self.path}: merged back what an editor wrote into the file a save had "
            f"replaced meanwhile ({len(result.typed)} new entries of theirs)"
        )
        return True

    def clean_temp_files(self) -> list[Path]:
        """The temp files of MEMORY.md and of its TOMBSTONES that a writer killed mid-way
        left (both are written under the lock held here: no live writer's)."""
        with self.lock.hold():
            folder = self.path.parent
            if not folder.is_dir():
                return []
            names = (self.path.name, self.tombstones.path.name)
            return [gone for name in names for gone in remove_stale_temp_files(folder, name)]


def quiet_wanted(key: FileStat, last: FileStat | None) -> float:
    """How long a file someone else left (``key``) must have been quiet before oryxmem
    writes it, given the file oryxmem left ``last`` (the note beside the lock).
    QUIET_SECONDS when it is that inode, written in place: an editor that truncates it
    and writes it again in pieces may be mid-way. No time when it is another inode (an
    editor's save by rename, git's checkout): its writer wrote it whole before it took
    the name, and is done with it unless it still holds it open to write (which
    is_being_written asks either way). No note yet: in place, the careful answer."""
    return 0.0 if last is not None and key.inode != last.inode else QUIET_SECONDS


def wait_for_writer(
    path: Path, key: FileStat, since: float | None, quiet: float
) -> tuple[float, bool]:
    """Wait for whoever wrote the file last (an editor, git) to be done, which is once it
    has been ``quiet`` s and nobody holds it open to write in place: one that truncated it
    and is writing it again in pieces is at work still, and a rename now would leave it
    writing into the replaced inode, an append would be written over. Gives when this
    spell of waiting began (its patience is for all of the spell's retries) and whether
    the file moved meanwhile."""
    now = time.monotonic()
    if since is None or now - since > 10 * QUIET_PATIENCE:
        since = now  # a new spell
    patience = since + QUIET_PATIENCE - now
    moved = patience > 0 and wait_until_quiet(path, key.inode, quiet, patience) != key
    return since, moved


class MarkdownFiles:
    """Every agent's MarkdownMemoryStore, one per file, shared by a process's threads:
    a write by one thread leaves the parsed copy the others read current."""

    def __init__(self, workspace: Workspace, *, clock: Clock, limits: StoreLimits) -> None:
        self.workspace = workspace
        self.clock = clock
        self.limits = limits
        self._stores: dict[str, MarkdownMemoryStore] = {}
        self._creating = threading.Lock()

    def get(self, agent: str) -> MarkdownMemoryStore:
        """The store of a resolved agent ('' for the global file)."""
        store = self._stores.get(agent)
        if store is None:
            with self._creating:  # one per agent, whoever asks first
                store = self._stores.get(agent)
                if store is None:
                    store = MarkdownMemoryStore(
                        self.workspace.memory_path(agent),
                        FileLock(self.workspace.lock_path(agent)),
                        clock=self.clock,
                        limits=self.limits,
                    )
                    self._stores[agent] = store
        return store

    def merge_orphans(self) -> list[str]:
        """Every store's merge_orphans; the agents whose files were written."""
        return [agent for agent, store in list(self._stores.items()) if store.merge_orphans()]

    def __contains__(self, agent: str) -> bool:
        return agent in self._stores

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
