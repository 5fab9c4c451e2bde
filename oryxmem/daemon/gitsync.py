"""The daemon's thread for git sync (sync/gitloop.py), started only with sync.git.remote:
a pass every sync.git.interval_seconds (longer after failures), and one soon after the
daemon starts."""

from __future__ import annotations

import logging
import threading
from typing import Any

from oryxmem.config import Config
from oryxmem.errors import log_failure
from oryxmem.store.markdown import MarkdownFiles
from oryxmem.sync.gitloop import GitSync
from oryxmem.workspace import Workspace

log = logging.getLogger("oryxmem.daemon")
FIRST_PASS_SECONDS = 1.0


class GitSyncThread:
    def __init__(self, workspace: Workspace, files: MarkdownFiles, config: Config) -> None:
        self.sync = GitSync(workspace, files, config)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oryxmem-git", daemon=True)
        self.passes = 0

    def start(self) -> None:
        log.info("git sync with %s every %s s", self.sync.remote, self.sync.interval())
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=150)  # a push under way finishes: never cut short

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def health(self) -> dict[str, Any]:
        return {"remote": self.sync.remote, "passes": self.passes, **self.sync.state.as_dict()}

    def _run(self) -> None:
        wait = FIRST_PASS_SECONDS
        while not self._stop.wait(wait):
            if not self.sync.remote:  # the setting was emptied while running: stop here
                return
            try:
                self.sync.step()
            except Exception as error:  # a bug of ours: said, and the next pass tries again
                log_failure(log, "git sync failed; will retry", error)
            self.passes += 1
            wait = self.sync.interval()
