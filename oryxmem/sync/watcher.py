"""Turns hints into "reconcile this agent soon": file events, database writes, a rescan.

- watchdog events under ``.oryxos/agents/`` and ``.oryxos/memory/`` (a file
  created, moved, deleted, or closed after a write), debounced per agent;
- a write to the database by another process: ``PRAGMA data_version`` moves
  (checked 10 times a second, a counter read, and at once when a program closes
  the database's WAL after writing it: the sqlite3 shell, a script); the
  ``memory_changes`` rows then say which agents;
- catch-up at start, and a jittered periodic rescan, because inotify drops
  events under load; when the kernel says it did (its event queue overflowed),
  a rescan at once.

The engine decides; this only schedules. It runs in one worker thread with its
own database connection.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from oryxmem.clock import clock_for
from oryxmem.config import Config
from oryxmem.errors import log_failure
from oryxmem.fileio import file_stat
from oryxmem.store import rows
from oryxmem.store.base import StoreLimits
from oryxmem.store.db import connect, is_locked
from oryxmem.store.markdown import MarkdownFiles
from oryxmem.sync.engine import AgentReport, SyncEngine
from oryxmem.workspace import GLOBAL_AGENT, Workspace

log = logging.getLogger("oryxmem.sync")
T = TypeVar("T")

DEBOUNCE_SECONDS = 0.03  # quiet time after an event before reconciling
MAX_DELAY_SECONDS = 0.3  # a stream of events waits no longer than this
RETRY_SECONDS = 0.5  # after "git is busy" or a file that kept changing
UNREADABLE_RETRY_SECONDS = 2.0  # a file oryxmem may not read (its mode), looked at again
# PRAGMA data_version reads a counter in shared memory: checking it 10 times a second
# costs little (idle CPU stays well under 1 %), and unlike watching the WAL file it is
# not woken by our own commits.
DB_POLL_SECONDS = 0.1
# What sync needs to hear about; opens, reads and every single write are left out, so the
# kernel does not even send them (our own appends and reads would otherwise wake us).
WATCHED_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileClosedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
]
RESCAN_SECONDS = 30.0
# How often the watched folders are looked at: one replaced (mv agents a.old; cp -a
# a.old agents) takes the kernel's watches with it, and is watched anew.
FOLDER_CHECK_SECONDS = 1.0
# watchdog rebuilds its watches when the kernel's inotify queue overflows, and says so
# only in a log record of these loggers; hearing it, we rescan at once.
OVERFLOW_LOGGERS = ("watchdog.observers.inotify_c", "watchdog.observers.inotify")


class _OverflowHook(logging.Handler):
    def __init__(self, watcher: SyncWatcher) -> None:
        super().__init__(logging.WARNING)
        self.watcher = watcher

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in str(record.msg).lower():
            self.watcher.rescan_soon("the kernel's inotify queue overflowed")


def agent_for_path(workspace: Workspace, path: str) -> str | None:
    """Which agent's memory an event path touches, if any."""
    target = Path(path)
    try:
        parts = target.relative_to(workspace.agents_dir).parts
    except ValueError:
        parts = ()
    if parts:
        # agents/<name> itself, or a file directly in it (MEMORY.md, its temp files);
        # deeper paths (skills/...) are not memory.
        return parts[0] if len(parts) <= 2 else None
    if target == workspace.global_memory_dir or target.parent == workspace.global_memory_dir:
        return GLOBAL_AGENT
    return None


def _text(path: str | bytes) -> str:
    return path.decode() if isinstance(path, bytes) else path


class _Events(FileSystemEventHandler):
    def __init__(self, watcher: SyncWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        agents = set()
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                agents.add(agent_for_path(self.watcher.workspace, _text(raw)))
        for agent in agents:  # a rename within an agent's folder names it twice
            if agent is not None and not self.watcher.is_own_write(agent):
                self.watcher.schedule(agent)

    def on_events_lost(self, event: FileSystemEvent) -> None:
        """watchdog says events were lost once it has rebuilt its watches after the
        kernel's queue overflowed: an edit made while it rebuilt them made no event and
        came after the rescan its log record asked for, so every agent is looked at
        again. (A watchdog without this event leaves that rescan alone.)"""
        self.watcher.rescan_soon("file events were lost while the watches were rebuilt")


class _DatabaseClosed(FileSystemEventHandler):
    """The database (or its WAL) closed after a write: by another program, since this
    process's connections stay open. The database is looked at at once."""

    def __init__(self, watcher: SyncWatcher) -> None:
        self.watcher = watcher
        db = watcher.workspace.db_path
        self.files = {str(db), f"{db}-wal"}

    def on_closed(self, event: FileSystemEvent) -> None:
        if _text(event.src_path) in self.files:
            self.watcher.look_at_database_now()


@dataclass
class _Clocks:
    """When the watcher's periodic work is next due (time.monotonic), and the database's
    data_version when it last looked."""

    data_version: int
    next_rescan: float
    next_poll: float
    next_folder_check: float


class SyncWatcher:
    """Keeps a workspace's files and table in sync until stopped."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        rescan_seconds: float = RESCAN_SECONDS,
        on_report: Callable[[AgentReport], None] | None = None,
        force_polling: bool = False,
        files: MarkdownFiles | None = None,
        config: Config | None = None,
    ) -> None:
        """``files`` are the stores shared with the process's other threads (the daemon's
        memory thread); without them the watcher has its own."""
        self.workspace = workspace
        config = config or Config.load(workspace.config_path)
        self._owns_files = files is None
        self.files = files or MarkdownFiles(
            workspace,
            clock=clock_for(lambda: config.timezone),
            limits=StoreLimits.of(config),
        )
        self.db = connect(workspace.db_path)  # this thread's own connection
        self.engine = SyncEngine(workspace, self.db, self.files, config)
        self.rescan_seconds = rescan_seconds
        self.on_report = on_report
        self.force_polling = force_polling
        self.observer: BaseObserver | None = None
        self.polling = False
        self._due: dict[str, tuple[float, float]] = {}  # agent -> (due at, first hint at)
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()  # set once the catch-up pass is done
        self.last_error: str | None = None
        self.reconciles = 0
        self.overflows = 0
        self._rescan_now = False
        self._poll_now = False
        self._watched: list[tuple[int, int] | None] = []
        self._deferred: set[str] = set()  # agents whose reconcile waits (git is busy)
        self._overflow_hook = _OverflowHook(self)
        # Called before each round of reconciles with the agents due: the daemon mirrors
        # the saves it has acknowledged to those someone else wrote since, so their
        # history is there to judge a stale editor buffer by, and names the agents
        # whose saves are not in the rows yet: those wait.
        self.before_reconcile: Callable[[Collection[str]], Collection[str]] = lambda _: ()
        # Called after a round that changed rows: the daemon's indexes catch up.
        self.after_reconcile: Callable[[], None] = lambda: None

    # --- hints ------------------------------------------------------------------

    def is_own_write(self, agent: str) -> bool:
        """Is this the file event of a write this process just made (a rewrite, a new
        file, its directory)? Only when the file still has exactly the stat that write
        left: any other writer changes it. Skipping these keeps a save from waking the
        sync thread (whose reconcile would hold the file's lock)."""
        store = self.files.get(agent)
        written = store.written_key
        return written is not None and file_stat(store.path) == written

    def rescan_soon(self, why: str) -> None:
        """Check every agent now: events were lost."""
        with self._lock:
            if self._rescan_now:
                return  # one loss, told by more than one logger
            log.warning("%s: rescanning every agent", why)
            self.overflows += 1
            self._rescan_now = True
            self._lock.notify()

    def look_at_database_now(self) -> None:
        """Ask the database at once whether another connection committed (a program
        that wrote it has closed it): the daemon follows its write right away, and its
        own writes are over long before that program (a script) writes again."""
        with self._lock:
            self._poll_now = True
            self._lock.notify()

    def schedule(self, agent: str, delay: float = DEBOUNCE_SECONDS) -> None:
        now = time.monotonic()
        with self._lock:
            _, first = self._due.get(agent, (0.0, now))
            self._due[agent] = (min(now + delay, first + MAX_DELAY_SECONDS), first)
            self._lock.notify()

    # --- life -------------------------------------------------------------------

    def start(self) -> None:
        for folder in (self.workspace.agents_dir, self.workspace.global_memory_dir):
            folder.mkdir(parents=True, exist_ok=True)
        for name in OVERFLOW_LOGGERS:
            logging.getLogger(name).addHandler(self._overflow_hook)
        self.observer = self._start_observer()
        self._watched = self._folder_ids()
        self._thread = threading.Thread(target=self._run, name="oryxmem-sync", daemon=True)
        self._thread.start()

    def _start_observer(self) -> BaseObserver:
        handler = _Events(self)
        kinds: list[Callable[[], BaseObserver]] = [PollingObserver]
        if not self.force_polling:
            kinds.insert(0, Observer)  # inotify; polling when the kernel's limits are hit
        for kind in kinds:
            observer = kind()
            for folder, recursive in (
                (self.workspace.agents_dir, True),
                (self.workspace.global_memory_dir, False),
            ):
                observer.schedule(
                    handler, str(folder), recursive=recursive, event_filter=WATCHED_EVENTS
                )
            observer.schedule(
                _DatabaseClosed(self),
                str(self.workspace.db_path.parent),
                recursive=False,
                event_filter=[FileClosedEvent],
            )
            try:
                observer.start()
            except OSError as error:
                if error.errno not in (errno.ENOSPC, errno.EMFILE):
                    raise
                log.warning("inotify limit reached (%s); watching by polling instead", error)
                continue
            self.polling = kind is PollingObserver
            return observer
        raise RuntimeError("no file watcher could start")

    def _folder_ids(self) -> list[tuple[int, int] | None]:
        """Which directories the watched paths name now (None: none there)."""
        ids: list[tuple[int, int] | None] = []
        for folder in (self.workspace.agents_dir, self.workspace.global_memory_dir):
            try:
                info = os.stat(folder)
                ids.append((info.st_dev, info.st_ino))
            except OSError:
                ids.append(None)
        return ids

    def _watch_again_if_replaced(self) -> list[bool]:
        """A watched folder replaced or recreated: watch the new one, and rescan, since
        what changed in between made no event here. [True] when it was."""
        now = self._folder_ids()
        if now == self._watched or None in now:
            return []
        log.warning("a watched folder was replaced; watching the new one")
        old, self.observer = self.observer, self._start_observer()
        self._watched = now
        if old is not None:
            old.stop()
            old.join(timeout=5)
        self.rescan_soon("a watched folder was replaced")
        return [True]

    def stop(self) -> None:
        for name in OVERFLOW_LOGGERS:
            logging.getLogger(name).removeHandler(self._overflow_hook)
        self._stop.set()
        with self._lock:
            self._lock.notify()
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=5)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.db.close()
        if self._owns_files:
            self.files.close()

    @property
    def alive(self) -> bool:
        observer_ok = self.observer is not None and self.observer.is_alive()
        return observer_ok and self._thread is not None and self._thread.is_alive()

    # --- the worker ---------------------------------------------------------------

    def _run(self) -> None:
        # The database check's baseline comes first: a program's commit made while the
        # catch-up runs differs from it, and is followed at the loop's first check.
        data_version = self._data_version()
        # Catch up with what changed while we were down: only what is due. The change log
        # is pruned once the daemon serves (a long one, left by an import, takes seconds).
        catch_up = partial(self.engine.reconcile_all, only_due=True, prune=False)
        for report in self._pass(catch_up):
            if report.status == "unreadable":
                self.schedule(report.agent, UNREADABLE_RETRY_SECONDS)
        self.ready.set()
        self._pass(self._prune)
        clocks = _Clocks(
            data_version=data_version,
            next_rescan=self._next_rescan(),
            next_poll=time.monotonic(),  # at once: what committed during the catch-up
            next_folder_check=time.monotonic() + FOLDER_CHECK_SECONDS,
        )
        while not self._stop.is_set():
            now, due = self._wait_for_due(clocks)
            due += self._periodic_work(clocks, now)
            held = self.before_reconcile(due) if due else ()
            for agent in held:
                if agent in due:  # judged once its saves' history is in the rows
                    self.schedule(agent, RETRY_SECONDS)
            ready = sorted(set(due) - set(held))
            if any([self._reconcile(agent) for agent in ready]):
                self.after_reconcile()

    def _wait_for_due(self, clocks: _Clocks) -> tuple[float, list[str]]:
        """Wait for the first agent due or the next periodic work; (now, the agents due)."""
        with self._lock:
            if self._rescan_now:
                self._rescan_now, clocks.next_rescan = False, time.monotonic()
            if self._poll_now:
                self._poll_now, clocks.next_poll = False, time.monotonic()
            wake = min(
                [clocks.next_rescan, clocks.next_poll, *(at for at, _ in self._due.values())]
            )
            if wake > time.monotonic():
                self._lock.wait(timeout=wake - time.monotonic())
            now = time.monotonic()
            due = [agent for agent, (at, _) in self._due.items() if at <= now]
            for agent in due:
                del self._due[agent]
        return now, due

    def _periodic_work(self, clocks: _Clocks, now: float) -> list[str]:
        """What is done every so often: the folders looked at again, the database asked
        whether another connection committed, the rescan; gives the agents it found due."""
        due: list[str] = []
        if now >= clocks.next_folder_check:
            clocks.next_folder_check = now + FOLDER_CHECK_SECONDS
            self._pass(self._watch_again_if_replaced)
            due += self._pass(self.files.merge_orphans)  # editors' text, taken back in
        if now >= clocks.next_poll:
            clocks.next_poll = now + DB_POLL_SECONDS
            version = self._data_version()
            if version != clocks.data_version:  # another connection committed
                clocks.data_version = version
                due += self._pass(lambda: rows.agents_with_pending_changes(self.db))
        if now >= clocks.next_rescan:
            clocks.next_rescan = self._next_rescan()
            due += self._pass(self.engine.due_agents)
            self._pass(self._prune)
        return due

    def _reconcile(self, agent: str) -> bool:
        """Reconcile one agent; True when it changed rows."""
        reports = self._pass(lambda: [self.engine.reconcile_agent(agent)])
        if not reports or reports[0].status == "deferred":
            self.schedule(agent, RETRY_SECONDS)
        elif reports[0].status == "unreadable":  # a mode fixed makes no event we hear
            self.schedule(agent, UNREADABLE_RETRY_SECONDS)
        if reports and reports[0].status == "deferred":
            if agent not in self._deferred:  # said once, not at every retry
                self._deferred.add(agent)
                log.info("%s", reports[0].summary())
        else:
            self._deferred.discard(agent)
        self.reconciles += 1
        if reports and self.on_report is not None:
            self.on_report(reports[0])
        return bool(reports) and (reports[0].drift or bool(reports[0].quarantined))

    def _pass(self, work: Callable[[], list[T]]) -> list[T]:
        """Run one piece of work; an error is logged and retried later, never fatal."""
        try:
            result = work()
        except Exception as error:  # the watcher must outlive any one bad pass
            problem = f"{type(error).__name__}: {error}"
            if not is_locked(error):
                log_failure(log, "sync pass failed; will retry", error)
            elif problem != self.last_error:  # another program holds the database
                log.info("sync waits: %s", error)
            self.last_error = problem
            return []
        self.last_error = None
        return result

    def _prune(self) -> list[int]:
        return [self.engine.prune_changes()]

    def _data_version(self) -> int:
        value = self.db.conn.execute("PRAGMA data_version").fetchone()[0]
        return int(value)

    def _next_rescan(self) -> float:
        return time.monotonic() + self.rescan_seconds * random.uniform(0.8, 1.2)
