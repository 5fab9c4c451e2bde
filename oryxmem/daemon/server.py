"""``oryxmem daemon``: the sync engine and the memory API in one foreground process.

One per workspace (a lock in .oryxos/run/). systemd-friendly: READY=1 once the
first reconcile is done and the socket serves, STATUS= lines, WATCHDOG=1 only
while the watcher and the memory thread live, STOPPING=1; socket activation.
SIGTERM and SIGINT stop accepting, let in-flight requests finish, and exit 0.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

from oryxmem import __version__
from oryxmem.config import Config
from oryxmem.daemon import api, sockets
from oryxmem.daemon.background import Background
from oryxmem.daemon.gitsync import GitSyncThread
from oryxmem.daemon.httpserver import ApiServer
from oryxmem.daemon.indexer import Indexer
from oryxmem.daemon.notify import notify, watchdog_interval
from oryxmem.daemon.readers import Readers
from oryxmem.daemon.reload import CHECK_SECONDS, ConfigFollower
from oryxmem.daemon.worker import MemoryWorker
from oryxmem.errors import DaemonAlreadyRunningError
from oryxmem.fileio import open_regular, raise_open_file_limit
from oryxmem.heap import keep_startup_objects, share_arenas
from oryxmem.registry import BACKENDS, backend_work
from oryxmem.service import MemoryService
from oryxmem.store.db import connect
from oryxmem.store.indexdb import connect_index
from oryxmem.sync.engine import AgentReport
from oryxmem.sync.gitmerge import ConflictTeller
from oryxmem.sync.watcher import SyncWatcher
from oryxmem.visible import revealed_text as visible_line
from oryxmem.workspace import Workspace, socket_path

log = logging.getLogger("oryxmem.daemon")
DRAIN_SECONDS = 10.0
SWITCH_INTERVAL_SECONDS = 0.001  # how often a busy thread hands the interpreter on


class Daemon:
    def __init__(self, workspace: Workspace, config: Config, idle_exit_seconds: int = 0) -> None:
        """``idle_exit_seconds``: stop after this long without a request (0: never), as a
        daemon a command started in the background does."""
        self.workspace = workspace
        self.config = config
        self.idle_exit_seconds = idle_exit_seconds
        self.started = time.time()
        self.last_request = time.monotonic()
        self.socket_path: Path | None = None
        self._lock_fd: int | None = None
        self.watcher: SyncWatcher | None = None
        self.worker: MemoryWorker | None = None
        self.indexer: Indexer | None = None
        self.backend_work: Background | None = None  # what the backend runs beside (mem0)
        self.readers: Readers | None = None
        self.git_sync: GitSyncThread | None = None  # only with sync.git.remote
        self.follower = ConfigFollower(workspace.config_path, config)
        self.conflicts = ConflictTeller(workspace.os_dir)

    # --- one daemon per workspace ---------------------------------------------------

    def _take_workspace_lock(self) -> None:
        path = self.workspace.run_dir / "daemon.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_regular(path, os.O_RDWR | os.O_CREAT, 0o600, one_link=True)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise DaemonAlreadyRunningError(
                f"a daemon (pid {holder}) already serves {self.workspace.root}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    # --- life -------------------------------------------------------------------------

    def run(self) -> int:
        self._take_workspace_lock()
        share_arenas()  # before any thread of ours starts
        # A thread busy in Python (the indexer stemming a backlog) lets the others have
        # the interpreter only this often: at CPython's 5 ms, every save behind it waited
        # up to 5 ms at each of its hops between threads.
        sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
        BACKENDS.load(self.config.backend)  # one that cannot be loaded stops us here, in one line
        raise_open_file_limit()  # a lock file (and a MEMORY.md) stays open per agent
        # The modules and their caches live as long as we do: out of the collector's way,
        # before any memory is read (what that builds, it may drop; it is collected).
        frozen = keep_startup_objects()
        log.debug("%d objects of the start-up kept out of collections", frozen)
        activated = sockets.from_systemd()
        if activated is not None:
            sock = activated
            self.socket_path = Path(sock.getsockname())
        else:
            self.socket_path = socket_path(self.workspace, self.config)
            sock = sockets.bind(self.socket_path)
        connect(self.workspace.db_path).close()  # create and migrate it once, before the threads
        connect_index(self.workspace.db_path).close()  # and the index file beside it
        # The memory thread's: it catches the indexes up when asked (api.ranked), never embeds.
        service = MemoryService(self.workspace, self.config, in_daemon=True)
        self.watcher = SyncWatcher(
            self.workspace, files=service.files, config=self.config, on_report=self._on_report
        )
        self.worker = MemoryWorker(service, self.watcher.schedule, self._mirrored)
        worker = self.worker
        self.indexer = Indexer(
            MemoryService(self.workspace, self.config, files=service.files, in_daemon=True),
            last_save=lambda: worker.last_save_at,
        )
        work = backend_work(self.config.backend)
        if work is not None:
            own = MemoryService(self.workspace, self.config, files=service.files)
            self.backend_work = work(own, self.worker)
        self.readers = Readers(self.workspace, self.config, service.files)
        self.watcher.before_reconcile = self.worker.before_reconcile
        self.watcher.after_reconcile = self.worker.indexes_changed
        notify("STATUS=catching up with changes made while stopped")
        recovery = MemoryService(self.workspace, self.config, files=service.files)
        recovery.recover_answered()  # before the catch-up: it puts back what they lost
        recovery.close()
        self.watcher.start()
        self.worker.start()
        self.indexer.start()
        self.watcher.ready.wait()
        if self.backend_work is not None:
            self.backend_work.start()
        if self.config.get("sync.git.remote"):
            self.git_sync = GitSyncThread(self.workspace, service.files, self.config)
            self.git_sync.start()
        else:
            _say_if_the_driver_is_missing(self.workspace)
        try:
            uvloop.run(self._serve(sock))
        finally:
            if self.git_sync is not None:
                self.git_sync.stop()
            self.readers.stop()
            if self.backend_work is not None:
                self.backend_work.stop()
            self.indexer.stop()
            self.watcher.stop()  # before the worker: it closes the stores the threads use
            self.worker.stop()  # requests have drained; finishes queued saves first
            if activated is None and self.socket_path.exists():
                self.socket_path.unlink()
            sock.close()
        log.info("stopped")
        return 0

    def _backend_health(self) -> dict[str, Any]:
        work = self.backend_work
        if work is None:
            return {}
        return {
            self.config.backend: {
                "alive": work.alive,
                "passes": work.steps,
                "last_error": work.last_error,
            }
        }

    def _mirrored(self) -> None:
        """Saves reached the rows: the derived sides follow."""
        if self.indexer is not None:
            self.indexer.wake()
        if self.backend_work is not None:
            self.backend_work.wake()

    async def _serve(self, sock: socket.socket) -> None:
        assert self.worker is not None and self.watcher is not None and self.readers is not None
        client_timeout = float(self.config.get("daemon.client_timeout_seconds"))
        application = api.Api(self.worker, self.readers, self.health)
        server = ApiServer(
            application, client_timeout, api.MAX_BODY_BYTES, os.getuid(), self._answered
        )
        await server.start(sock, sockets.LISTEN_BACKLOG)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        mode = "polling" if self.watcher.polling else "inotify"
        log.info("serving %s on %s (watching by %s)", self.workspace.root, self.socket_path, mode)
        notify(f"READY=1\nSTATUS=serving on {self.socket_path}\nMAINPID={os.getpid()}")
        pinger = asyncio.create_task(self._watchdog(stop))
        follower = asyncio.create_task(self._follow_config(stop))
        idler = asyncio.create_task(self._stop_when_idle(stop))
        await stop.wait()
        log.info("stopping: finishing requests in flight")
        notify("STOPPING=1")
        pinger.cancel()
        follower.cancel()
        idler.cancel()
        await server.stop(DRAIN_SECONDS)

    def _answered(self) -> None:
        self.last_request = time.monotonic()

    async def _stop_when_idle(self, stop: asyncio.Event) -> None:
        """A daemon started in the background goes once nobody has asked it anything for
        idle_exit_seconds; saves it took are written before it goes, as at SIGTERM."""
        if self.idle_exit_seconds <= 0:
            return
        while not stop.is_set():
            await asyncio.sleep(min(10.0, self.idle_exit_seconds / 4))
            idle = time.monotonic() - self.last_request
            if idle >= self.idle_exit_seconds:
                log.info("no request for %.0f s: stopping (started in the background)", idle)
                stop.set()

    async def _follow_config(self, stop: asyncio.Event) -> None:
        """config.toml read again within a second of a change (reload.py)."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            await asyncio.sleep(CHECK_SECONDS)
            try:
                await loop.run_in_executor(None, self.follower.check)
            except OSError as error:  # the file unreadable for a moment: the next look
                log.warning("config.toml could not be read: %s", error)

    async def _watchdog(self, stop: asyncio.Event) -> None:
        """WATCHDOG=1 only while the watcher and the memory thread are alive."""
        interval = watchdog_interval()
        if interval is None:
            return
        while not stop.is_set():
            if (
                self.watcher is not None
                and self.watcher.alive
                and self.worker
                and self.worker.alive
                and self.indexer
                and self.indexer.alive
            ):
                notify("WATCHDOG=1")
            else:
                log.error("a thread of the daemon died; not pinging the watchdog")
            await asyncio.sleep(interval)

    def _on_report(self, report: AgentReport) -> None:
        _log_report(report)
        for line in self.conflicts.new_lines():  # a merge just wrote the file: say so once
            log.warning("git merge: %s", visible_line(line))

    def health(self) -> dict[str, Any]:
        """What the daemon knows without the database (the API adds the sync summary)."""
        worker = self.worker
        return {
            "status": "ok" if worker is None or worker.alive else "memory thread stuck",
            "version": __version__,
            "workspace": str(self.workspace.root),
            "socket": str(self.socket_path),
            "pid": os.getpid(),
            "uptime_seconds": round(time.time() - self.started, 1),
            **_watcher_health(self.watcher),
            **_worker_health(worker),
            "indexer_alive": bool(self.indexer and self.indexer.alive),
            "index_rates": self.indexer.upkeep.rates() if self.indexer else {},
            "last_index_error": self.indexer.last_error if self.indexer else None,
            "config": self.follower.health(),
            "git": self.git_sync.health() if self.git_sync else None,
            **self._backend_health(),
        }


def _watcher_health(watcher: SyncWatcher | None) -> dict[str, Any]:
    if watcher is None:  # not started yet
        return {
            "watching": "inotify",
            "watcher_alive": False,
            "reconciles": 0,
            "event_overflows": 0,
            "last_sync_error": None,
        }
    return {
        "watching": "polling" if watcher.polling else "inotify",
        "watcher_alive": watcher.alive,
        "reconciles": watcher.reconciles,
        "event_overflows": watcher.overflows,
        "last_sync_error": watcher.last_error,
    }


def _worker_health(worker: MemoryWorker | None) -> dict[str, Any]:
    service = worker.service if worker else None
    return {
        "saves": service.saves if service else 0,
        "save_batches": service.batches if service else 0,
        "mirror_commits": service.mirrors if service else 0,
        "memory_thread_alive": bool(worker and worker.alive),
        "memory_busy_seconds": round(worker.busy_seconds, 1) if worker else 0.0,
    }


def _say_if_the_driver_is_missing(workspace: Workspace) -> None:
    """A clone whose .gitattributes asks for merge=oryxmem but whose config lacks the
    driver would merge memory as plain text: said once, at start."""
    from oryxmem.sync.gitsetup import driver_missing

    missing = driver_missing(workspace)
    if missing:
        log.warning("git: %s", missing)


def _log_report(report: AgentReport) -> None:
    if report.status in ("conflicted", "unreadable"):
        log.warning("%s", report.summary())
