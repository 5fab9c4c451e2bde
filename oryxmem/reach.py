"""Reaching a workspace's memory: through its daemon when one runs, else the stores
directly (the same locks, so the two can run side by side). The CLI, the MCP server
and the hooks all reach it this way.

A call the daemon answers imports neither the stores nor SQLite: the service is
opened only when a call has to go without the daemon. A call that needs the embedding
model and finds no daemon answers by itself, and starts one in the background for the
calls that follow (launch.py, ``daemon.autostart``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from oryxmem.config import Config
from oryxmem.errors import ContentTooLongError, DaemonUnavailableError
from oryxmem.fileio import FileStat, file_stat
from oryxmem.workspace import open_workspace, socket_path

if TYPE_CHECKING:
    from oryxmem.client import Client
    from oryxmem.service import MemoryService

T = TypeVar("T")


class Reach:
    def __init__(self, root: str | None, timeout: float = 30.0, recheck: bool = False) -> None:
        """``recheck``: look for the daemon again on each call while none answers (for a
        long-lived caller such as the MCP server, which may start before the daemon)."""
        self.root = root
        self.timeout = timeout
        self.recheck = recheck
        self._service: MemoryService | None = None
        self._client: Client | None = None
        self._daemon_checked = False
        self._config: tuple[FileStat | None, Config] | None = None  # as read, at that stat

    @property
    def service(self) -> MemoryService:
        if self._service is None:
            from oryxmem.service import MemoryService

            self._service = MemoryService.open(self.root)
        return self._service

    def client(self) -> Client | None:
        """A client of this workspace's daemon when one runs, else None."""
        if self._client is None and (self.recheck or not self._daemon_checked):
            self._daemon_checked = True
            if os.environ.get("ORYXMEM_NO_DAEMON"):
                return None
            workspace = open_workspace(self.root)
            path = socket_path(workspace, Config.load(workspace.config_path))
            if path.exists():
                from oryxmem.client import Client  # only when a daemon may run

                self._client = Client(path, self.timeout, workspace.root)
        return self._client

    def config(self) -> Config:
        """The workspace's configuration as the file says now: read again only when its
        stat has changed (a long-lived caller asks at every call)."""
        path = open_workspace(self.root).config_path
        stat = file_stat(path)
        if self._config is None or self._config[0] != stat or stat is None:
            self._config = (stat, Config.load(path))
        return self._config[1]

    def check_content(self, content: str) -> None:
        """Refuse content longer than one entry may hold before it is sent anywhere: a
        daemon would otherwise answer about the size of an HTTP body nobody typed."""
        limit = self.config().max_content_chars
        if len(content.strip()) > limit:
            raise ContentTooLongError(
                f"content is {len(content.strip())} characters; the limit is {limit}"
            )

    def daemon_health(self) -> dict[str, Any] | None:
        """The running daemon's health, or None when none answers."""
        client = self.client()
        if client is None:
            return None
        try:
            return client.health()
        except DaemonUnavailableError:
            return None

    def ask_daemon(self, remote: Callable[[Client], T]) -> tuple[T] | None:
        """The daemon's answer (alone in a tuple) when one runs; None when none answers, and
        the call must go without it."""
        client = self.client()
        if client is None:
            return None
        try:
            return (remote(client),)
        except DaemonUnavailableError:
            client.close()
            self._client = None  # a stale socket: the daemon is gone
            return None

    def call(
        self,
        remote: Callable[[Client], T],
        local: Callable[[MemoryService], T],
        *,
        needs_model: bool = False,
    ) -> T:
        """Ask the daemon when it runs; use the stores directly (same locks) when not, and
        then, for a call that ``needs_model``, start a daemon for the next ones."""
        answered = self.ask_daemon(remote)
        if answered is not None:
            return answered[0]
        if needs_model and self.start_daemon():
            self.service.shared.embeds_in_search = False  # the daemon will embed them
        return local(self.service)

    def start_daemon(self) -> bool:
        """Start the workspace's daemon in the background if ``daemon.autostart`` wants it
        and no daemon answers; True when one was started (it is not waited for)."""
        from oryxmem.launch import autostart_wanted, start_daemon_in_background

        workspace = open_workspace(self.root)
        config = Config.load(workspace.config_path)
        if not autostart_wanted(config) or self.daemon_health() is not None:
            return False
        started = start_daemon_in_background(workspace, config)
        if started:
            self.recheck = True  # a long-lived caller finds it once it serves
        return started

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._service is not None:
            self._service.close()
            self._service = None


__all__ = ["Reach"]
