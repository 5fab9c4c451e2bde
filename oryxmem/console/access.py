"""What the console reads and changes, reached as the CLI reaches it (reach.py): the
daemon's socket when a daemon runs, else the stores directly, and then read-only (a
change must go through the daemon's one write path, where the saves of every other
client are ordered with it).

Calls run on two worker threads of the console's, each with its own connection to the
daemon (or its own stores): a page's search and its tables are asked together, and the
console's event loop never waits on a file or a socket."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from oryxmem.errors import DaemonUnavailableError
from oryxmem.payloads import (
    agents_data,
    context_data,
    episodes_data,
    found_entry_data,
    page_data,
    prompt_data,
    search_data,
    sessions_data,
)
from oryxmem.reach import Reach

if TYPE_CHECKING:
    from oryxmem.client import Client
    from oryxmem.service import MemoryService

T = TypeVar("T")
AS_CONSOLE = {"X-OryxOS-Source": "console"}  # history names the console as the source
WORKERS = 2


class ConsoleMemory:
    def __init__(self, root: str | None) -> None:
        self.root = root
        self._threads = ThreadPoolExecutor(WORKERS, thread_name_prefix="oryxmem-console")
        self._local = threading.local()
        self._reaches: list[Reach] = []
        self._lock = threading.Lock()
        self.daemon_answered = False  # did the last call go through the daemon?

    @property
    def reach(self) -> Reach:
        """This worker thread's own way to the memory."""
        reach: Reach | None = getattr(self._local, "reach", None)
        if reach is None:
            reach = self._local.reach = Reach(self.root, recheck=True)
            with self._lock:
                self._reaches.append(reach)
        return reach

    async def run(self, work: Callable[[ConsoleMemory], T]) -> T:
        """Do ``work`` on one of the console's worker threads."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, work, self)

    def close(self) -> None:
        self._threads.shutdown(wait=True)
        for reach in self._reaches:
            reach.close()

    def _ask(self, remote: Callable[[Client], T], local: Callable[[MemoryService], T]) -> T:
        """The daemon's answer, else the stores'; either way, noted for the page (read-only
        is said when the stores answered)."""

        def through_daemon(client: Client) -> T:
            answer = remote(client)
            self.daemon_answered = True
            return answer

        def alone(service: MemoryService) -> T:
            self.daemon_answered = False
            return local(service)

        return self.reach.call(through_daemon, alone)

    # --- reading ----------------------------------------------------------------

    def live(self) -> bool:
        """Does a daemon serve the workspace (else: read-only)? Asks it."""
        self.daemon_answered = self.reach.daemon_health() is not None
        return self.daemon_answered

    def agents(self) -> list[dict[str, Any]]:
        return self._ask(lambda c: c.agents(), lambda s: agents_data(s.agents()))

    def page(
        self, agent: str | None, scope: str, offset: int, limit: int, order: str
    ) -> dict[str, Any]:
        return self._ask(
            lambda c: c.entries(agent, scope, offset, limit, order),
            lambda s: page_data(s.page(agent, scope, offset, limit, order == "newest"), order),
        )

    def entry(self, agent: str | None, entry_id: str) -> dict[str, Any]:
        """The entry with this id as the file has it now (EntryNotFoundError: gone)."""
        found = self._ask(
            lambda c: c.entry(agent, entry_id),
            lambda s: found_entry_data(*s.find(agent, entry_id)),
        )
        return dict(found["entry"])

    def search(self, agent: str | None, query: str, limit: int) -> dict[str, Any]:
        return self._ask(
            lambda c: c.search(agent, query, limit),
            lambda s: search_data(s.search(agent, query, limit=limit)),
        )

    def context(self, agent: str | None, query: str | None) -> dict[str, Any]:
        return self._ask(
            lambda c: c.context(agent, query=query),
            lambda s: context_data(s, agent, None, query),
        )

    def prompt(self, agent: str | None, query: str | None) -> dict[str, Any]:
        return self._ask(
            lambda c: c.prompt(agent, query=query),
            lambda s: prompt_data(s, agent, None, None, query),
        )

    def sessions(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        return self._ask(
            lambda c: c.sessions(agent, limit),
            lambda s: sessions_data(s.recent_sessions(agent, limit)),
        )

    def messages(self, session: str) -> list[dict[str, Any]]:
        return self._ask(
            lambda c: list(c.session_messages(session)["messages"]),
            lambda s: s.history(session),
        )

    def episodes(self, agent: str | None, query: str, limit: int) -> dict[str, Any]:
        return self._ask(
            lambda c: c.search_episodes(agent, query, limit),
            lambda s: episodes_data(s.resolve(agent), s.search_episodes(agent, query, limit)),
        )

    def history(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        return self._ask(lambda c: c.history(agent, limit), lambda s: s.audit_log(agent, limit))

    def health(self) -> dict[str, Any] | None:
        """The daemon's health (None: no daemon runs)."""
        health = self.reach.daemon_health()
        self.daemon_answered = health is not None
        return health

    def sync(self) -> dict[str, Any]:
        """The sync summary: agents per status, problems, lines kept, repairs."""
        from oryxmem.store.rows import sync_summary

        return self._ask(lambda c: dict(c.health()["sync"]), lambda s: sync_summary(s.db))

    # --- changing: through the daemon only ------------------------------------------

    def save(self, agent: str | None, content: str, scope: str) -> dict[str, Any]:
        client = self._writer()
        return dict(client.call("save", AS_CONSOLE, agent=agent, content=content, scope=scope))

    def forget(self, agent: str | None, entry_id: str) -> dict[str, Any]:
        return dict(self._writer().call("forget", AS_CONSOLE, agent=agent, ids=[entry_id]))

    def edit(self, agent: str | None, entry_id: str, content: str) -> dict[str, Any]:
        client = self._writer()
        return dict(client.call("edit", AS_CONSOLE, agent=agent, id=entry_id, content=content))

    def _writer(self) -> Client:
        client = self.reach.client()
        if client is None or self.reach.daemon_health() is None:
            raise DaemonUnavailableError(
                "no daemon serves this workspace, so the console is read-only: start one"
                " (oryxmem daemon) to change memory here"
            )
        return client
