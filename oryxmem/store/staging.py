"""A mirror's rows, built before the write lock is taken.

A mirror of a second's saves puts about three rows per save into the database (the
entry, its history, its agreed id). Built and bound one by one inside ``BEGIN
IMMEDIATE``, their Python work, and the hand-off of the GIL at every statement (the
daemon's event loop wants it back at once), held the write lock for about as long as
SQLite's own work did. Here they go first into the tables of an in-memory database
attached to the connection (``staging``): writing it touches no file and takes no lock
of the database file, so another program's INSERT meets nothing. Inside the write
transaction each kind of row then moves in with one ``INSERT ... SELECT``.

The first staging on a connection attaches that database, which SQLite allows outside a
transaction only. The tables are emptied when the mirror is done, committed or not: a
mirror that failed stages its saves again when it is tried again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from oryxmem.store.db import Database, insert_values
from oryxmem.store.format import ARCHIVAL, CORE

SCHEMA = "staging"  # an in-memory database attached to the connection
HISTORY = f"{SCHEMA}.history"
ENTRIES = f"{SCHEMA}.entries"

# memory_history's default for ``at`` (schema.py), as a subquery SQLite evaluates once
# for the statement: as the default, it was evaluated (the local time zone looked up)
# once for each row, about a quarter of the history's time under the lock.
HISTORY_AT = "SELECT strftime('%Y-%m-%d %H:%M:%S', 'now', 'localtime')"
# memory_history's columns, in the order of rows.history_row.
HISTORY_COLUMNS = (
    "agent, op, source, scope, entry_id, ts, content, detail, written_ns, written_after_others"
)


def _create(db: Database) -> None:
    if not any(row[1] == SCHEMA for row in db.execute("PRAGMA database_list")):
        db.execute(f"ATTACH DATABASE ':memory:' AS {SCHEMA}")
    # n keeps the order of the saves; append_no says which write put the entry in the file
    # (the agreed state may start at a later one: rows.mirror_appends); place is the
    # entry's place among the agent's staged entries of its section, from 1.
    db.execute(f"CREATE TABLE IF NOT EXISTS {HISTORY} (n INTEGER PRIMARY KEY, {HISTORY_COLUMNS})")
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {ENTRIES} (n INTEGER PRIMARY KEY, agent TEXT,"
        " append_no INTEGER, scope TEXT, ts TEXT, content TEXT, entry_id TEXT, source TEXT,"
        " place INTEGER)"
    )


# A staged entry: (agent, append_no, scope, ts, content, entry_id, source, place).
StagedEntry = tuple[str, int, str, str | None, str, str, str, int]


@contextmanager
def staged(
    db: Database, history: Sequence[Sequence[Any]], entries: Sequence[StagedEntry]
) -> Iterator[None]:
    """History rows (HISTORY_COLUMNS each) and entries in the staging tables for the block,
    in order; emptied after it, whatever it did."""
    _create(db)
    with _staging_writes(db):  # many rows to a statement: few hand-offs of the GIL
        insert_values(db, f"INSERT INTO {HISTORY} ({HISTORY_COLUMNS})", history)
        insert_values(
            db,
            f"INSERT INTO {ENTRIES} (agent, append_no, scope, ts, content, entry_id, source,"
            " place)",
            entries,
        )
    try:
        yield
    finally:
        with _staging_writes(db):
            db.execute(f"DELETE FROM {HISTORY}")
            db.execute(f"DELETE FROM {ENTRIES}")


@contextmanager
def _staging_writes(db: Database) -> Iterator[None]:
    """One transaction around writes to the staging tables only (it locks no database
    file); inside a transaction already open, part of it."""
    if db.conn.in_transaction:
        yield
        return
    db.execute("BEGIN")
    try:
        yield
    except BaseException:
        if db.conn.in_transaction:  # (SQLite ends it itself on some errors)
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def move_history(db: Database, agent: str) -> None:
    """The staged history rows of an agent into memory_history, in order."""
    db.execute(
        f"INSERT INTO memory_history(at, {HISTORY_COLUMNS})"
        f" SELECT ({HISTORY_AT}), {HISTORY_COLUMNS} FROM {HISTORY} WHERE agent = ? ORDER BY n",
        [agent],
    )


def move_entries(
    db: Database, agent: str, next_seqs: Mapping[str, int], *, only_missing: bool
) -> int:
    """The staged entries of an agent into memory_entries, in order, each after the
    others of its section (``next_seqs``: the next position in each; with
    ``only_missing``, those whose id no row of the agent has yet). Returns how many went
    in. The caller holds the write transaction."""
    if only_missing:  # some may be rows already: the rest are numbered as they come
        picked = (
            " AND NOT EXISTS (SELECT 1 FROM memory_entries e"
            " WHERE e.agent = s.agent AND e.entry_id = s.entry_id)"
        )
        place = "row_number() OVER (PARTITION BY scope ORDER BY n)"
    else:
        picked, place = "", "place"
    cursor = db.execute(
        "INSERT INTO memory_entries(agent, scope, ts, content, entry_id, seq, source)"
        f" SELECT agent, scope, ts, content, entry_id, CASE scope WHEN ?2 THEN ?3 ELSE ?4 END"
        f" + {place} - 1, source FROM {ENTRIES} s WHERE agent = ?1{picked} ORDER BY n",
        [agent, CORE, next_seqs[CORE], next_seqs[ARCHIVAL]],
    )
    return cursor.rowcount


def move_agreed(db: Database, agent: str, first_append: int) -> None:
    """The ids of the agent's staged entries from its ``first_append``-th append on into
    the agreed state (sync_agreed)."""
    db.execute(
        "INSERT OR IGNORE INTO sync_agreed(agent, entry_id)"
        f" SELECT agent, entry_id FROM {ENTRIES} WHERE agent = ? AND append_no >= ? ORDER BY n",
        [agent, first_append],
    )
