"""The derived indexes' own database file, ``.oryxos/oryxos.db.indexes``, beside the
rows' (``.oryxos/.gitignore``'s ``oryxos.db*`` keeps it, and its -wal and -shm, out of
git).

Everything an index stores (oryxmem/index/: the words, the vectors, the episodes, and
each index's cursor in ``index_state``) is kept here, not in ``oryxos.db``. An index's
write transaction then takes this file's write lock only: the rows' file is locked by
saves and reconciles alone, so another program that writes the rows (the sqlite3 shell,
a script) never meets an index being written.

A connection opens this file as its main database and the rows' file attached
read-only as ``rows``. An index reads the rows and their change log by their plain
names, creates and writes its own tables here, and cannot write the rows; and its
``BEGIN IMMEDIATE`` locks this file only (SQLite takes no write lock of a database
attached read-only).

The file is derived: deleted, it is made again from the rows. It names the rows' file
it was made from (``store_identity``, a random id the rows' file keeps) and its cursors
say how far into that file's change log it got. Opened beside another rows' file, or
beside one taken back to an earlier copy (its change log ends before a cursor), it is
emptied and made again.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from oryxmem.errors import StorageError
from oryxmem.store.db import Database, gate_of, write_transaction
from oryxmem.store.dbfile import BUSY_TIMEOUT_MS, Executes, keep_private, use_wal
from oryxmem.store.indexfile import ROWS, index_path, rows_uri, start_afresh


def connect_index(rows_path: Path) -> Database:
    """Open (creating if needed) the index file beside the rows' file, which must exist
    and be migrated: WAL, synchronous=NORMAL (everything here is made again from the
    rows if a power cut takes a commit back), the rows attached read-only. Emptied first
    when it was made from another rows' file, or from a later state of this one."""
    path = index_path(rows_path)
    try:
        keep_private(path)
        conn = sqlite3.connect(
            str(path),
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT_MS / 1000,
            uri=True,
        )
        db = Database(conn, gate_of(path))
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        use_wal(db)
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA recursive_triggers = OFF")
        db.execute(f"ATTACH DATABASE ? AS {ROWS}", [rows_uri(rows_path)])
        _made_from_these_rows(db)
    except (sqlite3.Error, OSError) as error:
        raise StorageError(f"could not open the index file {path}: {error}") from error
    return db


def open_index_readonly(rows_path: Path) -> sqlite3.Connection | None:
    """A plain read-only connection to the index file, the rows attached (None: there is
    no index file yet). No table is made: a reader of an older or foreign file gets a
    sqlite3.Error, and answers another way."""
    path = index_path(rows_path)
    if not path.exists():
        return None
    conn = sqlite3.connect(
        f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000
    )
    try:
        conn.execute(f"ATTACH DATABASE ? AS {ROWS}", [rows_uri(rows_path)])
        if _origin(conn) != _rows_id(conn):
            conn.close()
            return None
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def index_floor(rows_path: Path) -> int:
    """The lowest cursor of the indexes kept beside the rows' file: the changes after it
    are still to be taken in by some index. 0 while there is no index file, or no index
    in it (then no change may be forgotten: an index made meanwhile starts from them)."""
    try:
        conn = open_index_readonly(rows_path)
        if conn is None:
            return 0
        try:
            found = conn.execute("SELECT min(cursor) FROM index_state").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:  # another rows' file's, or not made yet: nothing is forgotten
        return 0
    return int(found[0] or 0)


def _rows_id(conn: Executes) -> str:
    found = conn.execute(f"SELECT id FROM {ROWS}.store_identity").fetchone()
    if found is None:  # the migration that makes it always writes it
        raise sqlite3.DatabaseError("the rows' file has no store_identity")
    return str(found[0])


def _origin(conn: Executes) -> str | None:
    try:
        found = conn.execute("SELECT rows_id FROM main.index_origin").fetchone()
    except sqlite3.OperationalError:  # never made: no such table
        return None
    return None if found is None else str(found[0])


def _changes_end(db: Database) -> int:
    """The last change number the rows' file ever gave (its log may be pruned)."""
    found = db.execute(
        f"SELECT seq FROM {ROWS}.sqlite_sequence WHERE name = 'memory_changes'"
    ).fetchone()
    return 0 if found is None else int(found[0])


def _made_from_these_rows(db: Database) -> None:
    """Make the file's own tables; empty it first when it was made from other rows, or
    from a later state of these."""
    if not _stale(db):
        return
    with write_transaction(db):
        if _stale(db):  # asked again under the lock: another process may have done it
            start_afresh(db, _rows_id(db))


def _stale(db: Database) -> bool:
    """Was the file made from other rows (or never made), or does a cursor lie past the
    end of the rows' change log (the rows' file was taken back to an earlier copy)?"""
    origin = _origin(db)
    if origin is None or origin != _rows_id(db):
        return True
    ahead = db.execute("SELECT coalesce(max(cursor), 0) FROM main.index_state").fetchone()
    return int(ahead[0]) > _changes_end(db)
