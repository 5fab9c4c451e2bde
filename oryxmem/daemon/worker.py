"""The daemon's memory thread: every call runs here, and saves that arrive together share.

The HTTP handlers only parse and reply. Work goes to this one thread, which
owns a MemoryService and its SQLite connection. When it wakes it takes every
job queued so far; the saves among them are grouped per agent, and each group
is one batch of the service's one write path (MemoryService.save_batch, its
steps spread over threads): prepared here, written as one journaled append to
MEMORY.md (one fsync), and each group is answered as soon as its own append is
durable: group commit, so throughput grows with the number of clients. The groups
of a round of several agents are written either one after another on this thread
or side by side on writer threads (their fsyncs overlap, but each costs two thread
hops): whichever has cost this thread less time per save lately (_Pace), the
other tried now and then, since which wins depends on the disk (side by side when
a sync is slow, one after another when syncs take less than the hops).

Mirroring saves into the rows (one SQLite commit, its WAL synced once the write lock is
let go) is derived work and is coalesced into few, large transactions, because each
holds the rows' write lock and another program writing the table without a busy
timeout fails while it is held: the thread mirrors what it has written once the
oldest unmirrored save is MIRROR_MAX_AGE_SECONDS old, or when no job has come for
MIRROR_IDLE_SECONDS if it last mirrored MIRROR_MIN_GAP_SECONDS ago, and always
before it runs any other call (a recall, a context, a reconcile by the sync
thread) while saves wait, so every reader that goes through the daemon sees the
rows of every save acknowledged before it. Only a program reading the table
directly sees the lag: at most a second. The records of tool calls
(tool_invocations) go in with the mirror, in its transaction, never between a
call and its answer; records alone wait for a mirror's own time (they are read by
no call). A mirror
costs far less per entry in a big transaction than in many small ones, and the
indexes that follow saves (the words) take the saves' rows in right after it, in a
transaction of the index file's (store/indexdb.py), which holds no lock of the rows
(up to upkeep.FOLLOW_ROWS; the indexer takes any more).
They take in what a reconcile changed right after it (unless saves wait: then
after their mirror), so that another program's write is followed by the daemon's
in one burst; and what is left when there is nothing else to do, and at least
every INDEX_MAX_LAG_SECONDS under load (recall is exact meanwhile: it checks the
rows the index has not taken in; a search has them taken in first). A backlog (more than
upkeep.BACKLOG_ROWS: a restore, a pull, a reindex) is not taken in here but by the
indexer thread, so no save or search waits for it. Searches are ranked on the
reader threads (readers.py), not here: only that catch-up runs on this thread.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from oryxmem.errors import DaemonUnavailableError, OryxError, log_failure
from oryxmem.service import MemoryService, Outcome, SaveBatch, SaveRequest, SaveResult
from oryxmem.service.saving import Saving
from oryxmem.store.db import brief_wait, is_locked
from oryxmem.store.sessions import ToolRecord
from oryxmem.workspace import AgentRef

log = logging.getLogger("oryxmem.daemon")
MAX_BATCH = 512
# A job that holds the thread this long means it is stuck (blocked in a system call):
# the watchdog stops pinging, and systemd restarts the daemon.
STUCK_SECONDS = 60.0
# What the mirror and the index steps wait for the write lock before trying again later
# (saves queue behind them on this thread): this long for the daemon's other threads
# (the indexer's step), and db.OTHERS_WAIT_MS for another program's (brief_wait).
LOCKED_WAIT_MS = 100
WRITER_THREADS = 4  # agents whose appends (and fsyncs) run side by side
# How a round of several groups is written (_Pace): each way's time per save is the
# median of its last PACE_SAMPLES rounds (one round the scheduler held up must not turn
# it), and the other way is tried once every PACE_TRY_SECONDS, so that a change of the
# disk's speed is noticed. Seldom: a round written the dearer way costs more than its
# own time, since it staggers the answers, and so the clients' next saves, for a while.
PACE_SAMPLES = 15
PACE_TRY_SECONDS = 1.0
MIRROR_IDLE_SECONDS = 0.05
MIRROR_MAX_AGE_SECONDS = 1.0
MIRROR_MIN_GAP_SECONDS = 1.0
INDEX_IDLE_SECONDS = 0.05  # quiet time before the indexes take another batch
INDEX_MAX_LAG_SECONDS = 1.0  # under load, how long the keyword index may trail the rows
# Saves to a MEMORY.md another program is writing (an editor writing it again in place)
# are put off, looked at again every DEFER_POLL_SECONDS, and written once it is done or
# after DEFER_PATIENCE_SECONDS whatever it does; meanwhile the thread serves the rest.
DEFER_POLL_SECONDS = 0.05
DEFER_PATIENCE_SECONDS = 10.0


@dataclass
class _Save:
    ref: AgentRef
    request: SaveRequest
    # A caller on an event loop gets an asyncio future, resolved on its loop; others a
    # concurrent one.
    loop: asyncio.AbstractEventLoop | None = None
    future: Future[SaveResult] | asyncio.Future[SaveResult] = field(default_factory=Future)


@dataclass
class _Call:
    work: Callable[[MemoryService], Any]
    future: Future[Any] = field(default_factory=Future)
    # A call reads what every acknowledged save wrote: the saves are mirrored first.
    # (Not for a call that decides itself what to mirror.) Tool calls' records alone do
    # not make a call mirror: no reader needs them, and each search (a recall tool
    # call) would otherwise commit the previous call's record first (1.5 ms a call).
    mirrors_first: bool = True


@dataclass
class _Wake:
    """Wakes the thread for work of its own (a tool call's record to mirror, the indexes
    to follow a reconcile): no call, so it does not mirror at once as a call would."""

    # The indexes take in what a reconcile changed now, not once the thread has been
    # idle a while: another program's write is followed by the daemon's in one burst,
    # and the lock is free long before that program (a script) writes again.
    follow: bool = False


Job = _Save | _Call | _Wake


def _resolve(outcomes: list[tuple[_Save, Outcome]]) -> None:
    """Set the outcomes of saves; runs on the loop of the callers that awaited them."""
    for job, outcome in outcomes:
        if job.future.done():  # the client went away and its handler was cancelled
            continue
        if isinstance(outcome, BaseException):
            job.future.set_exception(outcome)
        else:
            job.future.set_result(outcome)


def _fail(jobs: Sequence[Job], error: BaseException) -> None:
    """Fail every job of a batch not answered yet (the others keep their answer)."""
    _send([(job, error) for job in jobs if isinstance(job, _Save)])
    for job in jobs:
        if isinstance(job, _Call) and not job.future.done():
            job.future.set_exception(error)


def _reply(jobs: list[_Save], batch: SaveBatch, sent: set[int]) -> None:
    """Send every outcome the batch has now that was not sent yet."""
    ready = []
    for index, job in enumerate(jobs):
        outcome = batch.outcomes[index]
        if outcome is not None and index not in sent:
            sent.add(index)
            ready.append((job, outcome))
    _send(ready)


def _send(outcomes: list[tuple[_Save, Outcome]]) -> None:
    """Each outcome to its caller: one wake-up per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop | None, list[tuple[_Save, Outcome]]] = {}
    for job, outcome in outcomes:
        by_loop.setdefault(job.loop, []).append((job, outcome))
    for loop, group in by_loop.items():
        if loop is None:
            _resolve(group)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_resolve, group)


@dataclass
class _Group:
    """One agent's saves of a round, as one batch of the service's write path."""

    saving: Saving
    jobs: list[_Save]
    batch: SaveBatch
    sent: set[int] = field(default_factory=set)

    def write(self) -> None:
        """The durable append, then the answers at once."""
        self.saving.write_batch(self.batch)
        _reply(self.jobs, self.batch, self.sent)  # durable in MEMORY.md: acknowledged


@dataclass
class _Pace:
    """Which way the memory thread writes a round of several agents' groups: one after
    another itself, or side by side on the writer threads. It waits for the round
    either way; its time per save written is what bounds the saves a second, so each
    way's recent figures decide, and the way not chosen is tried now and then."""

    samples: dict[bool, deque[float]] = field(  # side by side -> seconds per save
        default_factory=lambda: {way: deque(maxlen=PACE_SAMPLES) for way in (False, True)}
    )
    tried_at: float = 0.0  # when the way not preferred was last tried (monotonic)

    def per_save(self, side_by_side: bool) -> float | None:
        """What a save has cost that way lately (None: not measured yet)."""
        samples = self.samples[side_by_side]
        return statistics.median(samples) if samples else None

    def side_by_side(self, now: float) -> bool:
        """How to write the next round, at ``now`` (monotonic)."""
        side, in_turn = self.per_save(True), self.per_save(False)
        if side is None or in_turn is None:
            self.tried_at = now  # both just measured: the next try a while from now
            return side is None  # each way measured once before any is preferred
        if now - self.tried_at >= PACE_TRY_SECONDS:
            self.tried_at = now
            return in_turn <= side
        return side < in_turn

    def took(self, side_by_side: bool, seconds: float, saves: int) -> None:
        """A round written that way took ``seconds`` for ``saves`` saves."""
        if saves > 0:
            self.samples[side_by_side].append(seconds / saves)


class MemoryWorker:
    def __init__(
        self,
        service: MemoryService,
        on_lagging: Callable[[str], None],
        on_mirrored: Callable[[], None] = lambda: None,
    ) -> None:
        self.service = service  # what the calls it runs for the socket API are given
        # Its own work uses two rooms: the write path, and the indexes that follow saves.
        self.saving = service.saving
        self.upkeep = service.upkeep
        self.on_lagging = on_lagging  # tells the sync watcher to look at this agent soon
        self.on_mirrored = on_mirrored  # tells the indexer thread there are rows to embed
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="oryxmem-memory", daemon=True)
        self._writers = ThreadPoolExecutor(WRITER_THREADS, thread_name_prefix="oryxmem-write")
        self._pace = _Pace()
        self._accepting = threading.Lock()  # no job is queued after the stop marker
        self._stopping = False
        self._indexes_behind = True  # until a catch-up finds nothing to do
        self._busy_since: float | None = None  # when the batch in hand began
        self._indexes_caught_up_at = time.monotonic()
        self._mirrored_at = 0.0  # when the last mirror began (monotonic)
        # When saves were last written (monotonic; None: none yet): the indexer puts the
        # vectors off while they stream in.
        self.last_save_at: float | None = None
        self._deferred: dict[str, tuple[float, list[_Save]]] = {}  # agent -> since, saves
        self._deferred_checked_at = 0.0

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
        """The thread runs and no job has held it for STUCK_SECONDS (a thread stuck on a
        system call answers nothing: better the watchdog has systemd restart us)."""
        return self._thread.is_alive() and self.busy_seconds <= STUCK_SECONDS

    @property
    def busy_seconds(self) -> float:
        """How long the job in hand has taken so far (0 when idle)."""
        busy = self._busy_since
        return 0.0 if busy is None else time.monotonic() - busy

    def _queue(self, job: Job) -> None:
        with self._accepting:
            if self._stopping:
                if not isinstance(job, _Wake):
                    job.future.set_exception(DaemonUnavailableError("the daemon is stopping"))
            else:
                self._jobs.put(job)

    def call(self, work: Callable[[MemoryService], Any]) -> Future[Any]:
        job = _Call(work)
        self._queue(job)
        return job.future

    def save(self, ref: AgentRef, request: SaveRequest) -> Future[SaveResult]:
        job = _Save(ref, request)
        self._queue(job)
        assert isinstance(job.future, Future)
        return job.future

    def record_tool(self, record: ToolRecord) -> None:
        """A tool call's record, written with the next mirror (within
        MIRROR_MAX_AGE_SECONDS); the caller does not wait for it."""
        if self.saving.queue_record(record):
            self._queue(_Wake())

    def save_on_loop(self, ref: AgentRef, request: SaveRequest) -> asyncio.Future[SaveResult]:
        """save() for a caller on the running event loop: await the result."""
        loop = asyncio.get_running_loop()
        job = _Save(ref, request, loop, loop.create_future())
        self._queue(job)
        assert isinstance(job.future, asyncio.Future)
        return job.future

    def flush(self) -> None:
        """Mirror every save acknowledged so far into the rows (as far as the database
        lets it: a locked one keeps them queued)."""
        self.call(lambda _: None).exception()

    def before_reconcile(self, agents: Collection[str]) -> set[str]:
        """Before the sync thread reconciles these agents: gives those to hold back, whose
        acknowledged saves are not in the rows yet.

        When someone else wrote the file of one of them since (an editor: a stale buffer
        to judge), the saves are mirrored first, so their history is in place. When
        their file is as these saves left it, nothing is mirrored for it: the next
        mirror (within MIRROR_MAX_AGE_SECONDS) brings their rows and agreed state, and
        an echo of our own appends costs no commit. Once stopping, the thread has
        mirrored everything on its way out."""
        wanted = set(agents)

        def held(_: MemoryService) -> set[str]:
            waiting = wanted.intersection(self.saving.unmirrored_agents)
            if any(self.saving.written_by_others(agent) for agent in waiting):
                self._mirror()
                waiting = wanted.intersection(self.saving.unmirrored_agents)
            return waiting

        job = _Call(held, mirrors_first=False)
        self._queue(job)
        if job.future.exception() is not None:
            return set()
        return set(job.future.result())

    def indexes_changed(self) -> None:
        """Rows changed behind the service's back (a reconcile): let the indexes follow."""
        self._indexes_behind = True
        self._queue(_Wake(follow=True))  # (a call would mirror the saves first)
        self.on_mirrored()

    # --- the thread -------------------------------------------------------------

    def _next_job(self) -> Job | None:
        """The next job; mirrors what is pending while the queue is idle or it grows old,
        lets the indexes catch up while there is nothing else to do (and at least every
        INDEX_MAX_LAG_SECONDS while calls keep coming), and writes put-off saves once
        their file is free."""
        while True:
            if (
                self._indexes_behind
                and time.monotonic() - self._indexes_caught_up_at > INDEX_MAX_LAG_SECONDS
            ):
                self._index_step()
            oldest = self.saving.unmirrored_since
            if oldest is not None:
                wait = self._mirror_due(oldest) - time.monotonic()
                if wait <= 0:
                    self._mirror()
                    continue
            elif self._indexes_behind:
                wait = INDEX_IDLE_SECONDS
            elif self._deferred:
                wait = DEFER_POLL_SECONDS
            else:
                return self._jobs.get()
            if self._deferred:
                wait = min(wait, DEFER_POLL_SECONDS)
            try:
                return self._jobs.get(timeout=wait)
            except queue.Empty:
                pass
            self._retry_deferred()
            if oldest is not None:
                self._mirror()
            elif self._indexes_behind:
                self._index_step()

    def _mirror_due(self, oldest: float) -> float:
        """When the saves written so far go into the rows (monotonic): once the oldest is
        MIRROR_MAX_AGE_SECONDS old, or once no job has come for MIRROR_IDLE_SECONDS if
        the last mirror is MIRROR_MIN_GAP_SECONDS ago; not before a failed mirror may
        be tried again."""
        now = time.monotonic()
        due = oldest + MIRROR_MAX_AGE_SECONDS
        if now - self._mirrored_at >= MIRROR_MIN_GAP_SECONDS:
            due = min(due, now + MIRROR_IDLE_SECONDS)
        return max(due, self.saving.mirror_not_before)

    def _run(self) -> None:
        while True:
            first = self._next_job()
            if first is None:
                self._retry_deferred(patience=0.0)  # stopping: write them now
                self._mirror()
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
            self._guarded(batch, partial(self._run_batch, batch))
            self._retry_deferred()

    def _guarded(self, jobs: Sequence[Job], work: Callable[[], None]) -> None:
        self._busy_since = time.monotonic()
        try:
            work()
        except Exception as error:  # fails the requests of this batch, not the thread
            log_failure(log, "a batch of the memory thread failed", error)
            _fail(jobs, error)
        finally:
            self._busy_since = None

    def _run_batch(self, batch: list[Job]) -> None:
        saves: dict[str, list[_Save]] = {}
        follow = False
        for job in batch:
            if isinstance(job, _Save):
                saves.setdefault(job.ref.agent, []).append(job)
            elif isinstance(job, _Call):
                if job.mirrors_first and self.saving.unmirrored_agents:
                    self._mirror()  # a reader sees every acknowledged save
                self._run_call(job)
            else:
                follow = follow or job.follow
        if saves:
            self._save_groups(self._not_put_off(list(saves.values())))
        elif follow and not self.saving.unmirrored_agents:  # (else the mirror's step)
            self._index_step()

    def _not_put_off(self, groups: list[list[_Save]]) -> list[list[_Save]]:
        """The groups to write now; the others wait (in order) while another program is
        writing their file: writing now would wait for it, holding up every other save."""
        ready = []
        for jobs in groups:
            agent = jobs[0].ref.agent
            if agent in self._deferred:
                self._deferred[agent][1].extend(jobs)  # behind the ones put off before
            elif self.saving.others_are_writing(jobs[0].ref):
                self._deferred[agent] = (time.monotonic(), jobs)
            else:
                ready.append(jobs)
        return ready

    def _retry_deferred(self, patience: float = DEFER_PATIENCE_SECONDS) -> None:
        """Write the put-off saves whose file is free now, or that waited ``patience``."""
        now = time.monotonic()
        recently = now - self._deferred_checked_at < DEFER_POLL_SECONDS
        if not self._deferred or (patience and recently):
            return
        self._deferred_checked_at = now
        ready = []
        for agent, (since, jobs) in list(self._deferred.items()):
            if now - since >= patience or not self.saving.others_are_writing(jobs[0].ref):
                del self._deferred[agent]
                ready.append(jobs)
        if ready:
            every = [job for jobs in ready for job in jobs]
            self._guarded(every, partial(self._save_groups, ready))

    def _run_call(self, job: _Call) -> None:
        if not job.future.set_running_or_notify_cancel():
            return  # its caller went away (a client that hung up) before it began
        try:
            job.future.set_result(job.work(self.service))
        except OryxError as error:
            job.future.set_exception(error)
        except Exception as error:  # reported to the caller as internal_error, and logged
            log_failure(log, "memory call failed", error)
            job.future.set_exception(error)

    def _mirror(self) -> None:
        if self.saving.unmirrored_since is None:
            return
        self._mirrored_at = time.monotonic()
        shared = self.saving.shared
        with brief_wait(shared.db, LOCKED_WAIT_MS), brief_wait(shared.index_db, LOCKED_WAIT_MS):
            lagging = self.saving.mirror_saves(indexes_follow=True)
        for agent in lagging:
            self.on_lagging(agent)  # the rows lag behind the file: reconcile soon
        self._indexes_behind = True
        self.on_mirrored()

    def _index_step(self) -> None:
        try:
            with brief_wait(self.saving.shared.index_db, LOCKED_WAIT_MS):
                self.upkeep.follow_saves()  # not a backlog: that is the indexer's
                self._indexes_behind = not self.upkeep.words_caught_up()
        except Exception as error:  # derived: retried later, never in the way of a save
            if not is_locked(error):
                log_failure(log, "catching the indexes up failed; will retry", error)
        self._indexes_caught_up_at = time.monotonic()

    # --- saves ------------------------------------------------------------------

    def _save_groups(self, groups: list[list[_Save]]) -> None:
        """Each agent's group is one batch: prepared here, written (here one after
        another, or on the writer threads side by side: _Pace), each acknowledged as
        soon as it is durable, then finished here (mirror queued, or the saves kept
        while MEMORY.md is conflicted)."""
        self.last_save_at = time.monotonic()
        prepared = []
        for jobs in groups:
            batch = self.saving.prepare_batch(jobs[0].ref, [job.request for job in jobs])
            group = _Group(self.saving, jobs, batch)
            _reply(jobs, batch, group.sent)  # the ones refused up front
            if batch.prepared:
                prepared.append(group)
        if len(prepared) > 1:
            began = time.monotonic()
            side_by_side = self._pace.side_by_side(began)
            if side_by_side:
                for done in [self._writers.submit(group.write) for group in prepared]:
                    done.result()  # write() keeps its errors in the batch
            else:
                for group in prepared:
                    group.write()
            saves = sum(len(group.batch.prepared) for group in prepared)
            self._pace.took(side_by_side, time.monotonic() - began, saves)
        elif prepared:
            prepared[0].write()
        for group in prepared:
            self.saving.finish_batch(group.batch)
            _reply(group.jobs, group.batch, group.sent)
