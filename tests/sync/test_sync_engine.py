"""reconcile_agent on real files, a real SQLite file, the sqlite3 shell and git."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator

import pytest
from support.sync import disagreements, file_items, git, row_items, sql

from oryxmem.config import Config, set_value
from oryxmem.service import MemoryService
from oryxmem.store import quarantine
from oryxmem.store import rows as table
from oryxmem.store.db import connect, write_transaction
from oryxmem.store.markdown import Append, MarkdownMemoryStore
from oryxmem.sync.engine import SyncEngine
from oryxmem.workspace import Workspace

TS = "2026-07-22 09:30:00"


@pytest.fixture
def engine(workspace: Workspace) -> Iterator[SyncEngine]:
    service = MemoryService(workspace, Config.load(workspace.config_path))
    yield service.sync_engine()
    service.close()


def write(workspace: Workspace, agent: str, text: str) -> None:
    path = workspace.memory_path(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def lines(workspace: Workspace, agent: str) -> list[str]:
    return [e[2] for e in file_items(workspace, agent).elements()]


def test_first_sync_mirrors_files_and_a_second_changes_nothing(
    engine: SyncEngine, workspace: Workspace
) -> None:
    write(workspace, "coder", f"# notes\n## 核心记忆\n- [{TS}] a\n## 归档记忆\n- [{TS}] b\n- c\n")
    reports = engine.reconcile_all()
    assert disagreements(workspace) == []
    assert row_items(workspace, "coder")[("archival", None, "c")] == 1
    again = engine.reconcile_all()
    assert all(not r.drift for r in again)
    assert all(r.status == "unchanged" for r in again if r.agent == "coder")
    assert any(r.agent == "coder" and r.rows_added for r in reports)


def test_sqlite_shell_insert_update_delete_reach_the_file(
    engine: SyncEngine, workspace: Workspace
) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] keep\n- [{TS}] edit me\n- [{TS}] drop me\n")
    engine.reconcile_all()
    sql(
        workspace,
        "INSERT INTO memory_entries(agent, scope, content) VALUES ('coder', 'core', 'from sql')",
    )
    sql(workspace, "UPDATE memory_entries SET content = 'edited by sql' WHERE content = 'edit me'")
    sql(workspace, "DELETE FROM memory_entries WHERE content = 'drop me'")
    engine.reconcile_agent("coder")
    text = workspace.memory_path("coder").read_text()
    assert "from sql" in text and "edited by sql" in text
    assert "edit me" not in text and "drop me" not in text
    assert text.startswith("## 核心记忆\n- [")
    assert disagreements(workspace) == []
    ops = [(e["op"], e["source"], e["content"]) for e in table.history(engine.db, "coder", 50)]
    assert ("add", "db", "from sql") in ops and ("remove", "db", "drop me") in ops


def test_sql_insert_into_a_new_agent_creates_its_file(
    engine: SyncEngine, workspace: Workspace
) -> None:
    engine.reconcile_all()
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('助手', '你好')")
    engine.reconcile_all()
    assert lines(workspace, "助手") == ["你好"]


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ("('coder', 'bogus', 'x')", "scope must be"),
        ("('coder', 'archival', '   ')", "content is empty"),
        ("('coder', 'archival', char(27) || '[31m')", "control character"),
        ("('../escape', 'archival', 'x')", "unsafe agent name"),
        ("('a/b', 'core', 'x')", "unsafe agent name"),
    ],
)
def test_invalid_rows_are_quarantined_and_reported(
    engine: SyncEngine, workspace: Workspace, values: str, reason: str
) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] fine\n")
    engine.reconcile_all()
    before = workspace.memory_path("coder").read_bytes()
    sql(workspace, f"INSERT INTO memory_entries(agent, scope, content) VALUES {values}")
    reports = engine.reconcile_all()
    assert sum(len(r.quarantined) for r in reports) == 1
    moved = list(quarantine.quarantined(engine.db))
    assert len(moved) == 1 and reason in moved[0]["reason"]
    assert workspace.memory_path("coder").read_bytes() == before
    assert disagreements(workspace) == []
    history = table.history(engine.db, None, 10)
    assert history[-1]["op"] == "quarantine"


def test_bad_timestamp_from_sql_is_quarantined(engine: SyncEngine, workspace: Workspace) -> None:
    engine.reconcile_all()
    sql(
        workspace,
        "INSERT INTO memory_entries(agent, scope, ts, content) VALUES ('c', 'archival', '2026-11-30T10:00', 'x')",
    )
    engine.reconcile_all()
    assert "ts must be" in next(iter(quarantine.quarantined(engine.db)))["reason"]


def test_editor_saves_reach_the_table(engine: SyncEngine, workspace: Workspace, tmp_path) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] one\n")
    engine.reconcile_all()
    path = workspace.memory_path("coder")
    # vim: write a new file, rename it over
    swap = path.with_name("MEMORY.md.swp")
    swap.write_text(path.read_text() + f"- [{TS}] from vim\n")
    os.replace(swap, path)
    engine.reconcile_agent("coder")
    # sed -i
    os.system(f"sed -i 's/one/uno/' '{path}'")
    engine.reconcile_agent("coder")
    # VS Code: truncate and write in place
    with open(path, "r+", encoding="utf-8") as handle:
        text = handle.read().replace("uno", "eins")
        handle.seek(0)
        handle.truncate()
        handle.write(text)
    engine.reconcile_agent("coder")
    assert sorted(e[2] for e in row_items(workspace, "coder").elements()) == ["eins", "from vim"]
    assert disagreements(workspace) == []


def test_changed_on_both_sides_the_file_wins_and_history_keeps_the_loser(
    engine: SyncEngine, workspace: Workspace
) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] original\n")
    engine.reconcile_all()
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] edited in the editor\n")
    sql(workspace, "UPDATE memory_entries SET content = 'edited in sql'")
    report = engine.reconcile_agent("coder")
    assert lines(workspace, "coder") == ["edited in the editor"]
    assert report.lost and "edited in sql" in report.lost[0]
    lost = [e for e in table.history(engine.db, "coder", 50) if e["op"] == "lost"]
    assert lost[0]["content"] == "edited in sql" and "file wins" in lost[0]["detail"]
    assert disagreements(workspace) == []


def test_stale_editor_buffer_does_not_lose_lines_the_engine_appended(
    engine: SyncEngine, workspace: Workspace
) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    stale_buffer = workspace.memory_path("coder").read_text()  # the editor opened the file
    sql(
        workspace,
        "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'saved while editing')",
    )
    engine.reconcile_agent("coder")  # the engine appends it to MEMORY.md
    assert "saved while editing" in workspace.memory_path("coder").read_text()
    # The human saves the buffer they opened before, with one edit of their own.
    workspace.memory_path("coder").write_text(stale_buffer + f"- [{TS}] typed by the human\n")
    report = engine.reconcile_agent("coder")
    assert report.restored
    assert sorted(lines(workspace, "coder")) == ["old", "saved while editing", "typed by the human"]
    assert disagreements(workspace) == []
    # The same old buffer saved again: put back again, as often as it happens.
    workspace.memory_path("coder").write_text(stale_buffer + f"- [{TS}] typed by the human\n")
    assert engine.reconcile_agent("coder").restored
    assert "saved while editing" in workspace.memory_path("coder").read_text()
    # Deleted from a buffer that held it (it holds what was written after it): honoured.
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'a later one')")
    engine.reconcile_agent("coder")
    delete_line(workspace, "coder", "saved while editing")
    engine.reconcile_agent("coder")
    assert "saved while editing" not in workspace.memory_path("coder").read_text()
    assert "a later one" in workspace.memory_path("coder").read_text()
    assert disagreements(workspace) == []


def delete_line(workspace: Workspace, agent: str, content: str) -> None:
    path = workspace.memory_path(agent)
    text = path.read_text()
    path.write_text(
        "".join(
            line for line in text.splitlines(keepends=True) if not line.endswith(f"] {content}\n")
        )
    )


def test_the_newest_entry_deleted_by_hand_comes_back_until_its_window_has_passed(
    workspace: Workspace,
) -> None:
    """A file without the newest entry looks the same whether a person deleted it or an
    old buffer never had it: it is put back while sync.stale_buffer_seconds runs from its
    last write, then a deletion is honoured."""
    set_value(workspace.config_path, "sync.stale_buffer_seconds", "2")
    service = MemoryService(workspace, Config.load(workspace.config_path))
    engine = service.sync_engine()
    service.save("coder", "the first")
    service.save("coder", "the newest")
    delete_line(workspace, "coder", "the newest")
    assert engine.reconcile_agent("coder").restored
    time.sleep(2.2)  # the window has passed since its put-back
    delete_line(workspace, "coder", "the newest")
    report = engine.reconcile_agent("coder")
    assert not report.restored and lines(workspace, "coder") == ["the first"]
    assert disagreements(workspace) == []
    service.close()


def test_a_save_onto_a_file_an_old_buffer_emptied_does_not_prove_a_later_buffer_held_it(
    engine: SyncEngine, workspace: Workspace
) -> None:
    """E is saved; an old buffer drops it; F is saved onto that file before reconcile
    looks; a buffer read then (holding F, never E) is written. F came after E, yet the
    buffer never held E: it is put back."""
    service = MemoryService(workspace, Config.load(workspace.config_path))
    service.save("coder", "the first")
    engine.reconcile_agent("coder")
    old = workspace.memory_path("coder").read_text()
    service.save("coder", "E")
    workspace.memory_path("coder").write_text(old)  # the old buffer, unseen by reconcile
    service.save("coder", "F")  # onto the file the old buffer left
    buffer = workspace.memory_path("coder").read_text()
    assert "] F\n" in buffer and "] E\n" not in buffer
    workspace.memory_path("coder").write_text(buffer)
    assert engine.reconcile_agent("coder").restored
    assert sorted(lines(workspace, "coder")) == ["E", "F", "the first"]
    assert disagreements(workspace) == []
    service.close()


def test_conflicted_file_is_not_ingested_and_rows_wait(
    engine: SyncEngine, workspace: Workspace
) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] before\n")
    engine.reconcile_all()
    conflicted = f"## 归档记忆\n- [{TS}] before\n<<<<<<< HEAD\n- [{TS}] main\n=======\n- [{TS}] topic\n>>>>>>> topic\n"
    write(workspace, "coder", conflicted)
    sql(
        workspace,
        "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'saved during the conflict')",
    )
    report = engine.reconcile_agent("coder")
    assert report.status == "conflicted" and "lines 3, 7" in (report.detail or "")
    assert workspace.memory_path("coder").read_text() == conflicted
    state = table.read_state(engine.db, "coder")
    assert state is not None and state.status == "conflicted"
    waiting = [item[2] for item in row_items(workspace, "coder").elements()]
    assert sorted(waiting) == ["before", "saved during the conflict"], "the row waits, kept"
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] before\n- [{TS}] main\n- [{TS}] topic\n")
    engine.reconcile_agent("coder")
    assert sorted(lines(workspace, "coder")) == [
        "before",
        "main",
        "saved during the conflict",
        "topic",
    ]
    assert disagreements(workspace) == []


def test_nothing_is_written_while_git_is_busy(engine: SyncEngine, workspace: Workspace) -> None:
    git(workspace.root, "init", "-q")
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] a\n")
    engine.reconcile_all()
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'wait for git')")
    before = workspace.memory_path("coder").read_bytes()
    for marker in ("index.lock", "MERGE_HEAD", "rebase-merge"):
        target = workspace.root / ".git" / marker
        target.mkdir() if marker.startswith("rebase") else target.write_text("")
        report = engine.reconcile_agent("coder")
        assert report.status == "deferred" and marker in (report.detail or "")
        assert workspace.memory_path("coder").read_bytes() == before
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    engine.reconcile_agent("coder")
    assert "wait for git" in workspace.memory_path("coder").read_text()


def test_deleted_database_is_rebuilt_from_the_files(
    engine: SyncEngine, workspace: Workspace
) -> None:
    write(workspace, "a", f"## 核心记忆\n- [{TS}] x\n## 归档记忆\n- [{TS}] y\n- [{TS}] y\n")
    write(workspace, "", f"## 归档记忆\n- [{TS}] global\n")
    engine.reconcile_all()
    engine.db.close()
    for path in workspace.os_dir.glob("oryxos.db*"):
        path.unlink()
    fresh = MemoryService(workspace, Config.load(workspace.config_path)).sync_engine()
    fresh.reconcile_all()
    assert row_items(workspace, "a") == file_items(workspace, "a")
    assert row_items(workspace, "a")[("archival", TS, "y")] == 2
    assert disagreements(workspace) == []


def test_deleted_file_empties_the_table_and_restoring_it_refills(
    engine: SyncEngine, workspace: Workspace
) -> None:
    text = f"## 归档记忆\n- [{TS}] a\n- [{TS}] b\n"
    write(workspace, "coder", text)
    engine.reconcile_all()
    workspace.memory_path("coder").unlink()
    assert engine.reconcile_agent("coder").status == "deferred"  # gone a moment: wait
    assert len(row_items(workspace, "coder")) == 2
    folder = workspace.memory_path("coder").parent
    os.utime(folder, (time.time() - 5, time.time() - 5))  # it stayed deleted
    engine.reconcile_agent("coder")
    assert row_items(workspace, "coder") == {}
    removed = [e["content"] for e in table.history(engine.db, "coder", 10) if e["op"] == "remove"]
    assert sorted(removed) == ["a", "b"], "what the file lost is kept in history"
    write(workspace, "coder", text)
    engine.reconcile_agent("coder")
    assert disagreements(workspace) == [] and len(row_items(workspace, "coder")) == 2


def test_check_reports_drift_and_changes_nothing(workspace: Workspace) -> None:
    from support.processes import run_cli

    write(workspace, "coder", f"## 归档记忆\n- [{TS}] a\n")
    assert run_cli("sync").returncode == 0
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'pending')")
    before = workspace.memory_path("coder").read_bytes()
    check = run_cli("sync", "--check")
    assert check.returncode == 1 and "pending" in check.stdout
    assert workspace.memory_path("coder").read_bytes() == before
    assert run_cli("sync").returncode == 0
    assert run_cli("sync", "--check").returncode == 0
    history = run_cli("history", "--agent", "coder")
    assert "add        db     - [" in history.stdout and "pending" in history.stdout


def test_indexes_and_recall_see_synced_rows(workspace: Workspace) -> None:
    from oryxmem.index import pending
    from oryxmem.index.keyword import KeywordIndex
    from oryxmem.store.indexdb import connect_index

    write(workspace, "coder", f"## 归档记忆\n- [{TS}] Needle in a file\n")
    service = MemoryService(workspace, Config.load(workspace.config_path))
    service.sync()  # what oryxmem sync runs: the reconcile, then the indexes follow
    service.close()
    connect(workspace.db_path).close()
    db = connect_index(workspace.db_path)
    assert pending(db, KeywordIndex()) == 0
    hits = db.execute("SELECT rowid FROM memory_fts WHERE memory_fts MATCH '\"needle\"'").fetchall()
    assert len(hits) == 1


@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script for a tty")
def test_sync_shows_a_progress_bar_on_a_terminal_when_long(workspace: Workspace) -> None:
    import subprocess
    import sys

    for n in range(30):
        write(workspace, f"agent{n}", f"## 归档记忆\n- [{TS}] {n}\n")
    command = f"{sys.executable} -m oryxmem sync"
    done = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        capture_output=True,
        text=True,
        env={**os.environ, "ORYXMEM_ROOT": str(workspace.root)},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout
    assert "syncing" in done.stdout and "100%" in done.stdout
    assert disagreements(workspace) == []


def append_saves(engine: SyncEngine, agent: str, *contents: str) -> Append:
    """What the service's write path does: one durable append, with the stat around it."""
    store = engine.files.get(agent)
    return store.append_many([store.prepare(c, "archival") for c in contents])


def record_saves(engine: SyncEngine, agent: str, appends: list[Append], source: str) -> bool:
    """What the service's mirror does with appends: the rows staged, then in one
    transaction."""
    path = str(engine.workspace.memory_path(agent))
    with table.staged_appends(engine.db, [(agent, appends, source)]), write_transaction(engine.db):
        return table.mirror_appends(engine.db, agent, path, appends)


def reconciled_to(engine: SyncEngine, workspace: Workspace, expected: list[str]) -> None:
    """coder's file after a reconcile holds these lines, the rows agree, and a second
    reconcile finds nothing to do."""
    engine.reconcile_agent("coder")
    assert sorted(lines(workspace, "coder")) == expected
    assert disagreements(workspace) == []
    assert engine.reconcile_agent("coder").status == "unchanged"


def test_saves_mirror_at_once_when_in_sync(engine: SyncEngine, workspace: Workspace) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    first = append_saves(engine, "coder", "one", "two")
    second = append_saves(engine, "coder", "three")
    assert record_saves(engine, "coder", [first, second], "socket")
    assert disagreements(workspace) == []
    assert engine.reconcile_agent("coder").status == "unchanged"
    rows = sql(workspace, "SELECT content || '=' || source FROM memory_entries").split()
    assert "three=socket" in rows


def test_saves_a_reconcile_took_in_between_are_not_mirrored_twice(
    engine: SyncEngine, workspace: Workspace
) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    first = append_saves(engine, "coder", "one")
    engine.reconcile_agent("coder")  # the sync thread saw the file between two appends
    second = append_saves(engine, "coder", "two")
    assert record_saves(engine, "coder", [first, second], "socket")
    assert disagreements(workspace) == []
    assert sorted(e[2] for e in row_items(workspace, "coder").elements()) == ["old", "one", "two"]
    # A reconcile that saw them all: nothing left to do, and nothing to reconcile later.
    third = append_saves(engine, "coder", "three")
    engine.reconcile_agent("coder")
    assert record_saves(engine, "coder", [third], "socket")
    assert sum(row_items(workspace, "coder").values()) == 4
    assert engine.reconcile_agent("coder").status == "unchanged"


def test_a_mirror_in_sync_looks_the_entries_up_only_when_a_reconcile_came_between(
    engine: SyncEngine, workspace: Workspace
) -> None:
    """The rows are looked up for the saves' ids only when they may hold some already:
    not when both sides agreed just before the first append (the write lock is held
    that much less), but when a reconcile took the file in between two appends."""
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    statements: list[str] = []
    engine.db.conn.set_trace_callback(statements.append)
    try:
        first = append_saves(engine, "coder", "one")
        assert record_saves(engine, "coder", [first], "socket")
        looked_up = [s for s in statements if "NOT EXISTS (SELECT 1 FROM memory_entries" in s]
        assert looked_up == []
        assert [s for s in statements if s.startswith("INSERT INTO memory_entries")] != []
        second = append_saves(engine, "coder", "two")
        engine.reconcile_agent("coder")
        third = append_saves(engine, "coder", "three")
        statements.clear()
        assert record_saves(engine, "coder", [second, third], "socket")
        assert [s for s in statements if "NOT EXISTS (SELECT 1 FROM memory_entries" in s] != []
    finally:
        engine.db.conn.set_trace_callback(None)
    assert sorted(e[2] for e in row_items(workspace, "coder").elements()) == [
        "old",
        "one",
        "three",
        "two",
    ]
    assert engine.reconcile_agent("coder").status == "unchanged"


def test_saves_after_a_foreign_write_are_left_to_the_reconcile(
    engine: SyncEngine, workspace: Workspace
) -> None:
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    with open(workspace.memory_path("coder"), "a", encoding="utf-8") as handle:
        handle.write(f"- [{TS}] typed by a human\n")
    saved = append_saves(engine, "coder", "saved")
    assert not record_saves(engine, "coder", [saved], "socket")
    engine.reconcile_agent("coder")
    assert disagreements(workspace) == []
    assert sum(row_items(workspace, "coder").values()) == 3


def test_saves_mirrored_out_of_sync_survive_a_stale_buffer_before_the_reconcile(
    engine: SyncEngine, workspace: Workspace
) -> None:
    """Found by the soak: saves whose mirror found the rows changed by another program
    (so it could not call both sides in sync), then a stale buffer written back before
    the reconcile. The rows carry the saves, and the reconcile puts them back."""
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'from sql')")
    stale_buffer = workspace.memory_path("coder").read_text()
    saved = append_saves(engine, "coder", "one", "two")
    assert not record_saves(engine, "coder", [saved], "socket")  # the rows changed meanwhile
    tmp = workspace.memory_path("coder").with_name(".MEMORY.md.swp")
    tmp.write_text(stale_buffer + f"- [{TS}] typed by the human\n")
    os.replace(tmp, workspace.memory_path("coder"))
    reconciled_to(engine, workspace, ["from sql", "old", "one", "two", "typed by the human"])


def test_saves_before_and_after_a_stale_buffer_in_one_mirror_leave_it_to_the_reconcile(
    engine: SyncEngine, workspace: Workspace
) -> None:
    """Found by the soak: saves, then an editor's stale buffer written back over them by
    rename, then more saves, all mirrored together (another program held the database
    meanwhile, so the mirror the new file should have set off could not run). Both sides
    agreed before the first save, but the file the later saves went to is not the one
    the earlier ones did: the mirror must not call the rows and that file agreed. It
    did, and the reconcile then saw nothing to do: the file lacked the first saves and
    the rows the editor's line, for good."""
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    stale_buffer = workspace.memory_path("coder").read_text()
    before = append_saves(engine, "coder", "one", "two")
    tmp = workspace.memory_path("coder").with_name(".MEMORY.md.swp")
    tmp.write_text(stale_buffer + f"- [{TS}] typed by the human\n")
    os.replace(tmp, workspace.memory_path("coder"))
    after = append_saves(engine, "coder", "three")
    assert after.before != before.after  # the same process's appends, not consecutive
    assert not record_saves(engine, "coder", [before, after], "socket")  # reconcile it
    reconciled_to(engine, workspace, ["old", "one", "three", "two", "typed by the human"])


def test_a_file_switched_between_reading_and_writing_is_read_again(
    engine: SyncEngine, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the soak: git switched the file back while a reconcile was between
    reading it and writing it. The plan, made from the old file, must not be applied
    to the new one (nor its rows called equal to it): the reconcile reads again."""
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    main_branch = workspace.memory_path("coder").read_text()
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'from sql')")
    with open(workspace.memory_path("coder"), "a", encoding="utf-8") as handle:
        handle.write(f"- [{TS}] only on the other branch\n")
    original = table.read_rows
    switched = []

    def read_rows_while_git_switches_back(*args: object, **kwargs: object) -> object:
        if not switched:  # the file was read; now git checks out the other branch
            tmp = workspace.memory_path("coder").with_name(".git-checkout.tmp")
            tmp.write_text(main_branch)
            os.replace(tmp, workspace.memory_path("coder"))
            switched.append(True)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(table, "read_rows", read_rows_while_git_switches_back)
    engine.reconcile_agent("coder")
    assert sorted(lines(workspace, "coder")) == ["from sql", "old"]
    assert disagreements(workspace) == []


def once_as_the_file_is_written(
    monkeypatch: pytest.MonkeyPatch, action: Callable[[], None], *, after: bool = False
) -> list[bool]:
    """``action`` (another program's write) runs once, as a reconcile writes MEMORY.md:
    just before its write, or just ``after`` it. The list says whether it ran."""
    original = MarkdownMemoryStore.edit_locked
    done: list[bool] = []

    def edit(*args: object, **kwargs: object) -> object:
        if not done and not after:
            action()
            done.append(True)
        written = original(*args, **kwargs)  # type: ignore[arg-type]
        if not done and after:
            action()
            done.append(True)
        return written

    monkeypatch.setattr(MarkdownMemoryStore, "edit_locked", edit)
    return done


def test_another_programs_write_is_not_refused_while_a_reconcile_writes_the_file(
    engine: SyncEngine, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: the reconcile reads in a snapshot and takes the database's write lock
    only to apply its plan to the rows, not while MEMORY.md is written and synced. A
    row another program inserts meanwhile (with no busy timeout: it would be refused
    if the lock were held) makes the reconcile start again: both rows reach the file,
    once each."""
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'from sql')")

    def insert_with_no_busy_timeout() -> None:
        other = sqlite3.connect(workspace.db_path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # refused if the reconcile held the lock
            other.execute(
                "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'meanwhile')"
            )
            other.execute("COMMIT")
        finally:
            other.close()

    inserted = once_as_the_file_is_written(monkeypatch, insert_with_no_busy_timeout)
    engine.reconcile_agent("coder")
    assert inserted == [True]
    assert sorted(lines(workspace, "coder")) == ["from sql", "meanwhile", "old"]
    assert disagreements(workspace) == []
    assert engine.reconcile_agent("coder").status == "unchanged"


def test_a_row_changed_twice_while_a_reconcile_writes_its_first_change_keeps_the_last(
    engine: SyncEngine, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program updates a row, and again while the reconcile writes the first
    update into MEMORY.md. The file's change was the reconcile's own, from the row: the
    second update reaches the file too, and nothing is called a conflict (the soak
    found 'the file wins' here, and the second update only in history)."""
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    sql(workspace, "UPDATE memory_entries SET content = 'first update' WHERE content = 'old'")
    second = "UPDATE memory_entries SET content = 'second update' WHERE content = 'first update'"
    updated = once_as_the_file_is_written(monkeypatch, lambda: sql(workspace, second), after=True)
    engine.reconcile_agent("coder")
    assert updated == [True]
    assert lines(workspace, "coder") == ["second update"]
    assert disagreements(workspace) == []
    assert [e["op"] for e in table.history(engine.db, "coder", 10) if e["op"] == "lost"] == []
    assert engine.reconcile_agent("coder").status == "unchanged"


def test_a_pass_that_writes_tombstones_leaves_nothing_for_the_next(
    engine: SyncEngine, workspace: Workspace
) -> None:
    """A row deleted or updated by another program leaves a tombstone, written by the
    reconcile that takes it in: the next reconcile finds nothing to do (it read the
    tombstones' stamp as its own write left them, not as they were before)."""
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n- [{TS}] other\n")
    engine.reconcile_all()
    sql(workspace, "UPDATE memory_entries SET content = 'new' WHERE content = 'old'")
    assert engine.reconcile_agent("coder").status == "ok"
    assert engine.reconcile_agent("coder").status == "unchanged"
    sql(workspace, "DELETE FROM memory_entries WHERE content = 'other'")
    assert engine.reconcile_agent("coder").status == "ok"
    assert engine.reconcile_agent("coder").status == "unchanged"
    assert lines(workspace, "coder") == ["new"]


def test_a_row_deleted_while_a_reconcile_writes_it_into_the_file_stays_deleted(
    engine: SyncEngine, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program inserts a row while a line is typed into MEMORY.md, and deletes
    the row while the reconcile writes it into the file. The pass cannot keep its plan
    (it adds the typed line's row, and the rows moved): the next pass knows the row's
    line as its own write, so it leaves the file with the row, and the typed line
    reaches the rows (the soak found the deleted row back, read as a typed line)."""
    write(workspace, "coder", f"## 归档记忆\n- [{TS}] old\n")
    engine.reconcile_all()
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'from sql')")
    with workspace.memory_path("coder").open("a", encoding="utf-8") as out:
        out.write(f"- [{TS}] typed\n")
    delete = "DELETE FROM memory_entries WHERE content = 'from sql'"
    deleted = once_as_the_file_is_written(monkeypatch, lambda: sql(workspace, delete), after=True)
    engine.reconcile_agent("coder")
    assert deleted == [True]
    assert sorted(lines(workspace, "coder")) == ["old", "typed"]
    assert disagreements(workspace) == []
    assert engine.reconcile_agent("coder").status == "unchanged"


def test_a_long_change_log_is_pruned_a_chunk_to_a_transaction(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each transaction forgets at most PRUNE_CHUNK changes, oldest first, stepping over
    the changes an agent has not taken in (kept); the daemon's catch-up at start leaves
    the pruning for later (prune=False)."""
    import oryxmem.sync.engine as engine_module

    # The embedder is off so the indexes catching up below need no model.
    set_value(workspace.config_path, "recall.embedder", "none")
    service = MemoryService(workspace, Config.load(workspace.config_path))
    engine = service.sync_engine()
    sql(
        workspace,
        "INSERT INTO memory_entries(agent, scope, content) VALUES ('other', 'archival', 'x')",
    )
    entries = "".join(f"- [{TS}] entry {i}\n" for i in range(25))
    write(workspace, "coder", f"## 归档记忆\n{entries}")
    engine.reconcile_all(["coder"], prune=False)
    service.upkeep.catch_up_indexes()

    def agents_of_changes() -> list[str]:
        return [r[0] for r in engine.db.execute("SELECT agent FROM memory_changes ORDER BY seq")]

    assert agents_of_changes() == ["other"] + ["coder"] * 25
    monkeypatch.setattr(engine_module, "PRUNE_CHUNK", 10)
    deletes: list[str] = []
    engine.db.conn.set_trace_callback(
        lambda statement: (
            deletes.append(statement)
            if statement.startswith("DELETE FROM memory_changes")
            else None
        )
    )
    assert engine.prune_changes() == 25
    engine.db.conn.set_trace_callback(None)
    assert len(deletes) == 3  # 10, 10, then 5: fewer than a chunk, so done
    assert agents_of_changes() == ["other"]  # not taken in by its agent: kept
    service.close()
