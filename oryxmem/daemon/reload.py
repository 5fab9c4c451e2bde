"""The running daemon follows config.toml: what can change live is taken within a second.

Every second the daemon stats config.toml; when it changed (an ``oryxmem config set``,
an editor's save), it is read again. A setting that can change live is put into the
running configuration, which every thread reads at each use; one that needs a restart
(the socket, the backend, the embedder: ``Setting.restart``) is kept as it was, and
health says that the file differs until the daemon starts again. A file that does not
parse, or holds a bad value, changes nothing: the daemon keeps its configuration and
says why, once.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from oryxmem.config import Config, all_settings
from oryxmem.errors import InvalidConfigError
from oryxmem.fileio import FileStat, file_stat

log = logging.getLogger("oryxmem.daemon")
CHECK_SECONDS = 1.0


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


class ConfigFollower:
    def __init__(self, path: Path, running: Config) -> None:
        self.path = path
        self.running = running
        self._seen: FileStat | None = file_stat(path)
        self.reloads = 0
        self.problem: str | None = None  # why the file as it is now was not taken
        # Settings whose value in the file (kept here) the daemon takes at its next start.
        self.waiting: dict[str, Any] = {}

    def check(self) -> bool:
        """Read config.toml again if it changed since last seen; True when it did."""
        stat = file_stat(self.path)
        if stat == self._seen:
            return False
        self._seen = stat
        try:
            fresh = Config.load(self.path)
        except InvalidConfigError as error:
            if self.problem != error.message:
                log.error("config.toml not taken: %s; running as before", error.message)
            self.problem = error.message
            return True
        self.problem = None
        taken, kept = self.running.take_live(fresh)
        self.reloads += 1
        for item in taken:
            log.info("config: %s = %s, taken now", item.key, _shown(fresh.get(item.key)))
        waiting = {item.key: fresh.get(item.key) for item in kept}
        for key, value in waiting.items():
            if self.waiting.get(key, _UNSET) != value:  # told once per value
                log.warning(
                    "config: %s = %s in config.toml; running with %s until the daemon restarts",
                    key,
                    _shown(value),
                    _shown(self.running.get(key)),
                )
        self.waiting = waiting
        return True

    def health(self) -> dict[str, Any]:
        return {
            "reloads": self.reloads,
            # what the settings that need a restart were when it started
            "fixed_at_start": {
                item.key: self.running.get(item.key)
                for item in all_settings(self.running.backend)
                if item.restart
            },
            "problem": self.problem,
            "restart_needed": [
                {"key": key, "running": self.running.get(key), "file": value}
                for key, value in self.waiting.items()
            ],
        }


_UNSET = object()
