"""MemoryService: the one facade callers talk to (the agent loop, the socket API, the CLI,
the tools), over rooms that each keep one concern:

- ``shared.py``    the workspace, its configuration, the files, the database, the backend
- ``saving.py``    the one write path: prepare, write (the ack), mirror into the rows
- ``upkeep.py``    the derived indexes kept up to the rows: catch-up, embedding, reindex
- ``finding.py``   search, recall, and the episodes of past sessions
- ``prompting.py`` the memory block and the four-part prompt
- ``sessions.py``  sessions, imported transcripts, the record of tool calls
- ``reading.py``   an agent's whole memory, and every agent with its counts

A room is built the first time a call needs it, and only then are its modules
imported: showing a memory or saving a line never loads the indexes, numpy or the
model. An unsafe agent name falls back to the global memory file; every result says
which file served it and why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oryxmem.config import Config
from oryxmem.service.results import (
    AgentSummary,
    MemoryView,
    Page,
    Placed,
    RecallResult,
    SaveResult,
    SearchHit,
    SearchResult,
)
from oryxmem.service.saving import (
    Outcome,
    SaveBatch,
    SaveRequest,
    Saving,
    footprint_line,
)
from oryxmem.service.shared import Shared
from oryxmem.store import rows
from oryxmem.store.format import ARCHIVAL
from oryxmem.store.sessions import ToolRecord
from oryxmem.workspace import AgentRef, Workspace, open_workspace

if TYPE_CHECKING:
    from oryxmem.index import DerivedIndex, SessionIndex
    from oryxmem.index.episodes import EpisodeHit
    from oryxmem.index.vectors import VectorIndex
    from oryxmem.prompt import ArchivalPart, Prompt
    from oryxmem.service.finding import Finding
    from oryxmem.service.prompting import Prompting
    from oryxmem.service.reading import Reading
    from oryxmem.service.sessions import Sessions
    from oryxmem.service.upkeep import Upkeep
    from oryxmem.store.base import LongTermMemoryStore
    from oryxmem.store.db import Database
    from oryxmem.store.markdown import MarkdownFiles
    from oryxmem.store.sessions import SessionInfo
    from oryxmem.sync.edits import Edited
    from oryxmem.sync.engine import AgentReport, SyncEngine

__all__ = [
    "AgentSummary",
    "MemoryService",
    "MemoryView",
    "Outcome",
    "RecallResult",
    "SaveBatch",
    "SaveRequest",
    "SaveResult",
    "SearchHit",
    "SearchResult",
    "footprint_line",
]


class MemoryService:
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
        a thread of the daemon, whose threads keep the indexes, not each call."""
        self.shared = Shared(workspace, config, db=db, files=files, in_daemon=in_daemon)

    @classmethod
    def open(cls, root: str | None = None) -> MemoryService:
        workspace = open_workspace(root)
        return cls(workspace, Config.load(workspace.config_path))

    # --- the rooms, each built on first use -------------------------------------

    @cached_property
    def saving(self) -> Saving:
        return Saving(self.shared, lambda: self.upkeep.take_a_step())

    @cached_property
    def upkeep(self) -> Upkeep:
        from oryxmem.service.upkeep import Upkeep

        return Upkeep(self.shared)

    @cached_property
    def finding(self) -> Finding:
        from oryxmem.service.finding import Finding

        return Finding(self.shared, self.upkeep)

    @cached_property
    def prompting(self) -> Prompting:
        from oryxmem.service.prompting import Prompting

        return Prompting(
            self.shared, lambda: self.finding, lambda s, t: self.sessions.history(s, t)
        )

    @cached_property
    def sessions(self) -> Sessions:
        from oryxmem.service.sessions import Sessions

        return Sessions(self.shared)

    @cached_property
    def reading(self) -> Reading:
        from oryxmem.service.reading import Reading

        return Reading(self.shared)

    # --- what every room shares ---------------------------------------------------

    @property
    def workspace(self) -> Workspace:
        return self.shared.workspace

    @property
    def config(self) -> Config:
        return self.shared.config

    @property
    def files(self) -> MarkdownFiles:
        return self.shared.files

    @property
    def db(self) -> Database:
        return self.shared.db

    @property
    def index_db(self) -> Database:
        """The derived indexes' file, the rows attached read-only (store/indexdb.py)."""
        return self.shared.index_db

    def close(self) -> None:
        self.shared.close()

    def resolve(self, agent: str | None) -> AgentRef:
        return self.shared.resolve(agent)

    def check_folder(self, ref: AgentRef) -> None:
        self.shared.check_folder(ref)

    def reader(self, ref: AgentRef) -> LongTermMemoryStore:
        return self.shared.reader(ref)

    def sync_engine(self) -> SyncEngine:
        return self.shared.sync_engine()

    # --- saving -------------------------------------------------------------------

    def save(
        self, agent: str | None, content: str, scope: str = ARCHIVAL, *, source: str = "api"
    ) -> SaveResult:
        """Save one entry: durable in MEMORY.md, then in the rows. Raises what refused it."""
        return self.save_one(self.resolve(agent), SaveRequest(content, scope, source))

    def record_trigger(self, agent: str | None, user_message: str, reply: str) -> SaveResult:
        """The automatic footprint: one compact archival line per trigger."""
        request = SaveRequest.footprint(user_message, reply, self.config.footprint_max_chars)
        return self.save_one(self.resolve(agent), request)

    def save_one(self, ref: AgentRef, request: SaveRequest) -> SaveResult:
        return self.saving.save_one(ref, request)

    def save_batch(self, ref: AgentRef, requests: Sequence[SaveRequest]) -> SaveBatch:
        return self.saving.save_batch(ref, requests)

    def mirror_saves(self, *, indexes_follow: bool = False) -> list[str]:
        return self.saving.mirror_saves(indexes_follow=indexes_follow)

    @property
    def saves(self) -> int:
        return self.saving.saves

    @property
    def batches(self) -> int:
        return self.saving.batches

    @property
    def mirrors(self) -> int:
        return self.saving.mirrors

    def recover_answered(self) -> int:
        return self.saving.recover_answered()

    def edit(
        self,
        agent: str | None,
        removals: Sequence[str] = (),
        replacements: Mapping[str, str] | None = None,
        *,
        source: str = "api",
    ) -> Edited:
        """Forget entries and write others anew, named by id (sync/edits.py); the saves
        answered before go into the rows first, so the edit is planned on all of them."""
        from oryxmem.sync.edits import edit_entries

        ref = self.resolve(agent)
        self.check_folder(ref)
        self.mirror_saves()
        return edit_entries(self.sync_engine(), ref.agent, removals, replacements or {}, source)

    def forget(
        self, agent: str | None, ids: Sequence[str], *, purge: bool = False, source: str = "api"
    ) -> Edited:
        """Take entries out by id (a tombstone each); with ``purge`` their text leaves the
        history too, which keeps only that they went."""
        from oryxmem.sync.edits import purge_history

        edited = self.edit(agent, ids, source=source)
        if purge:
            purge_history(self.db, edited.agent, [entry.entry_id for entry in edited.removed])
        return edited

    def sync(
        self,
        agents: Sequence[str] | None = None,
        *,
        dry_run: bool = False,
        progress: Callable[[AgentReport], None] | None = None,
    ) -> list[AgentReport]:
        """One pass of sync over every agent (or those named), then the indexes follow."""
        self.mirror_saves()
        if not dry_run:
            self.recover_answered()
        reports = self.sync_engine().reconcile_all(agents, dry_run=dry_run, progress=progress)
        if not dry_run:
            self.catch_up_indexes()
        return reports

    # --- upkeep -------------------------------------------------------------------

    @property
    def indexes(self) -> dict[str, DerivedIndex]:
        return self.upkeep.indexes

    def catch_up_indexes(self, max_steps: int | None = None) -> int:
        return self.upkeep.catch_up_indexes(max_steps)

    def embed_step(self) -> int:
        return self.upkeep.embed_step()

    def vector_index(self) -> VectorIndex | None:
        return self.upkeep.vector_index()

    def start_reindex(self, agent: str | None = None) -> dict[str, Any]:
        """Have every index take the rows in again (one agent's, or all): the fast ones at
        once, the vectors by embed_step (the daemon's indexer thread, or reindex())."""
        self.mirror_saves()
        name = None if agent is None else self.resolve(agent).agent
        return self.upkeep.start_reindex(name)

    def reindex(
        self, agent: str | None = None, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """start_reindex, then the vectors in this thread; progress(done, total) after each
        step. Returns how many rows the slow indexes took in."""
        started = self.start_reindex(agent)
        total = int(started["indexes"].get("vectors", {}).get("pending") or 0)
        return self.upkeep.finish_reindex(total, progress)

    def index_summary(self) -> dict[str, Any]:
        return self.upkeep.index_summary()

    @property
    def episodes(self) -> SessionIndex | None:
        return self.upkeep.episodes

    def episodes_step(self) -> int:
        return self.upkeep.episodes_step()

    # --- finding ------------------------------------------------------------------

    def search(
        self,
        agent: str | None,
        query: str,
        *,
        limit: int | None = None,
        mode: str = "hybrid",
        scope: str | None = None,
        min_similarity: float | None = None,
    ) -> SearchResult:
        """The agent's entries ranked for a query, best first (search.py says how)."""
        return self.finding.search(
            agent, query, limit=limit, mode=mode, scope=scope, min_similarity=min_similarity
        )

    @property
    def recall_ranks(self) -> bool:
        """Does recall answer by meaning and words, best first (memory.recall = hybrid)?"""
        return self.shared.recall_ranks

    def recall(self, agent: str | None, keyword: str) -> RecallResult:
        return self.finding.recall(agent, keyword)

    def recall_by_meaning(
        self, agent: str | None, question: str, limit: int | None = None
    ) -> RecallResult:
        return self.finding.recall_by_meaning(agent, question, limit)

    def search_episodes(
        self, agent: str | None, query: str, k: int = 5, exclude_session: str | None = None
    ) -> list[EpisodeHit]:
        return self.finding.search_episodes(agent, query, k, exclude_session)

    # --- prompting ----------------------------------------------------------------

    def build_context(
        self, agent: str | None, session: str | None = None, query: str | None = None
    ) -> str:
        """The memory block of the prompt: core whole, both headings always; archival the
        newest that fit, or with a query the most relevant beside them."""
        return self.prompting.build_context(agent, session, query)

    def archival_part(self, ref: AgentRef, query: str) -> ArchivalPart:
        return self.prompting.archival_part(ref, query)

    def build_prompt(
        self,
        agent: str | None,
        session: str | None = None,
        turns: int | None = None,
        query: str | None = None,
    ) -> Prompt:
        return self.prompting.build_prompt(agent, session, turns, query)

    # --- reading ------------------------------------------------------------------

    def get(self, agent: str | None) -> MemoryView:
        return self.reading.get(agent)

    def page(self, agent: str | None, scope: str, offset: int, limit: int, newest: bool) -> Page:
        return self.reading.page(agent, scope, offset, limit, newest)

    def find(self, agent: str | None, entry_id: str) -> tuple[AgentRef, Placed]:
        return self.reading.find(agent, entry_id)

    def agents(self) -> list[AgentSummary]:
        return self.reading.agents()

    # --- sessions and tools -------------------------------------------------------

    def create_session(self, agent: str | None) -> SessionInfo:
        return self.sessions.create_session(agent)

    def recent_sessions(self, agent: str | None, limit: int) -> list[SessionInfo]:
        return self.sessions.recent(agent, limit)

    def append_message(self, session_id: str, role: str, content: str) -> int:
        return self.sessions.append_message(session_id, role, content)

    def audit_log(self, agent: str | None, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` events of memory_history (of one agent, or all), newest
        first: what was added and removed, when, and by which source."""
        name = None if agent is None else self.resolve(agent).agent
        return rows.history(self.db, name, limit)

    def history(self, session_id: str, turns: int | None = None) -> list[dict[str, Any]]:
        return self.sessions.history(session_id, turns)

    def import_sessions(self, paths: Sequence[Path], agent: str | None) -> list[dict[str, Any]]:
        return self.sessions.import_sessions(paths, agent)

    def record_tool(self, record: ToolRecord) -> None:
        self.sessions.record_tool(record)
