"""The daemon's memory thread: every call runs here, and saves that arrive together share.

The HTTP handlers only parse and reply. Work goes to this one thread, which
owns a MemoryService and its SQLite connection. When it wakes it takes every
job queued so far; the saves among them are grouped per agent, and each group
is one journaled append to MEMORY.md (one fsync): group commit, so throughput
grows with the number of clients. The groups of different agents are written
side by side on a few writer threads, so their fsyncs overlap; each group is
answered as soon as its own append is durable.

A save is acknowledged once it is durable in MEMORY.md. Mirroring it into the
rows (one SQLite commit, itself an fsync) is derived work and is coalesced:
the thread mirrors what it has appended when no job has come for
MIRROR_IDLE_SECONDS, when the oldest unmirrored save is MIRROR_MAX_AGE_SECONDS
old, and always before it runs any other call (a recall, a context, a
reconcile by the sync thread), so every reader that goes through the daemon
sees the rows of every save acknowledged before it. Only a program reading the
table directly sees the lag: none once saves pause, at most the maximum age
while they keep coming. That age is a trade: a mirror costs far less per entry
in a big transaction than in many small ones (at 16 clients, 25 ms gave about
2,700 saves/s here and 250 ms about 3,300), while the memory thread, busy with
a mirror, starts no append.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from oryxmem.errors import (
    DaemonUnavailableError,
    MemoryFileConflictedError,
    OryxError,
    log_failure,
)
from oryxmem.fileio import ConcurrentChange
from oryxmem.service import MemoryService, SaveResult
from oryxmem.store.db import write_transaction
from oryxmem.store.format import Entry, NewEntry
from oryxmem.store.markdown import MarkdownMemoryStore, StatKey
from oryxmem.sync.engine import Append, SyncEngine
from oryxmem.workspace import AgentRef

log = logging.getLogger("oryxmem.daemon")
MAX_BATCH = 512
WRITER_THREADS = 4  # agents whose appends (and fsyncs) run side by side
MIRROR_IDLE_SECONDS = 0.002
MIRROR_MAX_AGE_SECONDS = 0.25


@dataclass
class _Save:
    ref: AgentRef
    content: str
    scope: str
    source: str
    # A caller on an event loop gets an asyncio future, resolved on its loop; others a
    # concurrent one.
    loop: asyncio.AbstractEventLoop | None = None
    future: Future[SaveResult] | asyncio.Future[SaveResult] = field(default_factory=Future)


def _resolve(outcomes: list[tuple[_Save, SaveResult | None, BaseException | None]]) -> None:
    """Set the outcomes of saves; runs on the loop of the callers that awaited them."""
    for job, result, error in outcomes:
        if job.future.done():  # the client went away and its handler was cancelled
            continue
        if error is None:
            job.future.set_result(result)  # type: ignore[arg-type]
        else:
            job.future.set_exception(error)


class _Replies:
    """The outcomes of a group of saves, sent together: one wake-up per event loop."""

    def __init__(self) -> None:
        self._outcomes: list[tuple[_Save, SaveResult | None, BaseException | None]] = []

    def ok(self, job: _Save, result: SaveResult) -> None:
        self._outcomes.append((job, result, None))

    def failed(self, job: _Save, error: BaseException) -> None:
        self._outcomes.append((job, None, error))

    def settle(self, job: _Save, work: Callable[[], SaveResult]) -> None:
        try:
            self.ok(job, work())
        except OryxError as error:
            self.failed(job, error)
        except Exception as error:  # reported to the caller as internal_error, and logged
            log_failure(log, "memory call failed", error)
            self.failed(job, error)

    def send(self) -> None:
        by_loop: dict[asyncio.AbstractEventLoop | None, list[Any]] = {}
        for outcome in self._outcomes:
            by_loop.setdefault(outcome[0].loop, []).append(outcome)
        self._outcomes = []
        for loop, outcomes in by_loop.items():
            if loop is None:
                _resolve(outcomes)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, outcomes)


@dataclass
class _Unmirrored:
    """Consecutive appends to one agent's file whose entries are not yet in the rows."""

    appends: list[Append]
    source: str
    since: float  # monotonic time of the first


@dataclass
class _Call:
    work: Callable[[MemoryService], Any]
    future: Future[Any] = field(default_factory=Future)


@dataclass
class _GroupWrite:
    """One agent's saves of a round, written as one durable append."""

    agent: str
    store: MarkdownMemoryStore
    ready: list[tuple[_Save, Entry]]
    replies: _Replies
    entries: list[Entry] = field(default_factory=list)
    before: StatKey | None = None
    after: StatKey = (0, 0, 0, 0)
    error: Exception | None = None

    def run(self) -> None:
        """Write, and acknowledge at once; errors are kept for the memory thread."""
        try:
            self.entries, self.before, self.after = _append_group(self.store, self.ready)
        except Exception as error:
            self.error = error
            return
        for (job, _), entry in zip(self.ready, self.entries, strict=True):
            self.replies.ok(job, SaveResult(job.ref, entry))
        self.replies.send()  # durable in MEMORY.md: acknowledged; the rows follow


def _append_group(
    store: MarkdownMemoryStore, ready: list[tuple[_Save, Entry]]
) -> tuple[list[Entry], StatKey | None, StatKey]:
    """One durable write of the whole group: (entries, stat before, stat our write left)."""
    additions = [NewEntry(e.scope, e.ts, e.content) for _, e in ready]
    with store.lock.hold():
        for _ in range(5):
            try:
                entries, before = store.append_locked(additions)
                break
            except ConcurrentChange:
                store.forget()  # an editor wrote meanwhile: read it again
        else:
            raise ConcurrentChange(store.path)
    assert store.written_key is not None  # set by the write just made
    return entries, before, store.written_key


class MemoryWorker:
    def __init__(self, service: MemoryService, on_saved: Callable[[str], None]) -> None:
        self.service = service
        self.engine = SyncEngine(service)
        self.on_saved = on_saved  # tells the sync watcher to look at this agent soon
        self._jobs: queue.Queue[_Save | _Call | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="oryxmem-memory", daemon=True)
        self._unmirrored: dict[str, _Unmirrored] = {}
        self._writers = ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="oryxmem-write")
        self._accepting = threading.Lock()  # no job is queued after the stop marker
        self._stopping = False
        self.batches = 0
        self.saves = 0
        self.mirrors = 0

    def start(self) -> None:
        self._thread.start()
        self.call(lambda service: service.db)  # open it on this thread, before any request

    def stop(self) -> None:
        with self._accepting:
            self._stopping = True
            self._jobs.put(None)
        self._thread.join(timeout=30)
        self._writers.shutdown()
        self.service.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _queue(self, job: _Save | _Call) -> None:
        with self._accepting:
            if self._stopping:
                job.future.set_exception(DaemonUnavailableError("the daemon is stopping"))
            else:
                self._jobs.put(job)

    def call(self, work: Callable[[MemoryService], Any]) -> Future[Any]:
        job = _Call(work)
        self._queue(job)
        return job.future

    def save(self, ref: AgentRef, content: str, scope: str, source: str) -> Future[SaveResult]:
        job = _Save(ref, content, scope, source)
        self._queue(job)
        assert isinstance(job.future, Future)
        return job.future

    def save_on_loop(
        self, ref: AgentRef, content: str, scope: str, source: str
    ) -> asyncio.Future[SaveResult]:
        """save() for a caller on the running event loop: await the result."""
        loop = asyncio.get_running_loop()
        job = _Save(ref, content, scope, source, loop, loop.create_future())
        self._queue(job)
        assert isinstance(job.future, asyncio.Future)
        return job.future

    def flush(self) -> None:
        """Wait until every save acknowledged so far is mirrored into the rows.

        The sync thread calls this before it reconciles, so the history of every
        acknowledged save is in place when a stale editor buffer is judged. Once
        stopping, the thread has mirrored everything on its way out."""
        self.call(lambda service: None).exception()

    # --- the thread -------------------------------------------------------------

    def _next_job(self) -> _Save | _Call | None:
        """The next job; mirrors what is pending while the queue is idle or it grows old."""
        if self._unmirrored:
            oldest = min(pending.since for pending in self._unmirrored.values())
            wait = min(MIRROR_IDLE_SECONDS, oldest + MIRROR_MAX_AGE_SECONDS - time.monotonic())
            try:
                if wait > 0:
                    return self._jobs.get(timeout=wait)
            except queue.Empty:
                pass
            self._mirror_pending()
        return self._jobs.get()

    def _run(self) -> None:
        while True:
            first = self._next_job()
            if first is None:
                self._mirror_pending()
                return
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._jobs.put(None)  # stop after this batch
                    break
                batch.append(job)
            saves: dict[str, list[_Save]] = {}
            for job in batch:
                if isinstance(job, _Save):
                    saves.setdefault(job.ref.agent, []).append(job)
                else:
                    self._mirror_pending()  # a reader sees every acknowledged save
                    self._run_call(job)
            if saves:
                self._save_groups(saves)

    def _run_call(self, job: _Call) -> None:
        try:
            job.future.set_result(job.work(self.service))
        except OryxError as error:
            job.future.set_exception(error)
        except Exception as error:  # reported to the caller as internal_error, and logged
            log_failure(log, "memory call failed", error)
            job.future.set_exception(error)

    # --- saves ------------------------------------------------------------------

    def _save_groups(self, saves: dict[str, list[_Save]]) -> None:
        """Each agent's group is one durable append; the agents' appends run side by side
        (their fsyncs overlap), each acknowledged as soon as it is durable."""
        writes: list[_GroupWrite] = []
        for agent, group in saves.items():
            replies = _Replies()
            write = self._prepare_group(agent, group, replies)
            if write is None:
                replies.send()
            else:
                writes.append(write)
        if len(writes) == 1:
            writes[0].run()
        elif writes:
            for done in [self._writers.submit(write.run) for write in writes]:
                done.result()  # run() reports its own errors
        for write in writes:
            self._finish_group(write)

    def _prepare_group(
        self, agent: str, group: list[_Save], replies: _Replies
    ) -> _GroupWrite | None:
        """The entries of a group, ready to write (None: all answered here already)."""
        try:
            self.service.check_folder(group[0].ref)  # once per group, off the event loop
        except OryxError as error:
            for job in group:
                replies.failed(job, error)
            return None
        store = self.service.store(group[0].ref)
        if not isinstance(store, MarkdownMemoryStore):
            self._save_one_by_one(group, replies)
            return None
        ready: list[tuple[_Save, Entry]] = []
        for job in group:
            try:
                ready.append((job, store.prepare(job.content, job.scope)))
            except OryxError as error:
                replies.failed(job, error)
        return _GroupWrite(agent, store, ready, replies) if ready else None

    def _finish_group(self, write: _GroupWrite) -> None:
        """After the write: fall back, or count it and queue its mirror (memory thread)."""
        if isinstance(write.error, MemoryFileConflictedError):
            self._save_one_by_one([job for job, _ in write.ready], write.replies)
            write.replies.send()
            return
        if write.error is not None:
            log_failure(log, f"saving to {write.agent or '(global)'} failed", write.error)
            for job, _ in write.ready:
                write.replies.failed(job, write.error)
            write.replies.send()
            return
        self.batches += 1
        self.saves += len(write.entries)
        source = write.ready[0][0].source
        self._defer_mirror(write.agent, write.entries, write.before, write.after, source)

    def _save_one_by_one(self, group: list[_Save], replies: _Replies) -> None:
        """Each save through the service: for the sqlite backend and conflicted files."""
        self._mirror_pending()
        for job in group:
            replies.settle(
                job,
                lambda j=job: self.service.save(  # type: ignore[misc]
                    j.ref.requested, j.content, j.scope, source=j.source
                ),
            )

    def _defer_mirror(
        self,
        agent: str,
        entries: list[Entry],
        before: StatKey | None,
        after: StatKey,
        source: str,
    ) -> None:
        pending = self._unmirrored.get(agent)
        if pending is not None and (
            pending.appends[-1].after != before or pending.source != source
        ):
            self._mirror_pending()  # not a continuation of what is pending: mirror that first
            pending = None
        if pending is None:
            self._unmirrored[agent] = _Unmirrored(
                [Append(before, entries, after)], source, time.monotonic()
            )
        else:
            pending.appends.append(Append(before, entries, after))

    def _mirror_pending(self) -> None:
        """Every pending save into the rows, in one transaction: one commit for all."""
        if not self._unmirrored:
            return
        pending, self._unmirrored = self._unmirrored, {}
        lagging = list(pending)
        try:
            with write_transaction(self.service.db):
                in_sync = [
                    agent
                    for agent, saves in pending.items()
                    if self.engine.record_saves(agent, saves.appends, saves.source)
                ]
            lagging = [agent for agent in pending if agent not in in_sync]
        except Exception as error:  # the file has them; sync mirrors them. The acks stand.
            log_failure(log, "mirroring saves failed; sync will catch up", error)
        self.mirrors += 1
        for agent in lagging:
            self.on_saved(agent)  # the rows lag behind the file: reconcile soon
