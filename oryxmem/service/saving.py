"""The save path: the one way an entry is written, whichever surface it comes from.

A save is checked and stamped (``prepare_batch``), written to MEMORY.md as one durable
append (``write_batch``: that is when it is acknowledged), then mirrored into the rows
of ``memory_entries`` (``finish_batch`` queues it, ``mirror_saves`` commits what is
queued in one transaction), whose change log feeds the derived indexes. The daemon's
group commit is this same path with its steps spread over threads: prepare, finish and
mirror on the memory thread, the write on a writer thread per agent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from oryxmem.errors import (
    EmptyContentError,
    MemoryFileConflictedError,
    OryxError,
    log_failure,
)
from oryxmem.secrets import checked_content
from oryxmem.service.results import SaveResult
from oryxmem.service.shared import Shared
from oryxmem.store import rows
from oryxmem.store.db import (
    Database,
    OwnWritersBusy,
    brief_wait,
    is_locked,
    sync_wal,
    unsynced_transaction,
    write_transaction,
)
from oryxmem.store.format import ARCHIVAL, Entry
from oryxmem.store.markdown import Append, MarkdownMemoryStore
from oryxmem.store.sessions import ToolRecord, insert_tool_records
from oryxmem.workspace import AgentRef

log = logging.getLogger("oryxmem")
FLUSH_WAIT_MS = 100  # what mirroring the saves before a new one waits (brief_wait)
# After a failed mirror, the next try: soon (not a spin), and, while another program
# keeps the database locked, half as often each time up to once a second. Each try
# waits briefly for that lock on the memory thread, and saves wait behind it: tried
# twenty times a second through a lock held for minutes, the tries would hold up the
# saves a third of the time.
MIRROR_RETRY_SECONDS = 0.05
MIRROR_RETRY_MAX_SECONDS = 1.0


def fold_whitespace(text: str) -> str:
    return " ".join(text.split())


def cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def footprint_line(user_message: str, reply: str, max_chars: int) -> str:
    """The compact archival line that records one trigger."""
    user = cut(fold_whitespace(user_message), max_chars)
    answer = cut(fold_whitespace(reply), max_chars)
    if not user and not answer:
        raise EmptyContentError("a trigger needs a user message or a reply")
    return f'trigger: user="{user}" reply="{answer}"'


@dataclass(frozen=True)
class SaveRequest:
    """One save as it arrives: what to write, where, and who asked (for the history)."""

    content: str
    scope: str = ARCHIVAL
    source: str = "api"

    @classmethod
    def footprint(
        cls, user_message: str, reply: str, max_chars: int, source: str = "api"
    ) -> SaveRequest:
        """The automatic footprint of one trigger, as an archival save."""
        return cls(footprint_line(user_message, reply, max_chars), ARCHIVAL, source)


Outcome = SaveResult | BaseException


@dataclass
class SaveBatch:
    """One agent's saves, written to MEMORY.md as one durable append."""

    ref: AgentRef
    requests: Sequence[SaveRequest]
    outcomes: list[Outcome | None]
    store: MarkdownMemoryStore | None = None
    prepared: list[tuple[int, Entry]] = field(default_factory=list)  # (request, entry)
    written: Append | None = None
    error: BaseException | None = None  # why the write failed

    def outcome(self, index: int) -> Outcome:
        result = self.outcomes[index]
        assert result is not None, "the batch has not been written"
        return result


@dataclass
class _Unmirrored:
    """One agent's appends whose entries are not yet in the rows, in order: consecutive,
    unless a mirror that had to come first found the database locked (the rows' mirror
    then leaves the file to the reconcile: rows.mirror_appends)."""

    appends: list[Append]
    source: str
    since: float  # monotonic time of the first


class Saving:
    def __init__(
        self,
        shared: Shared,
        indexes_take_a_step: Callable[[], object],
    ) -> None:
        """``indexes_take_a_step``: the indexes that follow saves take in a batch of the
        rows (after a mirror, when it is asked to: Upkeep.take_a_step)."""
        self.shared = shared
        self._indexes_take_a_step = indexes_take_a_step
        self._unmirrored: dict[str, _Unmirrored] = {}
        # Tool calls answered but not yet in tool_invocations, with when the first came
        # (monotonic): written with the next mirror, in its transaction. Queued from
        # the event loop, written on the memory thread.
        self._records: list[ToolRecord] = []
        self._records_since: float | None = None
        self._records_lock = threading.Lock()
        self._failing = False  # the last mirror failed: said once per spell
        self.mirror_not_before = 0.0  # after a failure, when to try again (monotonic)
        self._retry_after = MIRROR_RETRY_SECONDS  # the pause after the next failure
        self.batches = 0
        self.saves = 0
        self.mirrors = 0
        # Saves appended (counted before they are acknowledged; by the writer threads) and
        # saves a mirror has put in the rows: equal, every acknowledged save is in them.
        self._appended = 0
        self._appended_lock = threading.Lock()
        self._mirrored = 0
        # The entries of appends written (so answered) and not yet queued for a mirror:
        # a mirror meanwhile (of the saves queued before) keeps their records in the
        # answered log, their rows not in yet. Added by the writer threads.
        self._not_queued: set[str] = set()

    def save_one(self, ref: AgentRef, request: SaveRequest) -> SaveResult:
        outcome = self.save_batch(ref, [request]).outcome(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def save_batch(self, ref: AgentRef, requests: Sequence[SaveRequest]) -> SaveBatch:
        """Every step of a save, in this thread: one append for all of them, then the rows
        and a batch of the indexes that follow saves."""
        batch = self.prepare_batch(ref, requests)
        self.write_batch(batch)
        self.finish_batch(batch)
        self.mirror_saves(indexes_follow=True)
        return batch

    def others_are_writing(self, ref: AgentRef) -> bool:
        """Is another program at work on this agent's MEMORY.md (an editor writing it
        again in place)? A save to it now would wait until it is done. Only looks (stats):
        the folder's checks come with the save's own (prepare_batch)."""
        try:
            return self.shared.files.get(ref.agent).others_are_writing()
        except (OryxError, OSError):
            return False  # the save itself says what is wrong

    def prepare_batch(self, ref: AgentRef, requests: Sequence[SaveRequest]) -> SaveBatch:
        """Check and stamp each save; those refused get their error as their outcome."""
        batch = SaveBatch(ref, requests, [None] * len(requests))
        try:
            self.shared.check_folder(ref)
            batch.store = self.shared.files.get(ref.agent)
        except OryxError as error:
            batch.outcomes = [error] * len(requests)
            return batch
        if batch.store.others_are_writing():  # this write will wait for quiet:
            self.mirror_saves()  # what was saved before is in the rows first, whatever comes
        secrets_mode = str(self.shared.config.get("memory.secrets"))
        for index, request in enumerate(requests):
            try:
                content = checked_content(request.content, secrets_mode)
                batch.prepared.append((index, batch.store.prepare(content, request.scope)))
            except OryxError as error:
                batch.outcomes[index] = error
        return batch

    def write_batch(self, batch: SaveBatch) -> None:
        """The durable append of a prepared batch. Touches only this agent's file, so the
        batches of different agents may be written side by side on other threads."""
        if not batch.prepared or batch.store is None:
            return
        try:
            # Durable by its journal record; MEMORY.md is synced when the rows take it in.
            batch.written = batch.store.append_many([e for _, e in batch.prepared], settle=False)
        except Exception as error:  # finish_batch decides what the callers are told
            batch.error = error
            return
        with self._appended_lock:
            self._appended += len(batch.written.entries)
            self._not_queued.update(entry.entry_id for entry in batch.written.entries)
        for (index, _), entry in zip(batch.prepared, batch.written.entries, strict=True):
            batch.outcomes[index] = SaveResult(batch.ref, entry)

    def finish_batch(self, batch: SaveBatch) -> None:
        """After the write: queue the mirror, or keep saves the file refused (git conflict
        markers) in the database, or give every caller the error."""
        if batch.written is not None:
            self.batches += 1
            self.saves += len(batch.written.entries)
            self._queue_mirror(batch.ref.agent, batch.written, batch.requests[0].source)
        elif isinstance(batch.error, MemoryFileConflictedError):
            for index, entry in batch.prepared:
                batch.outcomes[index] = self._save_while_conflicted(
                    batch.ref, entry, batch.requests[index].source, batch.error
                )
        elif batch.error is not None:
            agent = batch.ref.agent or "(global)"
            if not isinstance(batch.error, OryxError) or batch.error.http_status >= 500:
                log_failure(log, f"saving to {agent} failed", batch.error)
            for index, _ in batch.prepared:
                batch.outcomes[index] = batch.error

    def _save_while_conflicted(
        self, ref: AgentRef, entry: Entry, source: str, error: MemoryFileConflictedError
    ) -> Outcome:
        """Keep a save that MEMORY.md cannot take (a git conflict) in SQLite until it can."""
        self.mirror_saves()
        db = self.shared.db
        try:
            with write_transaction(db):
                rows.insert_waiting_row(db, ref.agent, entry, source)
        except Exception as failure:  # neither side took it: the caller must hear so
            log_failure(log, f"keeping a save for {ref.describe()} failed", failure)
            return failure
        lines = ", ".join(map(str, error.data.get("conflict_lines", [])))
        reason = (
            f"MEMORY.md has git conflict markers (lines {lines}); the entry is kept in the"
            " database and written to the file once they are resolved"
        )
        log.warning("%s: %s", ref.describe(), reason)
        return SaveResult(ref, entry, deferred=reason)

    def _queue_mirror(self, agent: str, append: Append, source: str) -> None:
        pending = self._unmirrored.get(agent)
        if pending is not None and (
            pending.appends[-1].after != append.before or pending.source != source
        ):
            # Not a continuation of what is pending: mirror that first, waiting no longer
            # than the memory thread's own mirror would for another program's lock (a save
            # is answered already; the rows may wait, never the next answer).
            with brief_wait(self.shared.db, FLUSH_WAIT_MS):
                self.mirror_saves()
            pending = self._unmirrored.get(agent)  # still there: the database was locked
        if pending is None:
            self._unmirrored[agent] = _Unmirrored([append], source, time.monotonic())
        else:
            pending.appends.append(append)
        with self._appended_lock:
            self._not_queued.difference_update(entry.entry_id for entry in append.entries)

    def written_by_others(self, agent: str) -> bool:
        """Has someone else (an editor, git) written this agent's MEMORY.md since this
        process last did?"""
        return self.shared.files.get(agent).left_by_others()

    @property
    def every_answered_save_in_rows(self) -> bool:
        """Has a mirror put in the rows every save acknowledged so far? (Read from any
        thread: an append is counted before its save is acknowledged, and the mirrored
        count is read first, so a count caught between the two reads errs towards no.)"""
        return self._mirrored == self._appended

    @property
    def unmirrored_agents(self) -> list[str]:
        """The agents with saves written but not yet in the rows."""
        return list(self._unmirrored)

    @property
    def unmirrored_since(self) -> float | None:
        """When the oldest save (or tool call) not yet in the rows came (monotonic)."""
        since = [p.since for p in self._unmirrored.values()]
        records = self._records_since
        return min(since if records is None else [*since, records], default=None)

    def queue_record(self, record: ToolRecord) -> bool:
        """A tool call's record, for tool_invocations with the next mirror (a call is
        never answered later for its record: the record is not memory). True when it
        is the first waiting."""
        with self._records_lock:
            self._records.append(record)
            first = self._records_since is None
            if first:
                self._records_since = time.monotonic()
            return first

    def _take_records(self) -> tuple[list[ToolRecord], float | None]:
        with self._records_lock:
            taken = self._records, self._records_since
            self._records, self._records_since = [], None
            return taken

    def _put_back_records(self, records: list[ToolRecord], since: float | None) -> None:
        with self._records_lock:
            self._records = records + self._records
            if since is not None:
                self._records_since = min(since, self._records_since or since)

    def mirror_saves(self, *, indexes_follow: bool = False) -> list[str]:
        """Every save queued and not yet in the rows goes in, in one transaction (with
        ``indexes_follow``, the indexes that follow saves then take a batch, in a short
        transaction of their own). Returns the agents whose rows still lag their file
        (someone else wrote too): reconcile them soon. The tool calls' records go in with
        them. The answered log keeps the records of saves written and not queued yet
        (answered, not in this mirror) until their own mirror. A failure here loses
        nothing (the files have every save): the saves and records stay queued, and the
        first failure of a spell is logged."""
        if not self._unmirrored and self._records_since is None:
            return []
        pending, self._unmirrored = self._unmirrored, {}
        records, records_since = self._take_records()
        lagging = list(pending)
        db = self.shared.db
        staged = [(agent, saves.appends, saves.source) for agent, saves in pending.items()]
        try:
            # The rows are built before the write lock is taken, and moved in under it;
            # the commit is synced below, with the lock let go.
            with rows.staged_appends(db, staged), unsynced_transaction(db):
                insert_tool_records(db, records)
                for agent, saves in pending.items():
                    path = str(self.shared.workspace.memory_path(agent))
                    if rows.mirror_appends(db, agent, path, saves.appends):
                        lagging.remove(agent)
                    for repair in self.shared.files.get(agent).take_repairs():
                        log.warning("%s", repair)
                        rows.record_history(db, agent, "repair", "file", None, repair)
        except Exception as error:  # the file has them; the acks stand. Tried again soon:
            # a stale editor buffer may take them out of the file meanwhile, and only
            # their rows and history have them put back.
            self._unmirrored = {**pending, **self._unmirrored}
            self._put_back_records(records, records_since)
            self._mirror_failed(error)
            self._sync_files(pending, rows_have_them=False)
            return []
        durable = self._rows_durable(db)
        with self._appended_lock:
            not_queued = set(self._not_queued)
        self._sync_files(pending, rows_have_them=durable, keep=not_queued)
        self._mirrored += sum(len(a.entries) for saves in pending.values() for a in saves.appends)
        self.mirrors += 1
        self._failing = False
        self.mirror_not_before = 0.0
        self._retry_after = MIRROR_RETRY_SECONDS
        if indexes_follow:  # the rows of these saves, or a step of a rebuild
            self._follow()
        return lagging

    @staticmethod
    def _rows_durable(db: Database) -> bool:
        """Sync the WAL that holds the mirror's commit, now that the write lock is let go.
        Only then may the answered log let the saves' records go. A failed sync is
        logged and leaves them open: the rows have the saves, the disk may not yet."""
        try:
            sync_wal(db)
        except OSError as error:
            log_failure(log, "the rows' WAL not synced yet; the answered log keeps them", error)
            return False
        return True

    def _sync_files(
        self, agents: Iterable[str], *, rows_have_them: bool, keep: Collection[str] = ()
    ) -> None:
        """Sync the MEMORY.md files the saves were appended to, and let their records in
        the answered log go once the rows have them (not those of the entries in ``keep``).
        A failed sync leaves the records open: the saves are durable in them, and
        replayed if the disk lost them."""
        for agent in agents:
            store = self.shared.files.get(agent)
            try:
                if rows_have_them:
                    store.rows_have_answered(keep)
                else:
                    store.settle()
            except (OryxError, OSError) as error:
                log_failure(log, f"{agent or '(global)'}: MEMORY.md not synced yet", error)

    def _follow(self) -> None:
        """The indexes that follow saves take a step. They are derived: a failure is
        caught up later (before a search, when the memory thread is idle); only what is
        not an expected wait for a lock is logged."""
        try:
            self._indexes_take_a_step()
        except Exception as error:
            if not isinstance(error, OwnWritersBusy) and not is_locked(error):
                log_failure(log, "the indexes did not follow the saves; caught up later", error)

    def _mirror_failed(self, error: Exception) -> None:
        """Try again soon, and less often while the failures go on; say so once a spell,
        unless it was an expected wait (the daemon's own indexer held the lock longer
        than a mirror waits: brief, so the next try comes as soon as ever)."""
        if isinstance(error, OwnWritersBusy):
            self.mirror_not_before = time.monotonic() + MIRROR_RETRY_SECONDS
            return
        self.mirror_not_before = time.monotonic() + self._retry_after
        self._retry_after = min(self._retry_after * 2, MIRROR_RETRY_MAX_SECONDS)
        if not self._failing:
            if is_locked(error):  # another program holds the database
                log.warning("the database is locked by another program; the rows wait")
            else:
                log_failure(log, "mirroring saves failed; trying again", error)
        self._failing = True

    def recover_answered(self) -> int:
        """Saves answered before a crash whose rows never came (store/answered.py): into
        the rows now, with their history, so reconcile puts back into MEMORY.md what an
        old copy of the file written meanwhile took out. Returns how many were missing."""
        db = self.shared.db
        missing_total = 0
        for agent in ["", *self.shared.workspace.agent_names()]:
            store = self.shared.files.get(agent)
            with store.lock.hold():
                store.repair_locked()  # a torn append is finished from its record first
                noted = store.answered.entries()
                if not noted:
                    continue
                with write_transaction(db):
                    missing = rows.entries_not_in_rows(db, agent, noted)
                    rows.record_history_rows(
                        db, [rows.history_row(agent, "add", "recovered", e) for e in missing]
                    )
                    rows.insert_rows(db, agent, missing, "recovered")
                store.answered.forget()
            if missing:
                log.warning(
                    "%s: %d answered saves were not in the rows after a stop; taken in",
                    agent or "(global)",
                    len(missing),
                )
            missing_total += len(missing)
        return missing_total
