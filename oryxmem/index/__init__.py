"""Derived indexes: everything that answers a search, fed from the change log.

The rows of ``memory_entries`` are the contract; an index is derived from them
and may lag, be rebuilt or be dropped without touching them. Each registered
index (``oryxmem.registry.INDEXES``) keeps its own tables and one line of
``index_state``: its version, its cursor in ``memory_changes`` (every write to
the rows is logged there by a trigger) and, while it is being rebuilt, the row
id below which rows are still to be taken in (newest first). Catching up takes
the changes after the cursor, removes the rows they name from the index and adds
back those that still exist, then continues a rebuild in batches; an index
whose version changed is dropped and rebuilt (its migrations are that simple,
because everything in it can be made again from the rows). Nothing here is on
the path that acknowledges a save.

A new index is one file with a ``DerivedIndex`` subclass and one line in
``oryxmem/registry.py``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from oryxmem.config import Config
from oryxmem.registry import INDEXES
from oryxmem.store.db import Executes, select_in

if TYPE_CHECKING:
    from sqlite_utils import Database


@dataclass(frozen=True)
class IndexRow:
    """A row as an index takes it in."""

    row_id: int
    agent: str
    scope: str
    ts: str | None
    content: str


@dataclass(frozen=True)
class Hit:
    """One row an index found for a query, and how well it matched (higher is better)."""

    row_id: int
    score: float


class DerivedIndex(ABC):
    """One way to find rows. Subclasses say how to store, drop and search them."""

    name: ClassVar[str]
    # Bump when what the index stores changes: the index is dropped and rebuilt.
    version: ClassVar[int] = 1
    # Rows (or changes) one step of catching up takes: small for slow indexes.
    batch: ClassVar[int] = 5000
    # Cheap enough to catch up with every mirror of saves (else: in the background).
    follows_saves: ClassVar[bool] = True

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config.defaults()

    def identity(self) -> int:
        """What must match for the stored index to be reused (its version by default;
        an index whose content depends on a setting folds that in)."""
        return self.version

    @abstractmethod
    def create(self, db: Database) -> None:
        """Create this index's tables (empty)."""

    @abstractmethod
    def drop(self, db: Database) -> None:
        """Drop this index's tables."""

    @abstractmethod
    def remove(self, db: Database, row_ids: Sequence[int]) -> None:
        """Forget these rows (some may not be in the index)."""

    @abstractmethod
    def add(self, db: Database, rows: Sequence[IndexRow]) -> None:
        """Take in these rows (none of them is in the index)."""

    @abstractmethod
    def search(self, db: Executes, agent: str, query: str, limit: int | None) -> list[Hit]:
        """The agent's rows that match query, best first (at most limit of them)."""


@dataclass(frozen=True)
class IndexState:
    identity: int
    cursor: int  # the last memory_changes.seq taken in
    backfill_below: int  # rows with a smaller id are still to be taken in (0: none)


def load_indexes(config: Config, names: Sequence[str] | None = None) -> dict[str, DerivedIndex]:
    """Instances of the registered indexes (all of them, or those named)."""
    chosen = INDEXES.names() if names is None else names
    return {name: INDEXES.load(name)(config) for name in chosen}


def read_index_state(db: Executes, index: DerivedIndex) -> IndexState | None:
    row = db.execute(
        "SELECT version, cursor, coalesce(backfill_below, 0) FROM index_state WHERE name = ?",
        [index.name],
    ).fetchone()
    return None if row is None else IndexState(int(row[0]), int(row[1]), int(row[2]))


def _latest_seq(db: Executes) -> int:
    return int(db.execute("SELECT coalesce(max(seq), 0) FROM memory_changes").fetchone()[0])


def _write_state(db: Database, index: DerivedIndex, state: IndexState) -> None:
    db.execute(
        "INSERT INTO index_state(name, version, cursor, backfill_below, built_at)"
        " VALUES (?, ?, ?, ?, strftime('%Y-%m-%d %H:%M:%S', 'now', 'localtime'))"
        " ON CONFLICT(name) DO UPDATE SET version = excluded.version, cursor = excluded.cursor,"
        " backfill_below = excluded.backfill_below, built_at = excluded.built_at",
        [index.name, state.identity, state.cursor, state.backfill_below],
    )


def rebuild(db: Database, index: DerivedIndex) -> None:
    """Drop the index and start taking every row in again (newest first, by catch_up).
    The caller holds a write transaction."""
    index.drop(db)
    index.create(db)
    top = db.execute("SELECT coalesce(max(id), 0) + 1 FROM memory_entries").fetchone()[0]
    _write_state(db, index, IndexState(index.identity(), _latest_seq(db), int(top)))


def reindex_agent(db: Database, index: DerivedIndex, agent: str) -> int:
    """Take one agent's rows in again (after catching up); the caller holds a write
    transaction. Returns how many rows."""
    ids = [row[0] for row in db.execute("SELECT id FROM memory_entries WHERE agent = ?", [agent])]
    for at in range(0, len(ids), index.batch):
        chunk = ids[at : at + index.batch]
        index.remove(db, chunk)
        index.add(db, _rows(db, chunk))
    return len(ids)


def pending(db: Executes, index: DerivedIndex, agent: str | None = None) -> int | None:
    """How many of the rows' changes the index has not taken in yet (None: it was never
    built here). With an agent, only that agent's."""
    state = read_index_state(db, index)
    if state is None or state.identity != index.identity():
        where, args = ("WHERE agent = ?", [agent]) if agent is not None else ("", [])
        return int(db.execute(f"SELECT count(*) FROM memory_entries {where}", args).fetchone()[0])
    args = [agent] if agent is not None else []
    changes = db.execute(
        "SELECT count(DISTINCT row_id) FROM memory_changes WHERE seq > ?"
        + (" AND agent = ?" if agent is not None else ""),
        [state.cursor, *args],
    ).fetchone()[0]
    backfill = db.execute(  # by row id ('+agent': the rows below the mark, not the agent's)
        "SELECT count(*) FROM memory_entries WHERE id < ?"
        + (" AND +agent = ?" if agent is not None else ""),
        [state.backfill_below, *args],
    ).fetchone()[0]
    return int(changes) + int(backfill)


def unindexed_row_ids(db: Executes, index: DerivedIndex, agent: str) -> list[int] | None:
    """The agent's rows whose current text the index may not have (None: it has none)."""
    state = read_index_state(db, index)
    if state is None or state.identity != index.identity():
        return None
    rows = db.execute(
        "SELECT row_id FROM memory_changes WHERE seq > ? AND agent = ?", [state.cursor, agent]
    ).fetchall()
    if state.backfill_below:  # by row id ('+agent': not the agent's index, all its rows)
        rows += db.execute(
            "SELECT id FROM memory_entries WHERE id < ? AND +agent = ?",
            [state.backfill_below, agent],
        ).fetchall()
    return sorted({row[0] for row in rows})


def is_caught_up(db: Executes, index: DerivedIndex) -> bool:
    """One probe: has the index taken in every change, and finished any rebuild?"""
    state = read_index_state(db, index)
    if state is None or state.identity != index.identity() or state.backfill_below:
        return False
    later = db.execute("SELECT 1 FROM memory_changes WHERE seq > ? LIMIT 1", [state.cursor])
    return later.fetchone() is None


def catch_up(db: Database, index: DerivedIndex, max_steps: int | None = None) -> int:
    """Take in changes since the cursor, then continue a rebuild; the caller holds a write
    transaction. At most max_steps batches (None: until caught up). Returns the rows
    taken in."""
    state = read_index_state(db, index)
    if state is None or state.identity != index.identity():
        rebuild(db, index)
        state = read_index_state(db, index)
        assert state is not None
    taken = steps = 0
    while max_steps is None or steps < max_steps:
        steps += 1
        changes = db.execute(
            "SELECT seq, row_id, op FROM memory_changes WHERE seq > ? ORDER BY seq LIMIT ?",
            [state.cursor, index.batch],
        ).fetchall()
        if changes:
            row_ids = sorted({row_id for _, row_id, _ in changes})
            # A row only ever inserted since the cursor is not in the index yet (a row id
            # used again comes after its row's delete, which is among the changes too).
            index.remove(db, sorted({row_id for _, row_id, op in changes if op != "insert"}))
            index.add(db, _rows(db, row_ids))
            state = IndexState(state.identity, changes[-1][0], state.backfill_below)
        elif state.backfill_below:
            rows = db.execute(
                "SELECT id FROM memory_entries WHERE id < ? ORDER BY id DESC LIMIT ?",
                [state.backfill_below, index.batch],
            ).fetchall()
            row_ids = [row[0] for row in rows]
            index.remove(db, row_ids)
            index.add(db, _rows(db, row_ids))
            below = row_ids[-1] if len(row_ids) == index.batch else 0  # 0: none are left
            state = IndexState(state.identity, state.cursor, below)
        else:
            break
        taken += len(row_ids)
        _write_state(db, index, state)
    return taken


def _rows(db: Executes, row_ids: Sequence[int]) -> list[IndexRow]:
    """The rows with these ids that still exist and hold text."""
    return [
        IndexRow(row_id, agent, str(scope), ts, content)
        for row_id, agent, scope, ts, content in select_in(
            db,
            "SELECT id, agent, scope, ts, content FROM memory_entries WHERE id IN ({marks})",
            row_ids,
        )
        if isinstance(content, str) and isinstance(agent, str)
    ]
