"""MemoryService: the one write path and the one read facade.

Every save, whichever way it comes (the socket, the CLI, a tool call, a trigger
footprint), goes through ``save_batch``: checked and stamped, written to
MEMORY.md as one durable append (that is when it is acknowledged), then
mirrored into the rows of ``memory_entries``, whose change log feeds the derived
indexes. The daemon's group commit is this same path with its steps spread over
threads: ``prepare_batch`` on the memory thread, ``write_batch`` on a writer
thread per agent, ``finish_batch`` and ``mirror_saves`` back on the memory thread.

Reads go to the backend ``memory.backend`` names (oryxmem/registry.py). An
unsafe agent name falls back to the global memory file; every result says
which file served it and why.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oryxmem.clock import clock_for
from oryxmem.config import Config
from oryxmem.digest import folds_for
from oryxmem.errors import (
    EmbedderUnavailableError,
    EmptyContentError,
    EmptyKeywordError,
    InvalidContentError,
    InvalidFieldError,
    MemoryFileConflictedError,
    OryxError,
    SemanticSearchOffError,
    UnsafeAgentNameError,
    log_failure,
)
from oryxmem.fileio import FileStat, file_stat
from oryxmem.index import (
    DerivedIndex,
    catch_up,
    forget_others,
    is_caught_up,
    load_indexes,
    pending,
    read_index_state,
    rebuild,
    upcoming,
)
from oryxmem.index.bm25 import BM25Index
from oryxmem.index.episodes import EpisodeHit, EpisodeIndex
from oryxmem.index.keyword import KeywordIndex
from oryxmem.index.vectors import VectorIndex
from oryxmem.prompt import (
    ArchivalPart,
    Prompt,
    archival_for_query,
    episodes_part,
    memory_block,
    omitted_note,
    read_prompt_file,
)
from oryxmem.registry import BACKENDS
from oryxmem.schemas import tool_schemas
from oryxmem.search import MODES, POOL, rank
from oryxmem.store import rows
from oryxmem.store.base import LongTermMemoryStore, StoreLimits, StoreResources, fold_keyword
from oryxmem.store.db import (
    BUSY_TIMEOUT_MS,
    Executes,
    brief_wait,
    connect,
    is_locked,
    write_transaction,
)
from oryxmem.store.format import (
    ARCHIVAL,
    Entry,
    has_lone_surrogate,
    new_file_text,
)
from oryxmem.store.markdown import Append, MarkdownFiles, MarkdownMemoryStore
from oryxmem.store.sessions import SessionInfo, SessionStore, record_tool_invocation
from oryxmem.store.transcripts import read_transcript, transcript_files
from oryxmem.summarize import Server, model_lines
from oryxmem.workspace import (
    GLOBAL_AGENT,
    AgentRef,
    Workspace,
    agent_folder_problem,
    open_workspace,
    resolve_agent,
)

if TYPE_CHECKING:
    from sqlite_utils import Database

    from oryxmem.sync.engine import AgentReport, SyncEngine

log = logging.getLogger("oryxmem")
# A MEMORY.md this large costs more to parse (about 35 ms per MB) than a look at its
# rows through a read-only connection: a recall from the CLI asks the rows first.
ROWS_ANSWER_FROM_BYTES = 256 * 1024
# A search with no daemon to embed in the background embeds this many steps of the
# vector index first (64 rows a step), then answers and says what is left.
SEARCH_EMBED_STEPS = 16
# A hybrid recall returns an entry the keyword arm did not find only when its meaning is
# this close to the question (cosine): a recall of 'ci' in a two-entry memory is not
# answered with both.
RECALL_MIN_SIMILARITY = 0.25  # MiniLM: unrelated sentences score about 0.1
# How many ranked entries a prompt's relevant part is filled from (each taken if it fits).
RELEVANT_POOL = 60
FLUSH_WAIT_MS = 100  # what mirroring the saves before a new one waits for another's lock
EPISODES_SHOWN = 5  # rounds of other sessions a block with a query may show


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
    strategy: str = "keyword"  # memory.recall: keyword (every match, oldest first) or hybrid


@dataclass(frozen=True)
class SearchHit:
    entry: Entry
    score: float  # the fused score, 0 to 1
    arms: tuple[str, ...]  # which arms found it: keyword, semantic


@dataclass(frozen=True)
class SearchResult:
    agent: AgentRef
    query: str
    mode: str
    hits: list[SearchHit]
    unembedded: int  # entries the semantic arm has not embedded yet (not searched by it)
    # Set when the semantic arm could not answer (its embeddings server is down, say):
    # a hybrid search then answers by words alone, and says so here.
    note: str | None = None


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


@dataclass(frozen=True)
class SaveRequest:
    """One save as it arrives: what to write, where, and who asked (for the history)."""

    content: str
    scope: str = ARCHIVAL
    source: str = "api"

    @classmethod
    def footprint(
        cls, user_message: str, reply: str, max_chars: int, source: str = "api"
    ) -> SaveRequest:
        """The automatic footprint of one trigger, as an archival save."""
        return cls(footprint_line(user_message, reply, max_chars), ARCHIVAL, source)


Outcome = SaveResult | BaseException


@dataclass
class SaveBatch:
    """One agent's saves, written to MEMORY.md as one durable append."""

    ref: AgentRef
    requests: Sequence[SaveRequest]
    outcomes: list[Outcome | None]
    store: MarkdownMemoryStore | None = None
    prepared: list[tuple[int, Entry]] = field(default_factory=list)  # (request, entry)
    written: Append | None = None
    error: BaseException | None = None  # why the write failed

    def outcome(self, index: int) -> Outcome:
        result = self.outcomes[index]
        assert result is not None, "the batch has not been written"
        return result


@dataclass
class _Unmirrored:
    """Consecutive appends to one agent's file whose entries are not yet in the rows."""

    appends: list[Append]
    source: str
    since: float  # monotonic time of the first


class MemoryService:
    def __init__(
        self,
        workspace: Workspace,
        config: Config,
        *,
        db: Database | None = None,
        files: MarkdownFiles | None = None,
    ) -> None:
        """``files`` lets services in one process (the daemon's threads) share each file's
        store, so a write by one leaves the others' parsed copy current."""
        self.workspace = workspace
        self.config = config
        self.clock = clock_for(lambda: config.timezone)
        self.limits = StoreLimits.of(config)
        self._db = db
        self._owns_files = files is None  # shared stores are closed by their owner
        self.files = files or MarkdownFiles(workspace, clock=self.clock, limits=self.limits)
        self._backend: type[LongTermMemoryStore] | None = None
        self._readers: dict[str, LongTermMemoryStore] = {}
        self._indexes: dict[str, DerivedIndex] | None = None
        self._episodes: EpisodeIndex | None = None
        self._unmirrored: dict[str, _Unmirrored] = {}
        self._told_locked = False  # said once per spell that another program holds the lock
        # A search first brings the indexes up to the rows (and embeds a few batches), but
        # in the daemon: its memory thread keeps the keyword indexes current, its indexer
        # thread the vectors, and its readers only read.
        self.index_upkeep = True
        self.batches = 0
        self.saves = 0
        self.mirrors = 0

    @classmethod
    def open(cls, root: str | None = None) -> MemoryService:
        workspace = open_workspace(root)
        return cls(workspace, Config.load(workspace.config_path))

    @property
    def db(self) -> Database:
        """The workspace database, opened (and migrated) on first use."""
        if self._db is None:
            self._db = connect(self.workspace.db_path)
        return self._db

    def close(self) -> None:
        if self._owns_files:
            self.files.close()
        self._readers.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- agents ---------------------------------------------------------------

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

    @property
    def backend(self) -> type[LongTermMemoryStore]:
        """The configured backend's store class, imported on first use; a backend that
        cannot be loaded is a clear error for every call, saves included."""
        if self._backend is None:
            self._backend = BACKENDS.load(self.config.backend)
        return self._backend

    def reader(self, ref: AgentRef) -> LongTermMemoryStore:
        """The configured backend's store for this agent: what answers reads."""
        store = self._readers.get(ref.agent)
        if store is None:
            resources = StoreResources(
                self.workspace,
                self.config,
                self.files,
                lambda: self.db,
                self.clock,
                self.limits,
            )
            store = self._readers[ref.agent] = self.backend.for_agent(ref.agent, resources)
        return store

    # --- the write path -------------------------------------------------------

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
        outcome = self.save_batch(ref, [request]).outcome(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def save_batch(self, ref: AgentRef, requests: Sequence[SaveRequest]) -> SaveBatch:
        """Every step of a save, in this thread: one append for all of them, then the rows."""
        batch = self.prepare_batch(ref, requests)
        self.write_batch(batch)
        self.finish_batch(batch)
        self.mirror_saves(indexes_follow=True)
        return batch

    def being_written(self, ref: AgentRef) -> bool:
        """Is another program at work on this agent's MEMORY.md (an editor writing it
        again in place)? A save to it now would wait until it is done."""
        try:
            self.check_folder(ref)
            return self.files.get(ref.agent).being_written_by_others()
        except (OryxError, OSError):
            return False  # the save itself says what is wrong

    def prepare_batch(self, ref: AgentRef, requests: Sequence[SaveRequest]) -> SaveBatch:
        """Check and stamp each save; those refused get their error as their outcome."""
        batch = SaveBatch(ref, requests, [None] * len(requests))
        try:
            self.check_folder(ref)
            batch.store = self.files.get(ref.agent)
        except OryxError as error:
            batch.outcomes = [error] * len(requests)
            return batch
        if batch.store.being_written_by_others():  # this write will wait for quiet:
            self.mirror_saves()  # what was saved before is in the rows first, whatever comes
        for index, request in enumerate(requests):
            try:
                batch.prepared.append((index, batch.store.prepare(request.content, request.scope)))
            except OryxError as error:
                batch.outcomes[index] = error
        return batch

    @staticmethod
    def write_batch(batch: SaveBatch) -> None:
        """The durable append of a prepared batch. Touches only this agent's file, so the
        batches of different agents may be written side by side on other threads."""
        if not batch.prepared or batch.store is None:
            return
        try:
            batch.written = batch.store.append_many([e for _, e in batch.prepared])
        except Exception as error:  # finish_batch decides what the callers are told
            batch.error = error
            return
        for (index, _), entry in zip(batch.prepared, batch.written.entries, strict=True):
            batch.outcomes[index] = SaveResult(batch.ref, entry)

    def finish_batch(self, batch: SaveBatch) -> None:
        """After the write: queue the mirror, or keep saves the file refused (git conflict
        markers) in the database, or give every caller the error."""
        if batch.written is not None:
            self.batches += 1
            self.saves += len(batch.written.entries)
            self._queue_mirror(batch.ref.agent, batch.written, batch.requests[0].source)
        elif isinstance(batch.error, MemoryFileConflictedError):
            for index, entry in batch.prepared:
                batch.outcomes[index] = self._save_while_conflicted(
                    batch.ref, entry, batch.requests[index].source, batch.error
                )
        elif batch.error is not None:
            agent = batch.ref.agent or "(global)"
            if not isinstance(batch.error, OryxError) or batch.error.http_status >= 500:
                log_failure(log, f"saving to {agent} failed", batch.error)
            for index, _ in batch.prepared:
                batch.outcomes[index] = batch.error

    def _save_while_conflicted(
        self, ref: AgentRef, entry: Entry, source: str, error: MemoryFileConflictedError
    ) -> Outcome:
        """Keep a save that MEMORY.md cannot take (a git conflict) in SQLite until it can."""
        self.mirror_saves()
        try:
            with write_transaction(self.db):
                rows.insert_waiting_row(self.db, ref.agent, entry, source)
        except Exception as failure:  # neither side took it: the caller must hear so
            log_failure(log, f"keeping a save for {ref.describe()} failed", failure)
            return failure
        lines = ", ".join(map(str, error.data.get("conflict_lines", [])))
        reason = (
            f"MEMORY.md has git conflict markers (lines {lines}); the entry is kept in the"
            " database and written to the file once they are resolved"
        )
        log.warning("%s: %s", ref.describe(), reason)
        return SaveResult(ref, entry, deferred=reason)

    def _queue_mirror(self, agent: str, append: Append, source: str) -> None:
        pending = self._unmirrored.get(agent)
        if pending is not None and (
            pending.appends[-1].after != append.before or pending.source != source
        ):
            # Not a continuation of what is pending: mirror that first, waiting no longer
            # than the memory thread's own mirror would for another program's lock (a save
            # is answered already; the rows may wait, never the next answer).
            with brief_wait(self.db, FLUSH_WAIT_MS):
                self.mirror_saves()
            pending = self._unmirrored.get(agent)  # still there: the database was locked
        if pending is None:
            self._unmirrored[agent] = _Unmirrored([append], source, time.monotonic())
        else:
            pending.appends.append(append)

    @property
    def unmirrored_since(self) -> float | None:
        """When the oldest save not yet in the rows was written (monotonic), if any."""
        return min((p.since for p in self._unmirrored.values()), default=None)

    def mirror_saves(self, *, indexes_follow: bool = False) -> list[str]:
        """Every save written but not yet in the rows goes in, in one transaction (with
        ``indexes_follow``, the indexes that follow saves take a batch in it too). Returns
        the agents whose rows still lag their file (someone else wrote too): reconcile
        them soon. A failure here loses nothing (the files have every save) and is
        logged; sync catches up."""
        if not self._unmirrored:
            return []
        pending, self._unmirrored = self._unmirrored, {}
        lagging = list(pending)
        try:
            with write_transaction(self.db):
                for agent, saves in pending.items():
                    path = str(self.workspace.memory_path(agent))
                    if rows.mirror_appends(self.db, agent, path, saves.appends, saves.source):
                        lagging.remove(agent)
                    for repair in self.files.get(agent).take_repairs():
                        log.warning("%s", repair)
                        rows.record_history(self.db, agent, "repair", "file", None, repair)
                if indexes_follow:  # the rows of these saves, or a step of a rebuild
                    self._catch_up(self._following_saves(), max_steps=1)
            for agent in pending:  # committed: the log of answered saves may let go
                self.files.get(agent).rows_have_answered()
        except Exception as error:  # the file has them; sync mirrors them. The acks stand.
            if is_locked(error):  # another program holds the database: try again soon
                self._unmirrored = {**pending, **self._unmirrored}
                if not self._told_locked:
                    log.warning("the database is locked by another program; the rows wait")
                self._told_locked = True
                return []
            log_failure(log, "mirroring saves failed; sync will catch up", error)
        self.mirrors += 1
        self._told_locked = False
        return lagging

    # --- derived indexes ------------------------------------------------------

    @property
    def indexes(self) -> dict[str, DerivedIndex]:
        if self._indexes is None:
            self._indexes = load_indexes(self.config)
        return self._indexes

    def _following_saves(self) -> list[DerivedIndex]:
        return [index for index in self.indexes.values() if index.follows_saves]

    def _catch_up(self, indexes: Sequence[DerivedIndex], max_steps: int | None = None) -> int:
        return sum(catch_up(self.db, index, max_steps) for index in indexes)

    def catch_up_indexes(self, max_steps: int | None = None) -> int:
        """Bring the indexes that follow saves up to the rows (at most max_steps batches
        each). Returns the rows taken in; 0 when all were current."""
        behind = [index for index in self._following_saves() if not is_caught_up(self.db, index)]
        if not behind:
            return 0
        with write_transaction(self.db):
            forget_others(self.db, list(self.indexes))
            return self._catch_up(behind, max_steps)

    def embed_step(self) -> int:
        """One step of each slow index (the vectors): the rows of the next batch are
        prepared (embedded) outside any transaction, then taken in with a short write.
        Returns the rows taken in; 0 when all were current."""
        taken = 0
        for index in self.indexes.values():
            if index.follows_saves or is_caught_up(self.db, index):
                continue
            state = read_index_state(self.db, index)
            if state is None or state.identity != index.identity():
                with write_transaction(self.db):  # made (again), empty: quick
                    catch_up(self.db, index, max_steps=0)
            index.prepare(upcoming(self.db, index))  # the slow part: no lock held
            with write_transaction(self.db):
                taken += catch_up(self.db, index, max_steps=1)
        return taken

    def vector_index(self) -> VectorIndex | None:
        index = self.indexes.get("vectors")
        return index if isinstance(index, VectorIndex) else None

    def start_reindex(self, agent: str | None = None) -> dict[str, Any]:
        """Have every index take the rows in again (one agent's, or all): the fast ones at
        once, the vectors by embed_step (the daemon's indexer thread, or reindex())."""
        self.mirror_saves()
        name = None if agent is None else self.resolve(agent).agent
        with write_transaction(self.db):
            if name is None:
                for index in self.indexes.values():
                    rebuild(self.db, index)
            else:  # a change of each of its rows: every index takes them in again
                self.db.execute(
                    "INSERT INTO memory_changes(op, row_id, agent)"
                    " SELECT 'reindex', id, agent FROM memory_entries WHERE agent = ?",
                    [name],
                )
        self.catch_up_indexes()
        self.episodes.drop(self.db)  # made again from the sessions: by episodes_step
        where, args = ("", []) if name is None else (" WHERE agent = ?", [name])
        total = self.db.execute(f"SELECT count(*) FROM memory_entries{where}", args).fetchone()
        return {"agent": name, "entries": int(total[0]), "indexes": self.index_summary()}

    def reindex(
        self, agent: str | None = None, progress: Callable[[int, int], None] | None = None
    ) -> int:
        """start_reindex, then the vectors in this thread; progress(done, total) after each
        step. Returns how many rows the slow indexes took in."""
        started = self.start_reindex(agent)
        total = int(started["indexes"].get("vectors", {}).get("pending") or 0)
        done = 0
        while step := self.embed_step():
            done = min(done + step, total)
            if progress is not None:
                progress(done, total)
        while self.episodes_step():
            pass
        return done

    def index_summary(self) -> dict[str, Any]:
        """How far each index is behind the rows; the vectors' model too."""
        summary: dict[str, Any] = {}
        for name, index in self.indexes.items():
            summary[name] = {"pending": pending(self.db, index)}
            if isinstance(index, VectorIndex):
                summary[name]["model"] = index.embedder.model_id
        summary["episodes"] = {"pending": self.episodes.pending(self.db)}
        return summary

    # --- sync -----------------------------------------------------------------

    def sync_engine(self) -> SyncEngine:
        from oryxmem.sync.engine import SyncEngine  # on first use: most calls never sync

        return SyncEngine(self.workspace, self.db, self.files, self.config)

    def recover_answered(self) -> int:
        """Saves answered before a crash whose rows never came (store/answered.py): into
        the rows now, with their history, so reconcile puts back into MEMORY.md what an
        old copy of the file written meanwhile took out. Returns how many were missing."""
        missing_total = 0
        for agent in ["", *self.workspace.agent_names()]:
            store = self.files.get(agent)
            with store.lock.hold():
                noted = store.answered.entries()
                if not noted:
                    continue
                with write_transaction(self.db):
                    missing = rows.entries_not_in_rows(self.db, agent, noted)
                    rows.record_history_rows(
                        self.db, [rows.history_row(agent, "add", "recovered", e) for e in missing]
                    )
                    rows.insert_rows(self.db, agent, missing, "recovered")
                store.answered.forget()
            if missing:
                log.warning(
                    "%s: %d answered saves were not in the rows after a stop; taken in",
                    agent or "(global)",
                    len(missing),
                )
            missing_total += len(missing)
        return missing_total

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

    # --- reading --------------------------------------------------------------

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
        ref = self.resolve(agent)
        if mode not in MODES:
            raise InvalidFieldError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not query.strip():
            raise EmptyKeywordError("the search query is empty")
        if has_lone_surrogate(query):
            raise InvalidContentError("the search query holds a lone surrogate (not Unicode)")
        if mode == "semantic" and str(self.config.get("recall.embedder")) == "none":
            raise SemanticSearchOffError(
                "search by meaning is off (recall.embedder = none): search by words"
                " (mode keyword or hybrid), or set recall.embedder"
            )
        count = limit or int(self.config.get("recall.limit"))
        if self.index_upkeep:  # alone (no daemon keeps the rows and indexes current):
            self._settle_rows(ref.agent)  # a file edited since the last sync is read first
            self.catch_up_indexes()  # the keyword arm sees every row (cheap when current)
        vectors = None if mode == "keyword" else self.vector_index()
        bm25 = self.indexes["bm25"]
        assert isinstance(bm25, BM25Index)
        note = None
        try:
            if vectors is not None and self.index_upkeep:
                for _ in range(SEARCH_EMBED_STEPS):
                    if not self.embed_step():
                        break
            ranking = rank(self.db, ref.agent, query, POOL, mode, bm25, vectors)
        except EmbedderUnavailableError as error:
            if mode == "semantic":
                raise
            note = f"searched by words only: {error.message}"
            log.info("%s", note)  # the caller is told in the result (the CLI prints it)
            ranking = rank(self.db, ref.agent, query, POOL, "keyword", bm25, None)
        kept = [  # the words found it, or its meaning is close enough
            ranked
            for ranked in ranking.ranked
            if min_similarity is None
            or {"exact", "keyword"} & set(ranked.arms)
            or ranked.similarity >= min_similarity
        ]
        hits: list[SearchHit] = []
        for at in range(0, len(kept), count):  # the entries of the hits kept only
            chunk = kept[at : at + count]
            found = rows.entries_by_row_id(self.db, [r.row_id for r in chunk])
            for ranked in chunk:
                entry = found.get(ranked.row_id)
                if entry is None or (scope is not None and entry.scope != scope):
                    continue
                hits.append(SearchHit(entry, round(ranked.score, 6), ranked.arms))
            if len(hits) >= count:
                break
        return SearchResult(ref, query, mode, hits[:count], ranking.unembedded, note)

    def _settle_rows(self, agent: str) -> None:
        """Bring the rows up to the agent's file when it changed since sync last saw it
        (one stat and one read when it did not)."""
        stat = file_stat(self.workspace.memory_path(agent))
        if stat is not None and not rows.is_settled(self.db, agent, stat):
            self.sync_engine().reconcile_agent(agent)

    @property
    def recall_ranks(self) -> bool:
        """Does recall answer by meaning and words, best first (memory.recall = hybrid),
        rather than every entry holding the keyword, oldest first?"""
        return bool(self.config.get("memory.recall") == "hybrid")

    def recall(self, agent: str | None, keyword: str) -> RecallResult:
        """What recall_memory answers: memory.recall says hybrid (the best entries for the
        question, by meaning and words, best first) or keyword (DESIGN section 4)."""
        fold_keyword(keyword)  # an empty keyword is the same error either way
        if has_lone_surrogate(keyword):
            raise InvalidContentError("the keyword holds a lone surrogate (not Unicode)")
        if self.recall_ranks:
            return self.recall_by_meaning(agent, keyword)
        ref = self.resolve(agent)
        entries = self._recall_from_rows(ref.agent, keyword)
        if entries is not None:
            return RecallResult(ref, keyword, [entry.render() for entry in entries])
        return RecallResult(ref, keyword, self.reader(ref).recall(keyword))

    def recall_by_meaning(
        self, agent: str | None, question: str, limit: int | None = None
    ) -> RecallResult:
        """The archival entries that best answer a question, by meaning and words: those
        the words find, and those whose meaning is close enough (RECALL_MIN_SIMILARITY)."""
        result = self.search(
            agent, question, limit=limit, scope=ARCHIVAL, min_similarity=RECALL_MIN_SIMILARITY
        )
        lines = [hit.entry.render() for hit in result.hits]
        return RecallResult(result.agent, question, lines, "hybrid")

    def _recall_from_rows(self, agent: str, keyword: str) -> list[Entry] | None:
        """Recall through the keyword index when sync says the rows equal the file right
        now (None: the backend answers instead). Where the database is open anyway (the
        daemon), always; in a short-lived process (the CLI) only for a file large enough
        that parsing it costs more, through a plain read-only connection (no
        sqlite-utils, no migrations)."""
        folded = fold_keyword(keyword)
        stat = file_stat(self.workspace.memory_path(agent))
        if stat is None:
            return None
        index = self.indexes["keyword"]
        assert isinstance(index, KeywordIndex)
        if self._db is not None:
            return self._rows_if_settled(self._db, agent, stat, folded, index)
        if stat.size < ROWS_ANSWER_FROM_BYTES or not self.workspace.db_path.exists():
            return None
        uri = f"{self.workspace.db_path.as_uri()}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error:
            return None
        try:
            return self._rows_if_settled(conn, agent, stat, folded, index)
        except sqlite3.Error as error:  # an older schema, a locked file: the file answers
            log.info("recall from the rows of %s skipped: %s", agent or "(global)", error)
            return None
        finally:
            conn.close()

    @staticmethod
    def _rows_if_settled(
        db: Executes, agent: str, stat: FileStat, folded: str, index: KeywordIndex
    ) -> list[Entry] | None:
        return index.recall(db, agent, folded) if rows.is_settled(db, agent, stat) else None

    def get(self, agent: str | None) -> MemoryView:
        ref = self.resolve(agent)
        core, archival = self.reader(ref).entries()
        markdown = self.files.get(ref.agent).document().text or new_file_text()
        return MemoryView(ref, core, archival, markdown)

    def build_context(
        self, agent: str | None, session: str | None = None, query: str | None = None
    ) -> str:
        """The memory block of the prompt (prompt.py): core whole, both headings always;
        archival the newest that fit, or with a query the most relevant beside them."""
        ref = self.resolve(agent)
        if query is None or not query.strip():
            snapshot = self.reader(ref).load()
            core = snapshot.core
            part = ArchivalPart(
                [omitted_note(snapshot.archival.omitted)] if snapshot.archival.omitted else []
            )
            part.lines += snapshot.archival.lines
        else:
            core, _ = self.reader(ref).entries()
            part = self.archival_part(ref, query)
            episodes = self.relevant_episodes(ref, query, session)
            return memory_block(core, part, episodes_part(episodes, self.config.episodic_max_chars))
        return memory_block(core, part)

    def archival_part(self, ref: AgentRef, query: str) -> ArchivalPart:
        """The archival part of a block built for a query (prompt.archival_for_query)."""
        store = self.reader(ref)
        _, archival = store.entries()
        owner = str(self.workspace.db_path)
        server = Server.of(self.config)
        return archival_for_query(
            archival,
            self.relevant_entries(ref, query),
            self.config.archival_limit_chars,
            digest_share=int(self.config.get("summarize.digest_percent")) / 100,
            folds=lambda upto: folds_for(owner, ref.agent, archival, upto),
            rewrite=None if server is None else partial(model_lines, server),
            positions=store.archival_positions(archival),
        )

    def relevant_episodes(self, ref: AgentRef, query: str, session: str | None) -> list[EpisodeHit]:
        """The rounds of the agent's other sessions best for a query (a block's third part)."""
        try:
            return self.search_episodes(ref.agent or None, query, EPISODES_SHOWN, session)
        except (EmptyKeywordError, InvalidContentError):
            return []

    def relevant_entries(self, ref: AgentRef, query: str) -> list[Entry]:
        """The archival entries a hybrid search ranks best for a query (a prompt's
        relevant part); none when the query has nothing to search by."""
        try:
            result = self.search(
                ref.agent or None,
                query,
                limit=RELEVANT_POOL,
                scope=ARCHIVAL,
                min_similarity=RECALL_MIN_SIMILARITY,
            )
        except (EmptyKeywordError, InvalidContentError):
            return []
        return [hit.entry for hit in result.hits]

    def build_prompt(
        self,
        agent: str | None,
        session: str | None = None,
        turns: int | None = None,
        query: str | None = None,
    ) -> Prompt:
        """The four blocks (prompt.py): AGENT.md and the bootstrap files, the memory
        block (with a query, the relevant entries beside the newest), the session's
        last turns, the tools. oryxmem never writes AGENT.md or USER.md."""
        ref = self.resolve(agent)
        notes: list[str] = []
        files = []
        if ref.agent:
            path = self.workspace.memory_dir(ref.agent) / "AGENT.md"
            files.append(read_prompt_file(path, "AGENT.md", notes))
        for name in self.config.bootstrap_files:
            parts = Path(name).parts
            if Path(name).is_absolute() or ".." in parts or not parts:
                notes.append(f"{name} left out: bootstrap files are paths inside .oryxos/")
                continue
            files.append(read_prompt_file(self.workspace.os_dir / name, name, notes))
        memory = self.build_context(ref.agent, session, query)
        history = self.history(session, turns) if session else []
        tools = tool_schemas()["tools"]
        return Prompt([f for f in files if f is not None], memory, history, tools, notes)

    # --- episodes ---------------------------------------------------------------

    @property
    def episodes(self) -> EpisodeIndex:
        """The rounds of past sessions (index/episodes.py), embedded by the memories'
        embedder when there is one."""
        if self._episodes is None:
            vectors = self.vector_index()
            if vectors is None:
                self._episodes = EpisodeIndex(None, None)
            else:
                embedder = vectors.embedder
                self._episodes = EpisodeIndex(
                    lambda texts: embedder.embed(list(texts), "passage"),
                    embedder.query_vector,
                    embedder.model_id,
                )
        return self._episodes

    def episodes_step(self) -> int:
        """Take in the sessions whose messages changed since (one batch); 0: all current."""
        return self.episodes.catch_up(self.db)

    def search_episodes(
        self, agent: str | None, query: str, k: int = 5, exclude_session: str | None = None
    ) -> list[EpisodeHit]:
        """The agent's rounds of past sessions best for a query, best first."""
        ref = self.resolve(agent)
        if not query.strip():
            raise EmptyKeywordError("the search query is empty")
        if has_lone_surrogate(query):
            raise InvalidContentError("the search query holds a lone surrogate (not Unicode)")
        if self.index_upkeep:  # alone: the sessions appended since are taken in first
            while self.episodes_step():
                pass
        else:
            self.episodes.ensure(self.db)
        try:
            return self.episodes.search(self.db, ref.agent, query, k, exclude_session)
        except EmbedderUnavailableError as error:
            log.warning("episodes searched by words only: %s", error.message)
            words = EpisodeIndex(None, None, "")
            return words.search(self.db, ref.agent, query, k, exclude_session)

    def import_sessions(self, paths: Sequence[Path], agent: str | None) -> list[dict[str, Any]]:
        """Transcripts (JSONL, Claude Code session files, or folders of them) as sessions of
        the agent; each again adds only what it gained. Every file is read before any is
        written: one that cannot be read imports nothing."""
        ref = self.resolve(agent)
        transcripts = [
            (path, read_transcript(path))
            for given in paths
            for path in transcript_files(Path(given))
        ]
        report = []
        for path, transcript in transcripts:
            if not transcript.messages:
                report.append(
                    {
                        "file": str(path),
                        "source": transcript.key,
                        "added": 0,
                        "session": None,
                        "kind": transcript.kind,
                    }
                )
                continue
            session, added = self.sessions.import_messages(
                ref.agent, transcript.key, transcript.messages
            )
            report.append(
                {
                    "file": str(path),
                    "source": transcript.key,
                    "added": added,
                    "session": session,
                    "kind": transcript.kind,
                }
            )
        return report

    def agents(self) -> list[AgentSummary]:
        """The global file and every agent directory, with entry counts."""
        _ = self.backend  # one that cannot be loaded is the answer, not a problem per agent
        summaries = []
        for name in ["", *self.workspace.agent_names()]:
            try:
                core, archival = self.reader(AgentRef(name, name)).entries()
            except OryxError as error:
                summaries.append(AgentSummary(name, None, None, error.message))
                continue
            summaries.append(AgentSummary(name, len(core), len(archival), None))
        return summaries

    # --- sessions and tools ---------------------------------------------------

    @property
    def sessions(self) -> SessionStore:
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
