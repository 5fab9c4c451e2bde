"""What every room of the service shares: the workspace and its configuration, each
file's store, the database (opened on first use), the configured backend, and which
agent a call is for. Nothing here reads or writes an entry; the rooms do."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from oryxmem.clock import clock_for
from oryxmem.config import Config
from oryxmem.errors import UnsafeAgentNameError
from oryxmem.registry import BACKENDS, backend_migrations
from oryxmem.store.base import LongTermMemoryStore, StoreLimits, StoreResources
from oryxmem.store.db import Database, connect
from oryxmem.store.indexdb import connect_index
from oryxmem.store.markdown import MarkdownFiles
from oryxmem.workspace import (
    GLOBAL_AGENT,
    AgentRef,
    Workspace,
    agent_folder_problem,
    resolve_agent,
)

if TYPE_CHECKING:
    from oryxmem.sync.engine import SyncEngine

log = logging.getLogger("oryxmem")


class Shared:
    def __init__(
        self,
        workspace: Workspace,
        config: Config,
        *,
        db: Database | None = None,
        files: MarkdownFiles | None = None,
        in_daemon: bool = False,
    ) -> None:
        """``files`` lets services in one process (the daemon's threads) share each file's
        store, so a write by one leaves the others' parsed copy current; ``in_daemon``:
        the daemon's threads keep the indexes up to the rows, not each call."""
        self.workspace = workspace
        self.config = config
        self.clock = clock_for(lambda: config.timezone)
        self.limits = StoreLimits.of(config)
        self._db = db
        self._index_db: Database | None = None
        self._owns_files = files is None  # shared stores are closed by their owner
        self.files = files or MarkdownFiles(workspace, clock=self.clock, limits=self.limits)
        self._backend: type[LongTermMemoryStore] | None = None
        self._readers: dict[str, LongTermMemoryStore] = {}
        # Does a call bring the derived indexes up to the rows itself? Alone, yes; in the
        # daemon its threads do that, and readers only read.
        self.index_upkeep = not in_daemon
        # Does a search, alone, embed a few batches of the rows not embedded yet before it
        # answers? Not when a daemon was just started to do that: it answers by words for
        # those, and says how many they are.
        self.embeds_in_search = True

    @property
    def db(self) -> Database:
        """The workspace database, opened (and migrated) on first use."""
        if self._db is None:
            own = backend_migrations(self.config.backend)  # the backend's own tables
            self._db = connect(self.workspace.db_path, [own] if own else ())
        return self._db

    @property
    def index_db(self) -> Database:
        """The derived indexes' file (store/indexdb.py), the rows attached read-only;
        opened on first use, after the rows' file."""
        if self._index_db is None:
            _ = self.db  # made and migrated first: the index file names it
            self._index_db = connect_index(self.workspace.db_path)
        return self._index_db

    @property
    def db_is_open(self) -> bool:
        return self._db is not None

    def close(self) -> None:
        if self._owns_files:
            self.files.close()
        self._readers.clear()
        if self._index_db is not None:
            self._index_db.close()
            self._index_db = None
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- agents ---------------------------------------------------------------

    @property
    def backend(self) -> type[LongTermMemoryStore]:
        """The configured backend's store class, imported on first use; a backend that
        cannot be loaded is a clear error for every call, saves included."""
        if self._backend is None:
            self._backend = BACKENDS.load(self.config.backend)
        return self._backend

    def resolve(self, agent: str | None) -> AgentRef:
        """The agent a call is for. Every call that reaches an agent's memory comes here
        first, so a backend that cannot be loaded refuses them all alike."""
        _ = self.backend
        ref = resolve_agent(self.workspace, agent)
        if ref.fell_back:  # the caller is told in its reply; this is the log line
            log.info("%s; using the global memory file", ref.fallback_reason)
        return ref

    def check_folder(self, ref: AgentRef) -> None:
        """Refuse an agent whose folder or MEMORY.md is a symbolic link (or not a folder).

        Its name was checked already where the request arrived; this is the half that
        asks the filesystem, run here so the event loop makes no system call for it."""
        if ref.agent == GLOBAL_AGENT:
            return
        problem = agent_folder_problem(self.workspace, ref.agent)
        if problem:
            raise UnsafeAgentNameError(f"unsafe agent name {ref.agent!r}: {problem}")

    def reader(self, ref: AgentRef) -> LongTermMemoryStore:
        """The configured backend's store for this agent: what answers reads."""
        store = self._readers.get(ref.agent)
        if store is None:
            resources = StoreResources(
                self.workspace,
                self.config,
                self.files,
                lambda: self.db,
                lambda: self.index_db,
                self.clock,
                self.limits,
            )
            store = self._readers[ref.agent] = self.backend.for_agent(ref.agent, resources)
        return store

    @property
    def recall_ranks(self) -> bool:
        """Does recall answer by meaning and words, best first (memory.recall = hybrid),
        rather than every entry holding the keyword, oldest first?"""
        return bool(self.config.get("memory.recall") == "hybrid")

    def sync_engine(self) -> SyncEngine:
        from oryxmem.sync.engine import SyncEngine  # on first use: most calls never sync

        return SyncEngine(self.workspace, self.db, self.files, self.config)
