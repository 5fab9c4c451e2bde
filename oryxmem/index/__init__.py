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

A new index is one file with a ``DerivedIndex`` subclass, declared as a plugin
(``oryxmem.registry.Plugin`` under the entry point group ``oryxmem.indexes``). An
index made from the messages of past sessions rather than the rows (the episodes)
is a ``SessionIndex``, declared with ``source="sessions"``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from oryxmem.config import Config
from oryxmem.registry import INDEXES, index_names, indexes_of
from oryxmem.store.db import Executes, select_in

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from oryxmem.store.db import Database


class IndexRow(NamedTuple):
    """A row as an index takes it in (a tuple: a step makes thousands of them, and a
    tuple is made at a fraction of a frozen dataclass's cost)."""

    row_id: int
    agent: str
    scope: str
    ts: str | None
    content: str
    seq: int  # its place in its section


@dataclass(frozen=True)
class Hit:
    """One row an index found for a query, and how well it matched (higher is better)."""

    row_id: int
    score: float


@dataclass(frozen=True)
class RankedWords:
    """What a words arm found, best first, as arrays in one order: the row ids, their
    scores (higher is better), and whether each was found by its own words (else only
    by the words around it); and the contents casefolded of the agent's rows it holds
    in memory, by row id (None: it holds none), so a search need not read them."""

    row_ids: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    own: npt.NDArray[np.bool_]
    texts: Mapping[int, str] | None = None

    @staticmethod
    def none() -> RankedWords:
        import numpy as np  # (only a search asks: numpy is loaded for it)

        return RankedWords(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.bool_))


class DerivedIndex(ABC):
    """One way to find rows. Subclasses say how to store, drop and search them."""

    name: ClassVar[str]
    # Bump when what the index stores changes: the index is dropped and rebuilt.
    version: ClassVar[int] = 1
    # Rows (or changes) one step of catching up takes: small for slow indexes.
    batch: ClassVar[int] = 5000
    # Cheap enough to catch up with every mirror of saves (else: in the background).
    follows_saves: ClassVar[bool] = True

    @classmethod
    def enabled(cls, config: Config) -> bool:
        """Whether this workspace's settings use the index at all."""
        return True

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

    def prepare(self, rows: Sequence[IndexRow]) -> None:  # noqa: B027 (most need nothing)
        """Work add() will need for these rows that can be done before the write lock is
        taken (embedding them, stemming them): add() then holds the lock for its writes
        only. Nothing by default."""

    def dependents(self, db: Executes, row_ids: Sequence[int]) -> list[int]:
        """Other rows whose entry in this index changes when these rows change (an index
        that keeps a row's neighbours with it says which); none by default."""
        return []

    def carry_over(self, db: Database, stored: int) -> bool:
        """Tables stored for another identity (``stored``): bring them to this one in
        place, keeping what they hold, and say so; or say no (the default), and they are
        dropped and made again from the rows. The caller holds a write transaction."""
        return False


class SessionIndex(Protocol):
    """An index made from the sessions' messages (sessions.messages_json), not the rows:
    it keeps its own note of how far it has read each session. Built by its class's
    ``for_embedder(embedder or None)``; searched as the "episodes" arm."""

    def ensure(self, db: Database) -> None:
        """Its tables, made (again) when missing or made for another version."""

    def drop(self, db: Database) -> None:
        """Drop its tables: made again from the sessions."""

    def pending(self, db: Executes) -> int:
        """How many sessions changed since it last read them."""

    def catch_up(self, db: Database) -> int:
        """Read one batch of the changed sessions; 0: it is current."""

    def search(
        self, db: Executes, agent: str, query: str, k: int, exclude_session: str | None
    ) -> list[Any]:
        """The agent's best rounds for the query, best first."""


@dataclass(frozen=True)
class IndexState:
    identity: int
    cursor: int  # the last memory_changes.seq taken in
    backfill_below: int  # rows with a smaller id are still to be taken in (0: none)


def load_indexes(config: Config, names: Sequence[str] | None = None) -> dict[str, DerivedIndex]:
    """Instances of the indexes the settings use (the built-in ones and index.plugins',
    or those named)."""
    every = index_names(str(config.get("index.plugins")))
    chosen = indexes_of(every, "rows") if names is None else names
    classes = {name: INDEXES.load(name) for name in chosen}
    return {name: cls(config) for name, cls in classes.items() if cls.enabled(config)}


def forget_others(db: Database, kept: Sequence[str]) -> None:
    """Drop the cursors of indexes no longer in use, so they hold no changes back."""
    marks = ", ".join("?" * len(kept))
    db.execute(f"DELETE FROM index_state WHERE name NOT IN ({marks})", list(kept))


def read_index_state(db: Executes, index: DerivedIndex) -> IndexState | None:
    row = db.execute(
        "SELECT version, cursor, coalesce(backfill_below, 0) FROM index_state WHERE name = ?",
        [index.name],
    ).fetchone()
    return None if row is None else IndexState(int(row[0]), int(row[1]), int(row[2]))


def built_state(db: Executes, index: DerivedIndex) -> IndexState | None:
    """The index's state, when it was built here at its version (None: not yet, or
    built for another version, and so to be made again)."""
    state = read_index_state(db, index)
    return None if state is None or state.identity != index.identity() else state


def ensure_built(db: Database, index: DerivedIndex) -> None:
    """Make the index (again), empty, when it was not built here at its version: quick;
    or carry over what was built for its previous version, when it can. The caller holds
    a write transaction."""
    if built_state(db, index) is not None:
        return
    stored = read_index_state(db, index)
    if stored is not None and index.carry_over(db, stored.identity):
        write_index_state(db, index, replace(stored, identity=index.identity()))
    else:
        rebuild(db, index)


def _latest_seq(db: Executes) -> int:
    return int(db.execute("SELECT coalesce(max(seq), 0) FROM memory_changes").fetchone()[0])


def write_index_state(db: Database, index: DerivedIndex, state: IndexState) -> None:
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
    write_index_state(db, index, IndexState(index.identity(), _latest_seq(db), int(top)))


def pending(db: Executes, index: DerivedIndex, agent: str | None = None) -> int | None:
    """How many of the rows' changes the index has not taken in yet (None: it was never
    built here). With an agent, only that agent's."""
    state = built_state(db, index)
    if state is None:
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
    state = built_state(db, index)
    if state is None:
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


def newest_changed(db: Executes, index: DerivedIndex, agent: str, limit: int) -> list[int]:
    """Up to limit of the agent's rows changed since the index's cursor (saved, edited or
    deleted a moment ago), the latest first. Rows a rebuild has not reached are not
    among them (none while the index was never built here)."""
    state = built_state(db, index)
    if state is None:
        return []
    changed = db.execute(
        "SELECT row_id FROM memory_changes WHERE seq > ? AND agent = ?"
        " GROUP BY row_id ORDER BY max(seq) DESC LIMIT ?",
        [state.cursor, agent, limit],
    ).fetchall()
    return [row[0] for row in changed]


def is_caught_up(db: Executes, index: DerivedIndex) -> bool:
    """One probe: has the index taken in every change, and finished any rebuild?"""
    state = built_state(db, index)
    if state is None or state.backfill_below:
        return False
    later = db.execute("SELECT 1 FROM memory_changes WHERE seq > ? LIMIT 1", [state.cursor])
    return later.fetchone() is None


@dataclass(frozen=True)
class Step:
    """One batch of catching up: rows to forget, rows to take in, the state it was read
    from and the state after."""

    stale: list[int]
    rows: list[IndexRow]
    before: IndexState
    after: IndexState


def next_step(
    db: Executes,
    index: DerivedIndex,
    state: IndexState,
    rows: int | None = None,
    through: int | None = None,
    known: dict[int, IndexRow | None] | None = None,
) -> Step | None:
    """The next batch after this state (of ``rows``, or the index's own batch): changes
    since the cursor first (none after the change ``through``, when given), then a
    rebuild (newest rows first). None: caught up. Reads only (the rows read are kept
    in ``known``, and those already there not read again: see index_rows)."""
    size = rows or index.batch
    until, bound = ("", []) if through is None else (" AND seq <= ?", [through])
    changes = db.execute(
        f"SELECT seq, row_id, op FROM memory_changes WHERE seq > ?{until} ORDER BY seq LIMIT ?",
        [state.cursor, *bound, size],
    ).fetchall()
    if changes:
        changed = {row_id for _, row_id, _ in changes}
        # Forgotten first, even a row only inserted since the cursor: an earlier step may
        # have taken it in already, as a dependent of a row before it.
        row_ids = sorted(changed | set(index.dependents(db, sorted(changed))))
        after = IndexState(state.identity, changes[-1][0], state.backfill_below)
        return Step(row_ids, index_rows(db, row_ids, known), state, after)
    if state.backfill_below:
        found = db.execute(
            "SELECT id FROM memory_entries WHERE id < ? ORDER BY id DESC LIMIT ?",
            [state.backfill_below, size],
        ).fetchall()
        row_ids = [row[0] for row in found]
        below = row_ids[-1] if len(row_ids) == size else 0  # 0: none are left
        after = IndexState(state.identity, state.cursor, below)
        return Step(row_ids, index_rows(db, row_ids, known), state, after)
    return None


def upcoming(
    db: Executes,
    index: DerivedIndex,
    rows: int | None = None,
    known: dict[int, IndexRow | None] | None = None,
) -> Step | None:
    """The next step of catch_up (of ``rows``; None while the index is not built at its
    version, or is current): what an index prepares outside the write lock, and then
    takes in with take_step, so that changes that came in between wait for the next
    step instead of being prepared under the lock."""
    state = built_state(db, index)
    return None if state is None else next_step(db, index, state, rows, known=known)


def take_step(db: Database, index: DerivedIndex, step: Step, rows: int | None = None) -> int:
    """Take in a step read (by upcoming) before the write lock was taken; the caller holds
    it now. The step is taken as read while the index is still where it was read from:
    a row changed or deleted since has a later change, which a later step takes in, so
    nothing is read again under the lock. If the index moved meanwhile (another step, a
    rebuild), the next step is read again, of ``rows`` as upcoming's was, going no
    further in the changes than it did. Returns the rows taken in."""
    if built_state(db, index) == step.before:
        return _apply(db, index, step)
    return catch_up(db, index, max_steps=1, rows=rows, through=step.after.cursor)


def behind_by_more_than(db: Executes, index: DerivedIndex, rows: int) -> bool:
    """Has the index more than ``rows`` rows to take in?"""
    return waiting_rows(db, index, rows + 1) > rows


def waiting_rows(db: Executes, index: DerivedIndex, most: int) -> int:
    """How many rows the index has to take in (changes since its cursor, rows a rebuild
    has still to reach, or every row when it was never built here), counted up to
    ``most`` of each: a probe, whatever the backlog."""
    state = built_state(db, index)
    probes: list[tuple[str, list[int]]]
    if state is None:
        probes = [("SELECT 1 FROM memory_entries LIMIT ?", [])]
    else:
        probes = [("SELECT 1 FROM memory_changes WHERE seq > ? LIMIT ?", [state.cursor])]
        if state.backfill_below:
            probes.append(
                ("SELECT 1 FROM memory_entries WHERE id < ? LIMIT ?", [state.backfill_below])
            )
    total = 0
    for probe, args in probes:
        counted = db.execute(f"SELECT count(*) FROM ({probe})", [*args, most]).fetchone()
        total += int(counted[0])
    return total


def catch_up(
    db: Database,
    index: DerivedIndex,
    max_steps: int | None = None,
    rows: int | None = None,
    through: int | None = None,
) -> int:
    """Take in changes since the cursor (up to the change ``through``, when given), then
    continue a rebuild; the caller holds a write transaction. At most max_steps batches of
    ``rows`` (None: the index's own batch; until caught up). Returns the rows taken in."""
    ensure_built(db, index)
    state = built_state(db, index)
    assert state is not None
    taken = steps = 0
    while max_steps is None or steps < max_steps:
        step = next_step(db, index, state, rows, through)
        if step is None:
            break
        steps += 1
        taken += _apply(db, index, step)
        state = step.after
    return taken


def _apply(db: Database, index: DerivedIndex, step: Step) -> int:
    """Forget the step's stale rows, take in its rows, move the index's state on."""
    index.remove(db, step.stale)
    index.add(db, step.rows)
    write_index_state(db, index, step.after)
    return len(step.rows) or 1  # a step that only forgot rows still did work


def index_rows(
    db: Executes, row_ids: Sequence[int], known: dict[int, IndexRow | None] | None = None
) -> list[IndexRow]:
    """The rows with these ids that still exist and hold text, by id. ``known``: rows
    read before in the same read transaction (None: read, and found gone or empty),
    which are not read again, and to which these are added: the indexes that follow
    saves take in the same rows, read once for all of them."""
    if known is None:
        known = {}
    missing = [row_id for row_id in row_ids if row_id not in known]
    for row_id in missing:
        known[row_id] = None
    for row_id, agent, scope, ts, content, seq in select_in(
        db,
        "SELECT id, agent, scope, ts, content, seq FROM memory_entries WHERE id IN ({marks})",
        missing,
    ):
        if isinstance(content, str) and isinstance(agent, str):
            known[row_id] = IndexRow(row_id, agent, str(scope), ts, content, int(seq or 0))
    return [row for row_id in sorted(row_ids) if (row := known[row_id]) is not None]
