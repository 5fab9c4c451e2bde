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

Its writes go to the index file (store/indexdb.py), whose write lock no other program
takes, and are not synced (that file is derived: made again from the rows if a power
cut takes a commit back). A trickle of rows (fewer than a batch: the saves of one
client) waits up to GATHER_SECONDS for more and is embedded in one step, not one step a
mirror: fuller batches for the model, fewer writes. While saves stream in (one came in
the last STREAM_GAP_SECONDS), the rows the vectors lack wait for the stream to end, up
to YIELD_SECONDS: embedding (a millisecond of a core per entry) beside one client
saving back to back made its saves' p50 a tenth longer and their p99 three to five
times, nice or not (docs/performance.md). A search embeds the few
rows the vectors lack itself (vectors.FRESH_ROWS), so it finds them by meaning
meanwhile; past those it answers without them and says how many (``pending``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from oryxmem.daemon.background import Background
from oryxmem.service import MemoryService

log = logging.getLogger("oryxmem.daemon")
RESCAN_SECONDS = 5.0
NICENESS = 10
RETRY_SECONDS = 2.0  # after a failed step (the database busy, the disk full)
GATHER_SECONDS = 1.0  # the longest a trickle of rows waits for more before it is embedded
# Saves closer together than this are a stream, which the vectors wait out (at most
# YIELD_SECONDS: a stream that goes on has its rows embedded beside it, as they come).
STREAM_GAP_SECONDS = 0.25
YIELD_SECONDS = 30.0


class Indexer(Background):
    what = "indexing"

    def __init__(
        self, service: MemoryService, last_save: Callable[[], float | None] = lambda: None
    ) -> None:
        super().__init__(
            service,
            name="oryxmem-indexer",
            idle_seconds=RESCAN_SECONDS,
            retry_seconds=RETRY_SECONDS,
        )
        self.upkeep = service.upkeep  # the one room it uses
        self.taken = 0
        self.last_save = last_save  # when the memory thread last wrote saves (monotonic)
        self._waiting_since: float | None = None  # when rows to embed were first put off

    def on_start(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        except OSError as error:  # not allowed here: it runs at the usual priority
            log.info("the indexer keeps its priority: %s", error)

    def stopping(self) -> None:
        """A backlog being embedded stops at its next texts (embed.BacklogStopped): at
        nice 10 on a busy machine a step of 256 texts can take longer than a stop may."""
        vectors = self.upkeep.vector_index()
        if vectors is not None:
            vectors.embedder.stop_backlogs()

    def step(self) -> bool:
        taken = self.upkeep.words_step()
        if not taken:
            if self.upkeep.vector_index() and not self._waiting():
                taken = self.upkeep.embed_step()
            taken += self.upkeep.episodes_step()
        self.taken += taken
        return taken > 0

    def _waiting(self) -> bool:
        """Do the rows the vectors lack wait: a trickle for more (up to GATHER_SECONDS),
        any of them for a stream of saves to end (up to YIELD_SECONDS)? Then the thread
        looks again once they may be due."""
        lacking = self.upkeep.rows_to_embed()
        now = time.monotonic()
        last_save = self.last_save()
        stream_ends = now if last_save is None else last_save + STREAM_GAP_SECONDS
        streaming = stream_ends > now
        if lacking == "none" or not (streaming or lacking == "trickle"):
            self._waiting_since = None
            return False
        since = now if self._waiting_since is None else self._waiting_since
        self._waiting_since = since
        gathered = since + GATHER_SECONDS if lacking == "trickle" else now
        due = min(since + YIELD_SECONDS, max(gathered, stream_ends))
        if due <= now:
            if not streaming:
                self._waiting_since = None
            # else kept: a stream that outlasted YIELD_SECONDS has its rows embedded as
            # they come, until it ends
            return False
        self.look_again_in = due - now
        return True
