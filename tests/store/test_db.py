"""The SQLite schema contract (docs/design.md §6), checked with the real sqlite3 shell."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.sync import write_lock_held

from oryxmem.backends.sqlite import SqliteMemoryStore
from oryxmem.index import catch_up
from oryxmem.index.keyword import KeywordIndex
from oryxmem.store.base import StoreLimits
from oryxmem.store.db import (
    OwnWritersBusy,
    brief_wait,
    connect,
    is_locked,
    sync_wal,
    unsynced_transaction,
    write_transaction,
)
from oryxmem.store.indexdb import connect_index
from oryxmem.store.schema import MIGRATIONS, SET_NAME, migration_set

sqlite_utils = pytest.importorskip("sqlite_utils")

pytestmark = pytest.mark.skipif(shutil.which("sqlite3") is None, reason="needs the sqlite3 shell")


def shell(db_path: Path, sql: str) -> str:
    """Run SQL in the sqlite3 shell, as another program would."""
    done = subprocess.run(
        ["sqlite3", str(db_path), sql], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


def store_for(db_path: Path, agent: str = "coder") -> SqliteMemoryStore:
    rows_db = connect(db_path)
    return SqliteMemoryStore(
        rows_db,
        connect_index(db_path),
        agent,
        clock=lambda: "2026-11-30 10:00:00",
        limits=StoreLimits(),
    )


def test_every_documented_table_exists(tmp_path: Path) -> None:
    opened = connect(tmp_path / "oryxos.db")
    indexes = connect_index(tmp_path / "oryxos.db")
    with write_transaction(indexes):
        catch_up(indexes, KeywordIndex())  # the keyword index's FTS table, made on first use
    db = sqlite_utils.Database(opened.conn)  # to ask about tables and columns
    tables = set(db.table_names())
    for name in [
        "memory_entries",
        "memory_changes",
        "memory_history",
        "sync_state",
        "store_identity",
        "sessions",
        "tool_invocations",
    ]:
        assert name in tables
    # What is derived is in the index file, and nothing of it in the rows' file.
    assert {"memory_fts", "index_state"} <= set(sqlite_utils.Database(indexes.conn).table_names())
    assert not {"memory_fts", "index_state"} & tables
    assert {"agent", "scope", "ts", "content"} <= set(db["memory_entries"].columns_dict)
    columns = set(db["sync_state"].columns_dict)
    assert columns >= {"size", "mtime_ns", "inode", "ctime_ns", "sha256", "notes"}
    assert "entry_ids" not in columns  # dead since sync_agreed; dropped by a migration
    assert set(db["tool_invocations"].columns_dict) >= {
        "tool",
        "agent",
        "session",
        "input",
        "output",
        "ok",
        "ms",
        "at",
    }
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_migrations_apply_once_and_reopening_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "oryxos.db"
    connect(path).close()
    schema = shell(path, ".schema")
    db = sqlite_utils.Database(connect(path).conn)
    assert migration_set(SET_NAME, MIGRATIONS).pending(db) == []
    assert [m.name for m in migration_set(SET_NAME, MIGRATIONS).applied(db)] == [
        "create_memory_entries",
        "create_sessions",
        "add_quarantine_and_change_cursor",
        "agreed_ids_in_their_own_table",
        "derived_indexes_fed_from_the_change_log",
        "sessions_remember_where_they_were_imported_from",
        "history_says_when_an_entry_was_written_into_the_file",
        "derived_indexes_have_a_file_of_their_own",
    ]
    assert shell(path, ".schema") == schema


def test_plain_sql_insert_by_another_program_gets_defaults_and_is_logged(tmp_path: Path) -> None:
    path = tmp_path / "oryxos.db"
    store = store_for(path)
    store.append("first")
    shell(
        path,
        "INSERT INTO memory_entries(agent, scope, content) VALUES ('coder', 'archival', 'x from shell')",
    )
    row = shell(path, "SELECT ts, seq, source FROM memory_entries WHERE content = 'x from shell'")
    ts, seq, source = row.strip().split("|")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}", ts)
    assert (seq, source) == ("2", "db")
    changes = shell(path, "SELECT op, agent FROM memory_changes ORDER BY seq").split()
    assert changes == ["insert|coder", "insert|coder"]
    # Recall finds the row at once, before anything indexed it.
    assert store.recall("SHELL") == [f"- [{ts}] x from shell"]
    assert store.entries()[1][-1].content == "x from shell"


def test_update_and_delete_by_another_program_are_logged_and_reindexed(tmp_path: Path) -> None:
    path, index_file = tmp_path / "oryxos.db", tmp_path / "oryxos.db.indexes"
    store = store_for(path)
    store.append("original words")
    assert shell(index_file, "SELECT folded FROM memory_fts").strip() == "original words"
    shell(
        path, "UPDATE memory_entries SET content = 'edited words' WHERE content = 'original words'"
    )
    # The index still holds the old text until it catches up; a recall never sees it.
    assert shell(index_file, "SELECT folded FROM memory_fts").strip() == "original words"
    assert store.recall("original") == []
    assert store.recall("edited") == ["- [2026-11-30 10:00:00] edited words"]
    assert shell(index_file, "SELECT folded FROM memory_fts").strip() == "edited words"
    shell(path, "DELETE FROM memory_entries")
    assert store.recall("edited") == []
    assert shell(index_file, "SELECT count(*) FROM memory_fts").strip() == "0"
    ops = shell(path, "SELECT op FROM memory_changes ORDER BY seq").split()
    assert ops == ["insert", "update", "delete"]
    assert shell(path, "PRAGMA integrity_check").strip() == "ok"
    assert shell(index_file, "INSERT INTO memory_fts(memory_fts) VALUES ('integrity-check')") == ""


def test_bookkeeping_updates_do_not_log_changes(tmp_path: Path) -> None:
    path = tmp_path / "oryxos.db"
    store_for(path).append("x")
    shell(path, "UPDATE memory_entries SET entry_id = 'abc', seq = 5, source = 'x'")
    assert shell(path, "SELECT count(*) FROM memory_changes").strip() == "1"


def test_sessions_written_elsewhere_are_readable(tmp_path: Path) -> None:
    path = tmp_path / "oryxos.db"
    connect(path).close()
    shell(
        path,
        "INSERT INTO sessions(id, agent, created_at, updated_at) VALUES ('s1', 'coder', 'now', 'now')",
    )
    assert shell(path, "SELECT messages_json FROM sessions").strip() == "[]"


def test_opening_a_new_database_while_another_connection_writes_to_it(tmp_path: Path) -> None:
    """Regression: the daemon's threads opened a fresh database together; switching it
    to WAL while the other held a write lock failed with 'database is locked' (SQLite
    does not wait for a journal-mode change the way busy_timeout waits for writes)."""
    import sqlite3
    import threading
    import time

    path = tmp_path / "oryxos.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE first_writer (x)")
    other.execute("BEGIN IMMEDIATE")  # a write in progress, still in rollback-journal mode
    other.execute("INSERT INTO first_writer VALUES (1)")
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    started = time.monotonic()
    db = connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert time.monotonic() - started >= 0.25, "it waited for the writer"
    db.close()
    other.close()


def test_rows_inserted_many_to_a_statement_arrive_whole_and_in_order(tmp_path: Path) -> None:
    """The mirror's inserts (insert_values, a hundred rows a statement) across chunk edges;
    the triggers still log each row, and the recall index finds each one."""
    from oryxmem.store.db import ROWS_PER_INSERT, write_transaction
    from oryxmem.store.format import Entry, entry_key
    from oryxmem.store.rows import insert_rows

    db = connect(tmp_path / "oryxos.db")
    count = 2 * ROWS_PER_INSERT + 7
    entries = []
    for n in range(count):
        content = f"entry number {n} ü"
        entries.append(
            Entry(
                "archival",
                "2026-11-30 10:00:00",
                content,
                entry_key("archival", "2026-11-30 10:00:00", content),
            )
        )
    with write_transaction(db):
        insert_rows(db, "coder", entries, "socket")
    indexes = connect_index(tmp_path / "oryxos.db")
    with write_transaction(indexes):
        catch_up(indexes, KeywordIndex())
    indexes.close()
    db.close()
    rows = shell(tmp_path / "oryxos.db", "SELECT seq, content FROM memory_entries ORDER BY id")
    assert rows.splitlines() == [f"{n + 1}|entry number {n} ü" for n in range(count)]
    assert shell(tmp_path / "oryxos.db", "SELECT count(*) FROM memory_changes").strip() == str(
        count
    )
    found = shell(
        tmp_path / "oryxos.db.indexes",
        f"ATTACH '{tmp_path / 'oryxos.db'}' AS rows;"
        " SELECT e.content FROM memory_fts f JOIN memory_entries e ON e.id = f.rowid"
        " WHERE memory_fts MATCH '\"number 206\"'",
    )
    assert found.strip() == "entry number 206 ü"


def test_a_write_that_may_wait_briefly_is_not_held_up_by_a_thread_waiting_for_another_program(
    tmp_path: Path,
) -> None:
    """The process's writers share a gate to the write lock, and a thread waiting for
    another program's lock waits with the gate let go: a save's thread, which may wait
    only briefly, is told at once that another program holds the lock (and retries
    later), not kept at the gate behind a thread that waits up to ten seconds."""
    db_path = tmp_path / "oryxos.db"
    patient, brief = connect(db_path), connect(db_path)
    waited: list[str] = []

    def write_patiently() -> None:
        with write_transaction(patient):
            patient.execute("INSERT INTO memory_entries(agent, content) VALUES ('a', 'x')")
        waited.append("written")

    thread = threading.Thread(target=write_patiently)
    with write_lock_held(db_path):
        thread.start()
        time.sleep(0.3)  # the patient writer is waiting for the shell's lock now
        with (
            pytest.raises(sqlite3.OperationalError) as refused,
            brief_wait(brief, 1000),
            write_transaction(brief),
        ):
            pass
        assert not isinstance(refused.value, OwnWritersBusy)  # another program: say so
        assert is_locked(refused.value) and waited == []
    thread.join(timeout=30)
    assert waited == ["written"]  # it got the lock once the shell let go
    with write_transaction(brief):  # and the gate is free again
        pass


def test_the_process_s_own_writers_take_turns_at_the_gate(tmp_path: Path) -> None:
    """A write that may wait only briefly, behind a transaction of this process that
    lasts longer, is put off (OwnWritersBusy: an expected wait, tried again later)."""
    db_path = tmp_path / "oryxos.db"
    first, second = connect(db_path), connect(db_path)
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with write_transaction(first):
            inside.set()
            leave.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert inside.wait(30)
        with pytest.raises(OwnWritersBusy), brief_wait(second, 50), write_transaction(second):
            pass
    finally:
        leave.set()
        thread.join(timeout=30)
    with brief_wait(second, 50), write_transaction(second):
        second.execute("INSERT INTO memory_entries(agent, content) VALUES ('a', 'y')")
    assert second.execute("SELECT content FROM memory_entries").fetchall() == [("y",)]


def test_an_unsynced_commit_leaves_the_setting_as_it_was_and_its_wal_is_synced_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror's commit waits for no fsync under the write lock (synchronous=NORMAL for
    it alone; inside a transaction open already, that one's commit decides); sync_wal
    then syncs the WAL that holds it."""
    path = tmp_path / "oryxos.db"
    db = connect(path)
    with unsynced_transaction(db):
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL: no fsync inside
        db.execute("INSERT INTO memory_entries(agent, content) VALUES ('coder', 'x')")
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL again
    with pytest.raises(RuntimeError), write_transaction(db):
        db.execute("INSERT INTO memory_entries(agent, content) VALUES ('coder', 'y')")
        with unsynced_transaction(db):
            db.execute("INSERT INTO memory_entries(agent, content) VALUES ('coder', 'z')")
        raise RuntimeError("the outer transaction is rolled back, and its part with it")
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert shell(path, "SELECT group_concat(content) FROM memory_entries") == "x\n"
    synced: list[str] = []
    real_sync = os.fdatasync
    monkeypatch.setattr(
        os,
        "fdatasync",
        lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_sync(fd),
    )
    sync_wal(db)
    assert synced == [f"{path}-wal"]
