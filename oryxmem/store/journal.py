"""The journal side of one MEMORY.md: its appends, written ahead in the answered log
(store/answered.py), and the replay of what a crash left open.

A save's append is durable once its record is synced: the bytes go to MEMORY.md at once
(every reader sees them) and MEMORY.md is synced later, when the rows take the saves in
(``rows_have_answered``) or before anything else is written to it (``settle_locked``).
Any other append (a reconcile's) is synced at once and leaves no record. Every method
but ``close`` runs with the agent's file lock held.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from oryxmem.errors import OryxError
from oryxmem.fileio import (
    AppendHandle,
    AppendIntent,
    FileStat,
    append_durably,
    open_regular,
    repair_torn_append,
    storage_error,
)
from oryxmem.store.answered import AnsweredLog
from oryxmem.store.format import Entry

# What a replay may find that needs no telling: the append had completed, or the file it
# went to has been replaced since (by a rewrite or an editor: what that lost of the
# saves, recovery and reconcile put back).
QUIET_REPAIRS = ("complete", "file replaced since")


@dataclass
class _AppendJournal:
    """The journal of one append (fileio.Journal): its record in the answered log, with
    the entries of the saves it answers (none: a reconcile's, whose record goes as soon
    as the append is durable)."""

    log: AnsweredLog
    entries: Sequence[Entry]
    start: int = 0

    def begin(self, intent: AppendIntent) -> None:
        self.start = self.log.note(self.entries, intent)

    def end(self) -> None:
        if self.entries:
            self.log.mark_done(self.start)
        else:
            self.log.take_back(self.start, sync=False)

    def withdraw(self) -> None:
        self.log.take_back(self.start, sync=True)


class MemoryJournal:
    def __init__(self, path: Path, log_path: Path, refuse: type[OryxError]) -> None:
        self.path = path  # the MEMORY.md
        self.log = AnsweredLog(log_path)
        self.appender = AppendHandle(path, refuse=refuse)
        self.repairs: list[str] = []  # what each replay at lock time found
        self.untold: list[str] = []  # what is worth telling, until someone tells it
        # The log's stat when this process last looked for appends a crash left open, or
        # wrote it itself (unchanged since: nothing to look for).
        self._seen: FileStat | None = None
        self._unsettled = False  # saves appended and not synced yet

    def repair_locked(self) -> None:
        """Finish (or leave) the appends of the log's open records, if a crash tore one
        or the disk lost them. Looked for once per change of the log."""
        seen = self.log.stat()
        if seen is None or seen == self._seen:
            return
        for intent in self.log.open_intents():
            outcome = repair_torn_append(self.path, intent)
            self.repairs.append(outcome)
            if outcome not in QUIET_REPAIRS:
                line = self._line_at(intent.offset)
                self.untold.append(f"{self.path}:{line}: after a crash, {outcome}")
        self._seen = self.log.stat()

    def _line_at(self, offset: int) -> int:
        """The 1-based number of the line that starts at this byte offset."""
        try:
            with os.fdopen(open_regular(self.path, os.O_RDONLY), "rb") as handle:
                return handle.read(offset).count(b"\n") + 1
        except (OSError, OryxError):
            return 0

    def append_locked(
        self, inode: int, size: int, data: bytes, answered: Sequence[Entry], *, sync: bool
    ) -> os.stat_result:
        """Append data to MEMORY.md (inode, of size bytes), journaled. ``answered``: the
        saves it carries, kept in the log until the rows have them; without ``sync`` the
        append is durable by its record alone until settle_locked."""
        if not answered:
            self.settle_locked()  # appends of saves not synced yet are durable first
        synced = sync or not answered
        journal = _AppendJournal(self.log, answered)
        info = append_durably(self.appender, inode, data, journal, size, sync=synced)
        self._unsettled |= not synced
        self._seen = self.log.stat()  # its own record: no tear to look for
        return info

    def note_rewritten(self, answered: Sequence[Entry]) -> None:
        """Saves written by a rewrite (synced with it): kept until the rows have them."""
        self.log.note(answered)
        self._seen = self.log.stat()

    def settle_locked(self) -> None:
        """Sync what saves appended to MEMORY.md, and mark their records done."""
        if self._unsettled:
            self._sync_then(lambda: self.log.mark_done_of(os.getpid()))

    def rows_have_answered_locked(self, keep: Collection[str] = ()) -> None:
        """The saves this process answered are in the rows: MEMORY.md is synced and their
        records leave the log, but for those of the entries in ``keep`` (answered since,
        their rows not in yet)."""
        self._sync_then(lambda: self.log.forget(os.getpid(), keep))

    def _sync_then(self, then: Callable[[], None]) -> None:
        """Sync what saves appended unsynced (if any), then change the log; a failure
        leaves the records open, replayed if the disk lost the appends."""
        try:
            if self._unsettled:
                self.appender.sync()
            then()
        except OSError as error:
            raise storage_error("sync", self.path, error) from error
        self._unsettled = False
        self._seen = self.log.stat()

    def take_untold(self) -> list[str]:
        untold, self.untold = self.untold, []
        return untold

    @property
    def unsettled(self) -> bool:
        return self._unsettled

    def close(self) -> None:
        """Close the kept fd. What saves appended and was not synced is left to the
        kernel, its records open for the next replay (settle_locked first to sync it)."""
        self.appender.close()
        self.log.close()
