"""A daemon thread for derived work, off the save path: the indexer, the mem0 mirror.

It has its own MemoryService (its own connection) and runs ``step`` until stopped: a
step that says there is more runs again at once; otherwise the thread waits until it is
woken or ``idle_seconds`` pass. A step that fails is logged (one line when another
program holds the database) and tried again after ``retry_seconds``: it never stops the
thread, and never holds up a save. Once stopping, a step that ends in an error ends the
thread quietly: it may have been told to end early (``stopping``).
"""

from __future__ import annotations

import logging
import threading

from oryxmem.errors import log_failure
from oryxmem.service import MemoryService
from oryxmem.store.db import is_locked

log = logging.getLogger("oryxmem.daemon")


class Background:
    what = "derived work"  # for the log: "indexing", "the mem0 pass"

    def __init__(
        self, service: MemoryService, *, name: str, idle_seconds: float, retry_seconds: float
    ) -> None:
        self.service = service
        self.idle_seconds = idle_seconds
        self.retry_seconds = retry_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.steps = 0
        self.last_error: str | None = None
        # A step that has work it means to do later (not at once) sets this: the
        # thread looks again after these seconds, not idle_seconds. Each step starts
        # with none.
        self.look_again_in: float | None = None

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self.stopping()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.service.close()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def step(self) -> bool:
        """One step of the work; True when there is more to do at once."""
        raise NotImplementedError

    def on_start(self) -> None:
        """Runs on the thread before the first step."""

    def stopping(self) -> None:
        """Runs on the thread that stops this one, before it waits: a long step may be told
        to end early (what it leaves undone is derived, done at the next start)."""

    def _run(self) -> None:
        self.on_start()
        while not self._stop.is_set():
            self.look_again_in = None
            try:
                more = self.step()
                self.steps += 1
                self.last_error = None
            except Exception as error:  # derived: retried, never in the way of a save
                if self._stop.is_set():
                    return  # a step told to end early by stopping(), or stopped mid-way
                self.last_error = f"{type(error).__name__}: {error}"
                if is_locked(error):  # another program holds the database: later
                    log.info("%s waits: %s", self.what, error)
                else:
                    log_failure(log, f"{self.what} failed; will retry", error)
                self._stop.wait(self.retry_seconds)
                continue
            if more:
                continue
            wait = self.look_again_in
            self._wake.wait(self.idle_seconds if wait is None else min(wait, self.idle_seconds))
            self._wake.clear()
