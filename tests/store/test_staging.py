"""A mirror's rows staged before the write lock (store/staging.py), with a real SQLite
file and the sqlite3 shell as the other program."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.sync import write_lock_held

from oryxmem.store import rows, staging
from oryxmem.store.db import Database, connect, write_transaction
from oryxmem.store.format import Entry, entry_key
from oryxmem.store.markdown import Append

pytestmark = pytest.mark.skipif(shutil.which("sqlite3") is None, reason="needs the sqlite3 shell")

TS = "2026-12-06 10:00:00"


def shell(db_path: Path, sql: str) -> list[str]:
    done = subprocess.run(
        ["sqlite3", str(db_path), sql], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.splitlines()


def entry(scope: str, content: str) -> Entry:
    return Entry(scope, TS, content, entry_key(scope, TS, content))


def append(*entries: Entry, written_ns: int = 1) -> Append:
    return Append(None, list(entries), None, written_ns, False)


def staged_counts(db: Database) -> list[int]:
    return [
        db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in (staging.HISTORY, staging.ENTRIES)
    ]


def move_entries(db: Database, agent: str, *, only_missing: bool) -> int:
    """As the mirror moves them: after the others of each section."""
    return staging.move_entries(db, agent, rows.next_seqs(db, agent), only_missing=only_missing)


def test_staging_takes_no_lock_and_the_rows_move_in_whole_after_the_others(
    tmp_path: Path,
) -> None:
    """While another program holds the write lock, the rows are staged all the same; moved
    in, each entry follows the others of its section in order, each has its history (the
    time as the column's default gives it) and its line in the change log, and the
    staged tables are empty after."""
    path = tmp_path / "oryxos.db"
    db = connect(path)
    shell(path, "INSERT INTO memory_entries(agent, scope, content) VALUES ('coder', 'core', 'x')")
    first = append(entry("archival", "one"), entry("core", "two"), written_ns=11)
    second = append(entry("archival", "three"), written_ns=12)
    other = append(entry("archival", "elsewhere"))
    batches = [("coder", [first, second], "socket"), ("tester", [other], "api")]
    with write_lock_held(path):
        staged = rows.staged_appends(db, batches)
        staged.__enter__()
    try:
        assert staged_counts(db) == [4, 4]
        with write_transaction(db):
            for agent in ("coder", "tester"):
                staging.move_history(db, agent)
            assert move_entries(db, "coder", only_missing=False) == 3
            assert move_entries(db, "tester", only_missing=False) == 1
    finally:
        staged.__exit__(None, None, None)
    assert staged_counts(db) == [0, 0]
    assert shell(path, "SELECT agent, scope, seq, content FROM memory_entries ORDER BY id") == [
        "coder|core|1|x",
        "coder|archival|1|one",
        "coder|core|2|two",
        "coder|archival|2|three",
        "tester|archival|1|elsewhere",
    ]
    history = shell(
        path, "SELECT at, agent, op, source, content, written_ns FROM memory_history ORDER BY id"
    )
    assert [h.split("|", 1)[1] for h in history] == [
        "coder|add|socket|one|11",
        "coder|add|socket|two|11",
        "coder|add|socket|three|12",
        "tester|add|api|elsewhere|1",
    ]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", h.split("|")[0]) for h in history)
    assert shell(path, "SELECT count(*) FROM memory_changes WHERE op = 'insert'") == ["5"]


def test_only_the_missing_move_in_numbered_without_gaps_and_the_agreed_ids_from_an_append_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "oryxos.db"
    db = connect(path)
    one, two, three = (entry("archival", c) for c in ("one", "two", "three"))
    with write_transaction(db):
        rows.insert_rows(db, "coder", [one], "file")
    staged = rows.staged_appends(db, [("coder", [append(one, two), append(three)], "socket")])
    with staged, write_transaction(db):
        assert move_entries(db, "coder", only_missing=True) == 2
        staging.move_agreed(db, "coder", 1)
    assert shell(path, "SELECT seq, content FROM memory_entries ORDER BY id") == [
        "1|one",
        "2|two",
        "3|three",
    ]
    assert shell(path, "SELECT entry_id FROM sync_agreed") == [three.entry_id]


def test_a_mirror_that_fails_leaves_nothing_in_the_rows_and_nothing_staged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "oryxos.db"
    db = connect(path)
    staged = rows.staged_appends(db, [("coder", [append(entry("core", "one"))], "socket")])
    with pytest.raises(RuntimeError), staged, write_transaction(db):
        staging.move_history(db, "coder")
        move_entries(db, "coder", only_missing=False)
        raise RuntimeError("the disk is gone")
    assert staged_counts(db) == [0, 0]
    assert shell(path, "SELECT count(*) FROM memory_entries") == ["0"]
    assert shell(path, "SELECT count(*) FROM memory_history") == ["0"]
