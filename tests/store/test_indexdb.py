"""The derived indexes' own file (store/indexdb.py): its write lock is not the rows',
it cannot write the rows, and it is emptied when it no longer matches them."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from support.sync import sql_on, write_lock_held

from oryxmem.index import catch_up, pending, read_index_state
from oryxmem.index.keyword import KeywordIndex
from oryxmem.store import rows
from oryxmem.store.db import Database, connect, write_transaction
from oryxmem.store.indexdb import connect_index, index_floor
from oryxmem.store.indexfile import index_path


def insert(path: Path, *texts: str) -> None:
    """Rows another program writes: the sqlite3 shell, without a busy timeout."""
    values = ", ".join(f"('coder', 'archival', '{text}')" for text in texts)
    done = subprocess.run(
        [
            "sqlite3",
            str(path),
            f"INSERT INTO memory_entries(agent, scope, content) VALUES {values}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


def indexed(index_db: Database) -> list[str]:
    with write_transaction(index_db):
        catch_up(index_db, KeywordIndex())
    return [row[0] for row in index_db.execute("SELECT folded FROM memory_fts ORDER BY rowid")]


def test_an_index_write_leaves_the_rows_file_to_other_programs(tmp_path: Path) -> None:
    """While an index holds its file's write lock, a plain INSERT into the rows (no busy
    timeout) goes through; and while another program holds the rows' write lock, an
    index takes rows in."""
    path = tmp_path / "oryxos.db"
    connect(path).close()
    index_db = connect_index(path)
    insert(path, "first")
    with write_transaction(index_db):
        catch_up(index_db, KeywordIndex())
        insert(path, "second")  # would fail with "database is locked" on one file
    with write_lock_held(path):
        assert indexed(index_db) == ["first", "second"]
    assert pending(index_db, KeywordIndex()) == 0


def test_the_index_connection_cannot_write_the_rows(tmp_path: Path) -> None:
    path = tmp_path / "oryxos.db"
    connect(path).close()
    index_db = connect_index(path)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        index_db.execute("INSERT INTO memory_entries(agent, content) VALUES ('coder', 'x')")
    assert sql_on(path, "SELECT count(*) FROM memory_entries").strip() == "0"


def test_an_index_file_made_from_other_rows_is_emptied(tmp_path: Path) -> None:
    """The rows' file deleted and made again (the index file kept): what the index file
    held named rows that are gone, so it is made again from the new rows."""
    path = tmp_path / "oryxos.db"
    connect(path).close()
    insert(path, "old row")
    index_db = connect_index(path)
    assert indexed(index_db) == ["old row"]
    index_db.close()
    for name in ("oryxos.db", "oryxos.db-wal", "oryxos.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    connect(path).close()
    insert(path, "new row", "another")
    index_db = connect_index(path)
    assert read_index_state(index_db, KeywordIndex()) is None  # emptied
    assert indexed(index_db) == ["new row", "another"]


def test_an_index_file_ahead_of_rows_taken_back_to_a_copy_is_emptied(tmp_path: Path) -> None:
    """The rows' file restored from an earlier copy: the index's cursor lies past the end
    of their change log, so the index file is made again, not trusted."""
    path = tmp_path / "oryxos.db"
    connect(path).close()
    insert(path, "kept row")
    shutil.copy(path, tmp_path / "copy.db")  # no -wal: the shell's exit checkpointed it
    insert(path, "later row")
    index_db = connect_index(path)
    assert indexed(index_db) == ["kept row", "later row"]
    index_db.close()
    (tmp_path / "copy.db").replace(path)
    (tmp_path / "oryxos.db-wal").unlink(missing_ok=True)
    (tmp_path / "oryxos.db-shm").unlink(missing_ok=True)
    connect(path).close()
    index_db = connect_index(path)
    assert read_index_state(index_db, KeywordIndex()) is None
    assert indexed(index_db) == ["kept row"]


def test_changes_an_index_has_not_taken_in_are_kept(tmp_path: Path) -> None:
    """The change log is pruned below the lowest cursor of the index file (0 while there
    is none: nothing the indexes may need is forgotten)."""
    path = tmp_path / "oryxos.db"
    db = connect(path)
    insert(path, "one", "two")
    assert index_floor(path) == 0
    index_db = connect_index(path)
    indexed(index_db)
    insert(path, "three")
    floor = index_floor(path)
    assert floor == read_index_state(index_db, KeywordIndex()).cursor  # type: ignore[union-attr]
    db.execute("INSERT INTO sync_state(agent, path, change_seq) VALUES ('coder', 'f', 1000)")
    with write_transaction(db):
        rows.prune_changes(db, floor, 1000)
    left = [row[0] for row in db.execute("SELECT seq FROM memory_changes")]
    assert left and min(left) > floor
    assert indexed(index_db) == ["one", "two", "three"]


def test_the_index_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "oryxos.db"
    connect(path).close()
    connect_index(path).close()
    assert index_path(path).stat().st_mode & 0o777 == 0o600
