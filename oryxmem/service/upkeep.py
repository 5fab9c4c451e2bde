"""Index upkeep: the derived indexes kept up to the rows (oryxmem/index/).

The indexes that follow saves (keyword, BM25, "the words") take in the saves' rows in
steps of FOLLOW_ROWS, right after the mirror's transaction or before a search; a backlog
(more than BACKLOG_ROWS: a restore, a git pull, an import, a reindex) is taken in by
``words_step``, on the daemon's indexer thread, in steps prepared (stemmed) with no lock
held and written in short transactions, before any vector is embedded. The slow indexes
(the vectors) embed a batch with no lock held, then take it in with a short write
(``embed_step``); the indexes made from past sessions (the episodes) are taken in
session by session (``episodes_step``). A reindex has every index take the rows in
again. None of this is on the path that acknowledges a save.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from oryxmem.index import (
    DerivedIndex,
    IndexRow,
    SessionIndex,
    behind_by_more_than,
    built_state,
    catch_up,
    ensure_built,
    forget_others,
    is_caught_up,
    load_indexes,
    pending,
    rebuild,
    take_step,
    upcoming,
    waiting_rows,
)
from oryxmem.registry import INDEXES, arm_index, index_names, indexes_of
from oryxmem.service.shared import Shared
from oryxmem.store.db import read_snapshot, write_transaction

if TYPE_CHECKING:
    from oryxmem.index.vectors import VectorIndex

# The rows the indexes that follow saves take in at one step after a mirror or before a
# search: a few milliseconds of writes (their reading and stemming is done before).
FOLLOW_ROWS = 512
# More changes than this for an index to take in is a backlog (a restore, a git pull, an
# import, a reindex): the memory thread leaves it to the indexer thread's words_step, so
# that no save and no search waits for it (taking 1,000 in costs some 50 ms).
BACKLOG_ROWS = 1000
# A step of words_step: each holds the write lock for the rows' inserts only (their
# stemming is done before), some 10 ms.
WORDS_STEP_ROWS = 1000
RATE_SECONDS = 10.0  # the window of the indexing rate that health reports


class Upkeep:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._loaded: dict[str, DerivedIndex] = {}  # by name, each made once
        self._all = False
        self._arms: dict[str, str | None] = {}  # search arm -> the index that is it
        self._from_sessions: dict[str, SessionIndex] | None = None
        self._taken: deque[tuple[float, str, int]] = deque()  # (when, index, rows)
        self._taking_backlog: set[str] = set()  # the indexes words_step is taking one into

    @property
    def indexes(self) -> dict[str, DerivedIndex]:
        """Every registered index the settings use, in the registry's order."""
        names = self.names
        if not self._all:
            self._load([name for name in names if name not in self._loaded])
            self._all = True
        return {name: self._loaded[name] for name in names if name in self._loaded}

    @cached_property
    def every_name(self) -> tuple[str, ...]:
        """The indexes this workspace keeps: the built-in ones and index.plugins'."""
        return index_names(str(self.shared.config.get("index.plugins")))

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Those made from the rows."""
        return indexes_of(self.every_name, "rows")

    def _arm_name(self, arm: str) -> str | None:
        if arm not in self._arms:  # which index is which arm does not change: asked once
            self._arms[arm] = arm_index(self.every_name, arm)
        return self._arms[arm]

    def arm(self, arm: str) -> DerivedIndex | None:
        """The index that is the search arm ``arm`` ("words", "meaning"), if one is kept."""
        name = self._arm_name(arm)
        return None if name is None else self.indexes.get(name)

    def _load(self, names: Sequence[str]) -> None:
        self._loaded.update(load_indexes(self.shared.config, names))

    def following_saves(self) -> list[DerivedIndex]:
        """The indexes that take a save's rows in with it; a save alone loads only these."""
        if not self._all:
            names = self.names
            fast = [n for n in names if INDEXES.plugin(n).follows_saves and n not in self._loaded]
            self._load(fast)
            chosen = [self._loaded[n] for n in names if n in self._loaded]
        else:
            chosen = list(self.indexes.values())
        return [index for index in chosen if index.follows_saves]

    def _catch_up(
        self, indexes: Sequence[DerivedIndex], max_steps: int | None, rows: int | None = None
    ) -> int:
        return sum(catch_up(self.shared.index_db, index, max_steps, rows) for index in indexes)

    def take_a_step(self) -> int:
        """After a mirror: one step of FOLLOW_ROWS of each index that follows saves (the
        saves' rows, or a step of a rebuild), prepared with no lock held."""
        return sum(self._prepared_steps(self.following_saves(), FOLLOW_ROWS).values())

    def catch_up_indexes(self, max_steps: int | None = None) -> int:
        """Bring the indexes that follow saves up to the rows (at most max_steps batches
        each). Returns the rows taken in; 0 when all were current."""
        db = self.shared.index_db
        behind = [index for index in self.following_saves() if not is_caught_up(db, index)]
        if not behind:
            return 0
        with write_transaction(db):
            forget_others(db, list(self.indexes))
            return self._catch_up(behind, max_steps)

    def follow_saves(self) -> int:
        """In the daemon, before a search and when the memory thread is idle: the indexes
        that follow saves take in what they lack, unless that is a backlog (more than
        BACKLOG_ROWS), which the indexer thread takes in (words_step) while searches
        answer without it and say so. Each step's rows are read and prepared (stemmed)
        with no lock held, then taken in with a short write. Returns the rows taken in."""
        db = self.shared.index_db
        behind = [index for index in self.following_saves() if not is_caught_up(db, index)]
        if not behind:
            return 0
        small = [index for index in behind if not behind_by_more_than(db, index, BACKLOG_ROWS)]
        self._ensure_built(behind)  # one never built here is made, empty, to be searched
        taken = 0
        while small and (took := sum(self._prepared_steps(small, FOLLOW_ROWS).values())):
            taken += took
            small = [index for index in small if not is_caught_up(db, index)]
        return taken

    def words_caught_up(self) -> bool:
        """Have the indexes that follow saves taken in every row?"""
        return all(is_caught_up(self.shared.index_db, index) for index in self.following_saves())

    def words_step(self) -> int:
        """One step of each index that follows saves and has a backlog (more than
        BACKLOG_ROWS to take in; once begun, taken to its end): its rows read and
        prepared (stemmed) with no lock held, then taken in with a short write. The
        daemon's indexer runs this before any embedding, so the cheap arms have a
        backlog in seconds; what the saves bring is the memory thread's (two writers of
        one index would wait on each other's lock, and a save on the memory thread's).
        Returns the rows taken in; 0: no backlog."""
        db = self.shared.index_db
        stepping = []
        for index in self.following_saves():
            if is_caught_up(db, index):
                self._taking_backlog.discard(index.name)
                continue
            if index.name not in self._taking_backlog:  # a backlog it takes to the end
                if not behind_by_more_than(db, index, BACKLOG_ROWS):
                    continue
                self._taking_backlog.add(index.name)
            stepping.append(index)
        return self._backlog_steps(stepping, WORDS_STEP_ROWS)

    def rows_to_embed(self) -> Literal["none", "trickle", "batch"]:
        """What the slow indexes (the vectors) lack: nothing, a trickle (some rows, fewer
        than one batch of each) or a batch. Each counted up to its batch: a probe,
        whatever the backlog."""
        db = self.shared.index_db
        slow = [index for index in self.indexes.values() if not index.follows_saves]
        waiting = [waiting_rows(db, index, index.batch) for index in slow]
        if not any(waiting):
            return "none"
        if all(n < i.batch for n, i in zip(waiting, slow, strict=True)):
            return "trickle"
        return "batch"

    def embed_step(self) -> int:
        """One step of each slow index (the vectors): the rows of the next batch are
        prepared (embedded) outside any transaction, then taken in with a short write.
        Returns the rows taken in; 0 when all were current."""
        db = self.shared.index_db
        taken = 0
        for index in self.indexes.values():
            if index.follows_saves or is_caught_up(db, index):
                continue
            taken += self._backlog_steps([index])
        return taken

    def _backlog_steps(self, indexes: Sequence[DerivedIndex], rows: int | None = None) -> int:
        """_prepared_steps of a backlog's indexes, their rows counted in rates()."""
        taken = self._prepared_steps(indexes, rows)
        for name, took in taken.items():
            self._note_taken(name, took)
        return sum(taken.values())

    def _prepared_steps(
        self, indexes: Sequence[DerivedIndex], rows: int | None = None
    ) -> dict[str, int]:
        """One step of catch_up of each index: its rows read and prepared (stemmed,
        embedded) with no lock held, then all taken in with one short write that goes no
        further than what was prepared (saves that came meanwhile are the next step's).
        Returns the rows each index took in (none: every one was current)."""
        if not indexes:
            return {}
        db = self.shared.index_db
        self._ensure_built(indexes)
        # The rows each step reads, kept for the next index's: read in one snapshot, a
        # row read once is what every step would have read.
        known: dict[int, IndexRow | None] = {}
        with read_snapshot(db):
            ahead = [(i, step) for i in indexes if (step := upcoming(db, i, rows, known))]
        if not ahead:
            return {}
        for index, step in ahead:
            index.prepare(step.rows)  # the slow part
        with write_transaction(db):
            return {index.name: take_step(db, index, step, rows) for index, step in ahead}

    def _ensure_built(self, indexes: Sequence[DerivedIndex]) -> None:
        """Make the indexes not built here at their version (empty, to be caught up)."""
        db = self.shared.index_db
        unbuilt = [index for index in indexes if built_state(db, index) is None]
        if unbuilt:
            with write_transaction(db):
                for index in unbuilt:
                    ensure_built(db, index)

    def _note_taken(self, name: str, rows: int) -> None:
        now = time.monotonic()
        self._taken.append((now, name, rows))
        while self._taken and self._taken[0][0] < now - RATE_SECONDS:
            self._taken.popleft()

    def rates(self) -> dict[str, float]:
        """Rows/s each index took in by words_step and embed_step over the last
        RATE_SECONDS (the pace of a backlog; saves' own rows are not counted)."""
        since = time.monotonic() - RATE_SECONDS
        rates: dict[str, float] = {}
        for when, name, rows in list(self._taken):
            if when >= since:
                rates[name] = rates.get(name, 0.0) + rows / RATE_SECONDS
        return rates

    def vector_index(self) -> VectorIndex | None:
        from oryxmem.index.vectors import VectorIndex  # numpy: only where vectors are asked for

        index = self.indexes.get("vectors")
        return index if isinstance(index, VectorIndex) else None

    def start_reindex(self, agent: str | None) -> dict[str, Any]:
        """Have every index take the rows in again (one agent's, or all): the fast ones at
        once, the vectors by embed_step (the daemon's indexer thread, or reindex())."""
        db = self.shared.index_db
        if agent is None:
            with write_transaction(db):
                for index in self.indexes.values():
                    rebuild(db, index)
        else:  # a change of each of its rows (in the rows' file): every index takes them in
            rows_db = self.shared.db
            with write_transaction(rows_db):
                rows_db.execute(
                    "INSERT INTO memory_changes(op, row_id, agent)"
                    " SELECT 'reindex', id, agent FROM memory_entries WHERE agent = ?",
                    [agent],
                )
        self.catch_up_indexes()
        for from_sessions in self.from_sessions.values():
            from_sessions.drop(db)  # made again from the sessions: by episodes_step
        where, args = ("", []) if agent is None else (" WHERE agent = ?", [agent])
        total = db.execute(f"SELECT count(*) FROM memory_entries{where}", args).fetchone()
        return {"agent": agent, "entries": int(total[0]), "indexes": self.index_summary()}

    def finish_reindex(self, total: int, progress: Callable[[int, int], None] | None) -> int:
        """The vectors and the episodes in this thread, after start_reindex; progress(done,
        total) after each step. Returns how many rows the slow indexes took in."""
        done = 0
        while step := self.embed_step():
            done = min(done + step, total)
            if progress is not None:
                progress(done, total)
        while self.episodes_step():
            pass
        return done

    def index_summary(self) -> dict[str, Any]:
        """How far each index is behind the rows, all read in one snapshot (a step that
        commits meanwhile shows in every index it moved, or in none); the vectors' model
        too."""
        summary: dict[str, Any] = {}
        vectors = self.vector_index()
        with read_snapshot(self.shared.index_db) as db:
            for name, index in self.indexes.items():
                summary[name] = {"pending": pending(db, index)}
                if index is vectors:
                    summary[name]["model"] = vectors.embedder.model_id
            for name, from_sessions in self.from_sessions.items():
                summary[name] = {"pending": from_sessions.pending(db)}
        return summary

    # --- the indexes made from sessions ------------------------------------------

    @property
    def from_sessions(self) -> dict[str, SessionIndex]:
        """The indexes made from past sessions (the episodes), by name, each built with
        the memories' embedder when there is one."""
        if self._from_sessions is None:
            vectors = self.vector_index()
            embedder = vectors.embedder if vectors is not None else None
            self._from_sessions = {
                name: INDEXES.load(name).for_embedder(embedder)
                for name in indexes_of(self.every_name, "sessions")
            }
        return self._from_sessions

    @property
    def episodes(self) -> SessionIndex | None:
        """The index that is the "episodes" arm: what a search of past sessions asks."""
        name = self._arm_name("episodes")
        return None if name is None else self.from_sessions.get(name)

    def episodes_step(self) -> int:
        """Each index made from sessions takes in the sessions whose messages changed
        since (one batch); 0: all current."""
        db = self.shared.index_db
        return sum(index.catch_up(db) for index in self.from_sessions.values())
