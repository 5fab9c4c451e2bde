"""Where the derived indexes' file is kept, the tables it always has, and what an
older oryxmem's rows' file hands over to it (the schema's last migration). Plain
sqlite3 only: the migrations run below store/db.py, which store/indexdb.py (the
index file's connections) builds on.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from oryxmem.store.dbfile import (
    BUSY_TIMEOUT_MS,
    Executes,
    database_file,
    keep_private,
    use_wal,
)

INDEX_FILE = "oryxos.db.indexes"
ROWS = "rows"  # the rows' file, as the index connection attaches it

# The tables an index connection keeps whatever indexes there are.
OWN_TABLES = (
    "CREATE TABLE IF NOT EXISTS index_origin (rows_id TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS index_state (name TEXT PRIMARY KEY, version INTEGER NOT NULL,"
    " cursor INTEGER NOT NULL, backfill_below INTEGER NOT NULL DEFAULT 0, built_at TEXT)",
)


def index_path(rows_path: Path) -> Path:
    """The index file kept beside this rows' file."""
    return rows_path.with_name(INDEX_FILE)


def rows_uri(rows_path: Path) -> str:
    return f"{rows_path.resolve().as_uri()}?mode=ro"


def empty(db: Executes) -> None:
    """Drop every table of the index file (the caller holds a write transaction): each
    index is made again from the rows. Virtual tables first: their own tables go with
    them."""
    tables = db.execute(
        "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY sql LIKE 'CREATE VIRTUAL%' DESC"
    ).fetchall()
    for (name,) in tables:
        db.execute(f'DROP TABLE IF EXISTS main."{name}"')


def start_afresh(db: Executes, rows_id: str) -> None:
    """Empty the index file and make its own tables, for the rows' file ``rows_id`` (the
    caller holds a write transaction)."""
    empty(db)
    for create in OWN_TABLES:
        db.execute(create)
    db.execute("INSERT INTO index_origin VALUES (?)", [rows_id])


# What an earlier oryxmem kept in the rows' file. The vectors and the episodes (costly to
# make: every text embedded again) are carried into the index file as they are; the
# others (the words, made again in seconds) are dropped with them.
_CARRIED = (
    "memory_vectors",
    "memory_vector_rows",
    "memory_vector_gone",
    "episode_meta",
    "episodes",
    "episode_terms",
    "episode_vectors",
    "episode_state",
)
_CARRIED_STATES = ("vectors",)
_LEFT = ("memory_fts", "memory_terms_vocab", "memory_terms", "memory_terms_count")
_LEGACY = (*_LEFT, "memory_vectors_1", *_CARRIED, "index_state")


def move_out_of_rows(rows: Executes, rows_id: str) -> None:
    """The rows' file's migration to a file of its own for the indexes: what an earlier
    oryxmem kept there is carried into a new index file made for ``rows_id`` (the
    vectors and the episodes) and then dropped from the rows (the caller holds the
    rows' write transaction; the index file is committed first)."""
    kept = {
        str(name)
        for (name,) in rows.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN"
            f" ({', '.join('?' * len(_LEGACY))})",
            list(_LEGACY),
        )
    }
    carried = [name for name in _CARRIED if name in kept]
    path = database_file(rows)
    if carried and path:  # (a database in memory has no file beside it)
        _carry(Path(path), rows_id, carried, "index_state" in kept)
    for name in _LEGACY:
        if name in kept:
            rows.execute(f"DROP TABLE IF EXISTS main.{name}")


def _carry(rows_path: Path, rows_id: str, tables: list[str], with_states: bool) -> None:
    path = index_path(rows_path)
    keep_private(path)
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        use_wal(conn)
        # The rows as last committed: the migration that calls this holds their write lock.
        conn.execute(f"ATTACH DATABASE ? AS {ROWS}", [rows_uri(rows_path)])
        conn.execute("BEGIN IMMEDIATE")  # this file's lock only: the rows are read-only
        try:
            _carry_tables(conn, rows_id, tables, with_states)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.close()


def _carry_tables(
    conn: sqlite3.Connection, rows_id: str, tables: list[str], with_states: bool
) -> None:
    start_afresh(conn, rows_id)
    made = conn.execute(
        f"SELECT sql FROM {ROWS}.sqlite_master WHERE tbl_name IN"
        f" ({', '.join('?' * len(tables))}) AND sql IS NOT NULL"
        " ORDER BY type = 'index'",
        tables,
    ).fetchall()
    for (sql,) in made:
        conn.execute(sql)
    for table in tables:
        conn.execute(_copy(conn, table))
    if with_states:
        conn.execute(
            f"INSERT INTO index_state SELECT * FROM {ROWS}.index_state"
            f" WHERE name IN ({', '.join('?' * len(_CARRIED_STATES))})",
            list(_CARRIED_STATES),
        )


def _copy(conn: sqlite3.Connection, table: str) -> str:
    """The statement that copies the table's rows from the rows' file (a virtual table's
    by its columns and rowid: it has no other way in)."""
    sql = conn.execute("SELECT sql FROM main.sqlite_master WHERE name = ?", [table]).fetchone()[0]
    if not str(sql).upper().startswith("CREATE VIRTUAL"):
        return f"INSERT INTO main.{table} SELECT * FROM {ROWS}.{table}"
    columns = ", ".join(f'"{row[1]}"' for row in conn.execute(f"PRAGMA main.table_info({table})"))
    return f"INSERT INTO main.{table}(rowid, {columns}) SELECT rowid, {columns} FROM {ROWS}.{table}"
