"""The daemon's indexer thread: the slow derived indexes (the vectors, the episodes of
past sessions), off the save path.

It has its own connection and runs MemoryService.embed_step and episodes_step until
nothing is left:
each step embeds the rows of one batch with no lock held, then takes them in with
a short write. It runs at a lower priority (nice 10, inherited by the threads that
embed for it), so the memory thread's saves and searches go first on a busy
machine. It is woken when saves were mirrored, a reconcile changed rows or a message
was added to a session, and looks on its own every RESCAN_SECONDS.
"""

from __future__ import annotations

import logging
import os
import threading

from oryxmem.errors import log_failure
from oryxmem.service import MemoryService
from oryxmem.store.db import is_locked

log = logging.getLogger("oryxmem.daemon")
RESCAN_SECONDS = 5.0
NICENESS = 10
RETRY_SECONDS = 2.0  # after a failed step (the database busy, the disk full)


class Indexer:
    def __init__(self, service: MemoryService) -> None:
        self.service = service
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oryxmem-indexer", daemon=True)
        self.taken = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.service.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        except OSError as error:  # not allowed here: it runs at the usual priority
            log.info("the indexer keeps its priority: %s", error)
        while not self._stop.is_set():
            try:
                taken = self.service.embed_step() if self.service.vector_index() else 0
                taken += self.service.episodes_step()
                self.last_error = None
            except Exception as error:  # derived: retried, never in the way of a save
                self.last_error = f"{type(error).__name__}: {error}"
                if is_locked(error):  # another program holds the database: later
                    log.info("indexing waits: %s", error)
                else:
                    log_failure(log, "indexing failed; will retry", error)
                self._stop.wait(RETRY_SECONDS)
                continue
            self.taken += taken
            if taken:
                continue
            self._wake.wait(RESCAN_SECONDS)
            self._wake.clear()
