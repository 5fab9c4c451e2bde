"""MemoryService: the one facade the agent loop, prompt builder, socket API and CLI use.

Nobody else touches a store directly. An unsafe agent name falls back to the
global memory file; every result says which file served it and why.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oryxmem.clock import clock_for
from oryxmem.config import Config
from oryxmem.errors import (
    BackendUnavailableError,
    EmptyContentError,
    MemoryFileConflictedError,
    OryxError,
    UnsafeAgentNameError,
)
from oryxmem.fileio import FileLock
from oryxmem.store.base import LongTermMemoryStore, StoreLimits, fold_keyword
from oryxmem.store.db import BUSY_TIMEOUT_MS
from oryxmem.store.format import (
    ARCHIVAL,
    CANONICAL_HEADINGS,
    CORE,
    Entry,
    NewEntry,
    apply_edits,
    new_file_text,
    parse,
)
from oryxmem.store.markdown import MarkdownMemoryStore
from oryxmem.workspace import (
    GLOBAL_AGENT,
    AgentRef,
    Workspace,
    agent_folder_problem,
    open_workspace,
    resolve_agent,
)

if TYPE_CHECKING:
    # SQLite is imported on first use: a save to MEMORY.md from the CLI need not pay for it.
    from sqlite_utils import Database

    from oryxmem.store.sessions import SessionInfo, SessionStore

log = logging.getLogger("oryxmem")
# A MEMORY.md this large costs more to parse (about 35 ms per MB) than a look at its
# rows through a read-only connection: a recall from the CLI asks the rows first.
ROWS_ANSWER_FROM_BYTES = 256 * 1024


@dataclass(frozen=True)
class SaveResult:
    agent: AgentRef
    entry: Entry
    # Set when MEMORY.md could not take the entry yet (git conflict markers): it is
    # durable in SQLite and sync writes it to the file once the conflict is resolved.
    deferred: str | None = None


@dataclass(frozen=True)
class RecallResult:
    agent: AgentRef
    keyword: str
    lines: list[str]


@dataclass(frozen=True)
class MemoryView:
    agent: AgentRef
    core: list[Entry]
    archival: list[Entry]
    markdown: str


@dataclass(frozen=True)
class AgentSummary:
    name: str  # '' = the global file
    core: int | None
    archival: int | None
    problem: str | None


_CREATING = threading.Lock()


def close_stores(stores: dict[str, MarkdownMemoryStore]) -> None:
    for store in stores.values():
        store.close()
    stores.clear()


def fold_whitespace(text: str) -> str:
    return " ".join(text.split())


def cut(text: str, max_chars: int) -> str:
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def footprint_line(user_message: str, reply: str, max_chars: int) -> str:
    """The compact archival line that records one trigger."""
    user = cut(fold_whitespace(user_message), max_chars)
    answer = cut(fold_whitespace(reply), max_chars)
    if not user and not answer:
        raise EmptyContentError("a trigger needs a user message or a reply")
    return f'trigger: user="{user}" reply="{answer}"'


class MemoryService:
    def __init__(
        self,
        workspace: Workspace,
        config: Config,
        *,
        db: Database | None = None,
        markdown_stores: dict[str, MarkdownMemoryStore] | None = None,
    ) -> None:
        """``markdown_stores`` lets services in one process (the daemon's threads) share
        each file's store, so a write by one leaves the others' parsed copy current."""
        self.workspace = workspace
        self.config = config
        self.clock = clock_for(config.timezone)
        self.limits = StoreLimits(config.archival_limit_chars, config.max_content_chars)
        self._db = db
        self._stores: dict[str, LongTermMemoryStore] = {}
        self._owns_stores = markdown_stores is None  # shared stores are closed by their owner
        self._markdown_stores = markdown_stores if markdown_stores is not None else {}

    @classmethod
    def open(cls, root: str | None = None) -> MemoryService:
        workspace = open_workspace(root)
        return cls(workspace, Config.load(workspace.config_path))

    @property
    def db(self) -> Database:
        """The workspace database, opened (and migrated) on first use."""
        if self._db is None:
            from oryxmem.store.db import connect

            self._db = connect(self.workspace.db_path)
        return self._db

    def close(self) -> None:
        if self._owns_stores:
            close_stores(self._markdown_stores)
        self._stores.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- long-term memory ---------------------------------------------------

    def resolve(self, agent: str | None) -> AgentRef:
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

    def store(self, ref: AgentRef) -> LongTermMemoryStore:
        store = self._stores.get(ref.agent)
        if store is None:
            store = self._make_store(ref.agent)
            self._stores[ref.agent] = store
        return store

    def markdown_store(self, agent: str) -> MarkdownMemoryStore:
        """The MEMORY.md store of a resolved agent, whatever the configured backend."""
        store = self._markdown_stores.get(agent)
        if store is None:
            with _CREATING:  # threads share these stores: one per agent, whoever asks first
                store = self._markdown_stores.get(agent)
                if store is None:
                    store = MarkdownMemoryStore(
                        self.workspace.memory_path(agent),
                        FileLock(self.workspace.lock_path(agent)),
                        clock=self.clock,
                        limits=self.limits,
                    )
                    self._markdown_stores[agent] = store
        return store

    def _make_store(self, agent: str) -> LongTermMemoryStore:
        backend = self.config.backend
        if backend == "markdown":
            return self.markdown_store(agent)
        if backend == "sqlite":
            from oryxmem.store.sqlite import SqliteMemoryStore

            return SqliteMemoryStore(self.db, agent, clock=self.clock, limits=self.limits)
        raise BackendUnavailableError(
            f"memory.backend = {backend!r} is not available in this version;"
            " set it to 'markdown' or 'sqlite'"
        )

    def save(
        self, agent: str | None, content: str, scope: str = ARCHIVAL, *, source: str = "api"
    ) -> SaveResult:
        ref = self.resolve(agent)
        store = self.store(ref)
        try:
            entry = store.append(content, scope)
        except MemoryFileConflictedError as error:
            if not isinstance(store, MarkdownMemoryStore):
                raise
            return self._save_while_conflicted(ref, store, content, scope, source, error)
        return SaveResult(ref, entry)

    def _save_while_conflicted(
        self,
        ref: AgentRef,
        store: MarkdownMemoryStore,
        content: str,
        scope: str,
        source: str,
        error: MemoryFileConflictedError,
    ) -> SaveResult:
        """Keep a save that MEMORY.md cannot take (a git conflict) in SQLite until it can."""
        from oryxmem.store.db import write_transaction
        from oryxmem.sync.table import insert_waiting_row

        entry = store.prepare(content, scope)
        with write_transaction(self.db):
            insert_waiting_row(self.db, ref.agent, entry, source)
        lines = ", ".join(map(str, error.data.get("conflict_lines", [])))
        reason = (
            f"MEMORY.md has git conflict markers (lines {lines}); the entry is kept in the"
            " database and written to the file once they are resolved"
        )
        log.warning("%s: %s", ref.describe(), reason)
        return SaveResult(ref, entry, deferred=reason)

    def recall(self, agent: str | None, keyword: str) -> RecallResult:
        ref = self.resolve(agent)
        store = self.store(ref)
        if isinstance(store, MarkdownMemoryStore):
            entries = self._recall_from_rows(ref.agent, keyword)
            if entries is not None:
                return RecallResult(ref, keyword, [entry.render() for entry in entries])
        return RecallResult(ref, keyword, store.recall(keyword))

    def _recall_from_rows(self, agent: str, keyword: str) -> list[Entry] | None:
        """Recall through the rows' trigram index when sync says they equal the file right
        now (None: read the file instead). Where the database is open anyway (the daemon),
        always; in a short-lived process (the CLI) only for a file large enough that
        parsing it costs more, through a plain read-only connection (no sqlite-utils, no
        migrations)."""
        import sqlite3

        from oryxmem.store.sqlite import recall_rows
        from oryxmem.sync.table import file_stat, is_settled

        folded = fold_keyword(keyword)
        stat = file_stat(self.workspace.memory_path(agent))
        if stat is None:
            return None
        db = self._db
        if db is not None:
            return recall_rows(db, agent, folded) if is_settled(db, agent, stat) else None
        if (stat[1] or 0) < ROWS_ANSWER_FROM_BYTES or not self.workspace.db_path.exists():
            return None
        uri = f"{self.workspace.db_path.as_uri()}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error:
            return None
        try:
            return recall_rows(conn, agent, folded) if is_settled(conn, agent, stat) else None
        except sqlite3.Error as error:  # an older schema, a locked file: the file answers
            log.info("recall from the rows of %s skipped: %s", agent or "(global)", error)
            return None
        finally:
            conn.close()

    def get(self, agent: str | None) -> MemoryView:
        ref = self.resolve(agent)
        store = self.store(ref)
        core, archival = store.entries()
        if isinstance(store, MarkdownMemoryStore):
            markdown = store.document().text or new_file_text()
        else:
            additions = [NewEntry(e.scope, e.ts, e.content) for e in core + archival]
            markdown = apply_edits(parse(new_file_text()), additions)
        return MemoryView(ref, core, archival, markdown)

    def build_context(self, agent: str | None) -> str:
        """The memory block of the prompt: core whole, archival cut, both headings always."""
        snapshot = self.store(self.resolve(agent)).load()
        lines = [CANONICAL_HEADINGS[CORE], *(entry.render() for entry in snapshot.core)]
        lines.append(CANONICAL_HEADINGS[ARCHIVAL])
        if snapshot.archival.omitted:
            lines.append(
                f"({snapshot.archival.omitted} earlier archival entries not shown;"
                " recall_memory searches all of them)"
            )
        lines.extend(snapshot.archival.lines)
        return "\n".join(lines) + "\n"

    def record_trigger(self, agent: str | None, user_message: str, reply: str) -> SaveResult:
        line = footprint_line(user_message, reply, self.config.footprint_max_chars)
        return self.save(agent, line, ARCHIVAL)

    def agents(self) -> list[AgentSummary]:
        """The global file and every agent directory, with entry counts."""
        summaries = []
        for name in ["", *self.workspace.agent_names()]:
            try:
                core, archival = self.store(AgentRef(name, name)).entries()
            except OryxError as error:
                summaries.append(AgentSummary(name, None, None, error.message))
                continue
            summaries.append(AgentSummary(name, len(core), len(archival), None))
        return summaries

    # --- sessions and tools ---------------------------------------------------

    @property
    def sessions(self) -> SessionStore:
        from oryxmem.store.sessions import SessionStore

        return SessionStore(self.db)

    def create_session(self, agent: str | None) -> SessionInfo:
        return self.sessions.create(self.resolve(agent).agent)

    def append_message(self, session_id: str, role: str, content: str) -> int:
        return self.sessions.append(session_id, role, content)

    def history(self, session_id: str, turns: int | None = None) -> list[dict[str, Any]]:
        return self.sessions.history(session_id, turns or self.config.max_history_turns)

    def record_tool(
        self,
        tool: str,
        agent: str,
        session: str | None,
        input: dict[str, Any],
        output: Any,
        ok: bool,
        started: float,
    ) -> None:
        """Record one tool call that came through the socket in ``tool_invocations``."""
        from oryxmem.store.sessions import record_tool_invocation

        ms = (time.perf_counter() - started) * 1000
        record_tool_invocation(
            self.db,
            tool=tool,
            agent=agent,
            session=session,
            input=input,
            output=output,
            ok=ok,
            ms=ms,
        )
