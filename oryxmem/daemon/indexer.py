"""The daemon's indexer thread: the backlogs of the words (a restore, a git pull, a
reindex), then the slow derived indexes (the vectors, the episodes of past sessions),
off the save path.

It has its own connection and uses one room of its service, Upkeep: words_step while the
indexes that follow saves are behind (the cheap arms are never queued behind the
vectors), then embed_step and episodes_step until nothing is left; each step prepares
the rows of one batch (stems or embeds them) with no lock held, then takes them in with
a short write. It runs at a lower priority (nice
10, inherited by the threads that embed for it), so the memory thread's saves and
searches go first on a busy machine. It is woken when saves were mirrored, a reconcile
changed rows or a message was added to a session, and looks on its own every
RESCAN_SECONDS.
"""

from __future__ import annotations

import logging
import os
import threading

from oryxmem.daemon.background import Background
from oryxmem.service import MemoryService

log = logging.getLogger("oryxmem.daemon")
RESCAN_SECONDS = 5.0
NICENESS = 10
RETRY_SECONDS = 2.0  # after a failed step (the database busy, the disk full)


class Indexer(Background):
    what = "indexing"

    def __init__(self, service: MemoryService) -> None:
        super().__init__(
            service,
            name="oryxmem-indexer",
            idle_seconds=RESCAN_SECONDS,
            retry_seconds=RETRY_SECONDS,
        )
        self.upkeep = service.upkeep  # the one room it uses
        self.taken = 0

    def on_start(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        except OSError as error:  # not allowed here: it runs at the usual priority
            log.info("the indexer keeps its priority: %s", error)

    def step(self) -> bool:
        taken = self.upkeep.words_step()
        if not taken:
            taken = self.upkeep.embed_step() if self.upkeep.vector_index() else 0
            taken += self.upkeep.episodes_step()
        self.taken += taken
        return taken > 0
