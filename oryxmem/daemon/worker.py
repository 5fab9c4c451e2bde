"""The daemon's memory thread: every call runs here, and saves that arrive together share.

The HTTP handlers only parse and reply. Work goes to this one thread, which
owns a MemoryService and its SQLite connection. When it wakes it takes every
job queued so far; the saves among them are grouped per agent, and each group
is one append to MEMORY.md (one fsync) and one transaction for the rows: group
commit, so throughput grows with the number of clients.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from oryxmem.errors import MemoryFileConflictedError, OryxError
from oryxmem.fileio import ConcurrentChange
from oryxmem.service import MemoryService, SaveResult
from oryxmem.store.format import Entry, NewEntry
from oryxmem.store.markdown import MarkdownMemoryStore, StatKey
from oryxmem.sync.engine import SyncEngine
from oryxmem.workspace import AgentRef

log = logging.getLogger("oryxmem.daemon")
MAX_BATCH = 512


@dataclass
class _Save:
    ref: AgentRef
    content: str
    scope: str
    source: str
    future: Future[SaveResult] = field(default_factory=Future)


@dataclass
class _Call:
    work: Callable[[MemoryService], Any]
    future: Future[Any] = field(default_factory=Future)


class MemoryWorker:
    def __init__(self, service: MemoryService, on_saved: Callable[[str], None]) -> None:
        self.service = service
        self.engine = SyncEngine(service)
        self.on_saved = on_saved  # tells the sync watcher to look at this agent soon
        self._jobs: queue.Queue[_Save | _Call | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="oryxmem-memory", daemon=True)
        self.batches = 0
        self.saves = 0

    def start(self) -> None:
        self._thread.start()
        self.call(lambda service: service.db)  # open it on this thread, before any request

    def stop(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)
        self.service.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def call(self, work: Callable[[MemoryService], Any]) -> Future[Any]:
        job = _Call(work)
        self._jobs.put(job)
        return job.future

    def save(self, ref: AgentRef, content: str, scope: str, source: str) -> Future[SaveResult]:
        job = _Save(ref, content, scope, source)
        self._jobs.put(job)
        return job.future

    # --- the thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            first = self._jobs.get()
            if first is None:
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
                    self._run_call(job)
            for agent, group in saves.items():
                self._save_group(agent, group)

    @staticmethod
    def _settle(future: Future[Any], work: Callable[[], Any]) -> None:
        try:
            future.set_result(work())
        except OryxError as error:
            future.set_exception(error)
        except Exception as error:  # reported to the caller as internal_error, and logged
            log.exception("memory call failed")
            future.set_exception(error)

    def _run_call(self, job: _Call) -> None:
        self._settle(job.future, lambda: job.work(self.service))

    def _save_group(self, agent: str, group: list[_Save]) -> None:
        store = self.service.store(group[0].ref)
        if not isinstance(store, MarkdownMemoryStore):
            for job in group:
                self._settle(
                    job.future,
                    lambda j=job: self.service.save(j.ref.requested, j.content, j.scope),  # type: ignore[misc]
                )
            return
        ready: list[tuple[_Save, Entry]] = []
        for job in group:
            try:
                ready.append((job, store.prepare(job.content, job.scope)))
            except OryxError as error:
                job.future.set_exception(error)
        if not ready:
            return
        try:
            entries, before, after = self._write(store, ready)
        except MemoryFileConflictedError:
            for job, _ in ready:
                self._settle(
                    job.future,
                    lambda j=job: self.service.save(  # type: ignore[misc]
                        j.ref.requested, j.content, j.scope, source=j.source
                    ),
                )
            return
        except Exception as error:
            if not isinstance(error, OryxError):
                log.exception("saving to %s failed", agent or "(global)")
            for job, _ in ready:
                job.future.set_exception(error)
            return
        self.batches += 1
        self.saves += len(entries)
        # Durable in MEMORY.md: acknowledge now. The rows are derived; mirroring them
        # after the replies go out lets the clients send their next saves meanwhile.
        # This thread finishes the mirror before it takes any other job.
        for (job, _), entry in zip(ready, entries, strict=True):
            job.future.set_result(SaveResult(job.ref, entry))
        self._mirror(agent, entries, before, after, ready[0][0].source)

    def _write(
        self, store: MarkdownMemoryStore, ready: list[tuple[_Save, Entry]]
    ) -> tuple[list[Entry], StatKey | None, StatKey | None]:
        """One durable write of the whole group: (entries, stat before, stat after)."""
        additions = [NewEntry(e.scope, e.ts, e.content) for _, e in ready]
        with store.lock.hold():
            for _ in range(5):
                _, before = store.current_locked()
                try:
                    entries = store.edit_locked(additions, ())
                    break
                except ConcurrentChange:
                    store.forget()  # an editor wrote meanwhile: read it again
            else:
                raise ConcurrentChange(store.path)
            _, after = store.current_locked()
        return entries, before, after

    def _mirror(
        self,
        agent: str,
        entries: list[Entry],
        before: StatKey | None,
        after: StatKey | None,
        source: str,
    ) -> None:
        """The saved entries into the rows at once when the agent was in sync; else sync soon."""
        mirrored = False
        if after is not None:
            try:
                mirrored = self.engine.record_saves(agent, entries, before, after, source)
            except Exception:  # the file has them; sync mirrors them. The ack stands.
                log.exception("mirroring saves of %s failed; sync will catch up", agent)
        if not mirrored:
            self.on_saved(agent)  # the rows lag behind the file: reconcile soon
