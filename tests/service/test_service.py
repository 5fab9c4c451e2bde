"""MemoryService: context, footprints, sessions, tool records, both backends behind it."""

from __future__ import annotations

import json
import os

import pytest

from oryxmem.config import Config, set_value
from oryxmem.errors import (
    EmptyContentError,
    InvalidRoleError,
    SessionNotFoundError,
)
from oryxmem.service import MemoryService, SaveRequest, footprint_line
from oryxmem.service.saving import SaveBatch
from oryxmem.tools import ToolCall
from oryxmem.workspace import AgentRef, Workspace


def test_context_of_an_agent_with_no_file_has_both_headings(service: MemoryService) -> None:
    assert service.build_context("newcomer") == "## 核心记忆\n## 归档记忆\n"


def test_context_holds_core_whole_and_recent_archival(service: MemoryService) -> None:
    service.save("coder", "User's name is Ada.", "core")
    for i in range(300):
        service.save("coder", f"step {i:03d} " + "." * 30)
    text = service.build_context("coder")
    lines = text.splitlines()
    assert lines[0] == "## 核心记忆" and lines[1].endswith("User's name is Ada.")
    assert lines[2] == "## 归档记忆"
    assert "earlier archival entries not shown" in lines[3]
    assert lines[-1].endswith("step 299 " + "." * 30)
    archival_chars = sum(len(line) + 1 for line in lines[4:])
    assert archival_chars <= 4000


def test_archival_limit_comes_from_config(workspace: Workspace) -> None:
    set_value(workspace.config_path, "memory.archival_limit_chars", "100")
    service = MemoryService(workspace, Config.load(workspace.config_path))
    for i in range(10):
        service.save("a", f"entry {i}")
    archival = service.build_context("a").split("## 归档记忆\n")[1].splitlines()
    assert sum(len(line) + 1 for line in archival[1:]) <= 100
    assert archival[-1].endswith("entry 9")


def test_footprint_is_one_compact_line() -> None:
    line = footprint_line("fix   the\nCI please", "pinned\tpytest " + "x" * 500, 200)
    assert line.startswith('trigger: user="fix the CI please" reply="pinned pytest xxx')
    assert "\n" not in line and len(line) < 200 * 2 + 40
    assert line.endswith('…"')
    with pytest.raises(EmptyContentError):
        footprint_line("  ", "\n", 200)


def test_record_trigger_appends_to_archival(service: MemoryService) -> None:
    result = service.record_trigger("coder", "fix the CI", "pinned pytest to 8.x")
    assert result.entry.scope == "archival"
    assert service.recall("coder", "pinned").lines == [result.entry.render()]


def test_get_returns_entries_and_raw_markdown(service: MemoryService) -> None:
    service.save("coder", "core", "core")
    service.save("coder", "arch")
    view = service.get("coder")
    assert [e.content for e in view.core] == ["core"]
    assert [e.content for e in view.archival] == ["arch"]
    assert view.markdown == service.workspace.memory_path("coder").read_text()


def test_sessions_history_by_turns(service: MemoryService) -> None:
    session = service.create_session("coder")
    service.append_message(session.id, "system", "be brief")
    for turn in range(5):
        service.append_message(session.id, "user", f"question {turn}")
        service.append_message(session.id, "assistant", f"answer {turn}")
        service.append_message(session.id, "tool", f"tool output {turn}")
    history = service.history(session.id, turns=2)
    assert [m["content"] for m in history] == [
        "question 3",
        "answer 3",
        "tool output 3",
        "question 4",
        "answer 4",
        "tool output 4",
    ]
    assert len(service.history(session.id, turns=50)) == 16
    row = service.db.execute("SELECT agent, messages_json FROM sessions").fetchone()
    assert row[0] == "coder" and len(json.loads(row[1])) == 16


def test_session_errors(service: MemoryService) -> None:
    with pytest.raises(SessionNotFoundError):
        service.append_message("nope", "user", "x")
    session = service.create_session(None)
    with pytest.raises(InvalidRoleError):
        service.append_message(session.id, "robot", "x")
    with pytest.raises(EmptyContentError):
        service.append_message(session.id, "user", " ")
    assert service.history(session.id) == []


def test_tool_invocations_are_recorded(service: MemoryService) -> None:
    call = ToolCall.of("save_memory", {"content": "x", "scope": "core"}, "coder")
    call.record(service, {"ok": 1}, True)
    row = service.db.execute(
        "SELECT tool, agent, session, input, ok, ms, at FROM tool_invocations"
    ).fetchone()
    assert row[0:3] == ("save_memory", "coder", None)
    assert json.loads(row[3]) == {"content": "x", "scope": "core"}
    assert row[4] == 1 and row[5] >= 0 and row[6]


def test_sqlite_backend_serves_the_same_calls(workspace: Workspace) -> None:
    """The sqlite backend answers from the rows; a save still lands in MEMORY.md first
    (docs/design.md §7: acknowledged once durable there), then in the rows."""
    set_value(workspace.config_path, "memory.backend", "sqlite")
    service = MemoryService(workspace, Config.load(workspace.config_path))
    service.save("coder", "fact", "core")
    service.save("coder", "did a thing")
    assert service.build_context("coder").splitlines()[1].endswith("fact")
    assert service.recall("coder", "THING").lines[0].endswith("did a thing")
    assert "## 核心记忆\n- [" in service.get("coder").markdown
    # What answers is the rows: a row another program writes is read at once.
    service.db.execute(
        "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'thing from sql')"
    )
    reader = service.reader(service.resolve("coder"))
    assert [line.split("] ", 1)[1] for line in reader.recall("thing")] == [
        "did a thing",
        "thing from sql",
    ]
    assert "thing from sql" not in workspace.memory_path("coder").read_text()
    assert [(a.name, a.core, a.archival) for a in service.agents()] == [("", 0, 0), ("coder", 1, 2)]


def test_agents_lists_counts_and_problems(service: MemoryService, workspace: Workspace) -> None:
    service.save("a", "one")
    service.save("b", "two", "core")
    (workspace.agents_dir / "c").mkdir()
    (workspace.agents_dir / "c" / "MEMORY.md").write_text("<<<<<<< HEAD\n=======\n>>>>>>> x\n")
    rows = {s.name: (s.core, s.archival, s.problem) for s in service.agents()}
    assert rows[""] == (0, 0, None) and rows["a"] == (0, 1, None) and rows["b"] == (1, 0, None)
    assert rows["c"][0] is None and "conflict" in (rows["c"][2] or "")


def test_closing_a_service_left_shared_stores_open_for_other_threads(workspace: Workspace) -> None:
    """Regression: the daemon's memory thread closed the stores it shared with the sync
    watcher on shutdown, while the watcher still held one of their locks (EBADF)."""
    config = Config.load(workspace.config_path)
    owner = MemoryService(workspace, config)
    shared = owner.files
    owner.save("coder", "x")
    store = shared.get("coder")
    with store.lock.hold():
        MemoryService(workspace, config, files=shared).close()
        assert store.lock._fd is not None  # still open: the unlock below must work
    assert "coder" in shared, "shared stores are closed by their owner, not by a borrower"


def test_timestamps_follow_memory_timezone(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    monkeypatch.setenv("TZ", "Asia/Shanghai")  # UTC+8: local and UTC differ by hours
    time.tzset()
    try:
        for zone, convert in (("local", time.localtime), ("UTC", time.gmtime)):
            set_value(workspace.config_path, "memory.timezone", zone)
            service = MemoryService(workspace, Config.load(workspace.config_path))
            before = time.strftime("%Y-%m-%d %H:%M:%S", convert())
            entry = service.save("coder", f"when, in {zone}?").entry
            after = time.strftime("%Y-%m-%d %H:%M:%S", convert())
            assert entry.ts is not None and before <= entry.ts <= after, zone
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_large_file_in_sync_is_recalled_from_its_rows_and_a_changed_one_from_itself(
    workspace: Workspace,
) -> None:
    from oryxmem.service.finding import ROWS_ANSWER_FROM_BYTES
    from oryxmem.store.format import render_entry_line

    set_value(workspace.config_path, "memory.recall", "keyword")  # its strategy, tested here
    path = workspace.memory_path("big")
    path.parent.mkdir(parents=True)
    lines = [render_entry_line("2026-11-30 10:00:00", f"Step {i} of ÄRGER") for i in range(6000)]
    path.write_text("## 归档记忆\n" + "\n".join(lines) + "\n", encoding="utf-8")
    assert path.stat().st_size > ROWS_ANSWER_FROM_BYTES
    syncing = MemoryService(workspace, Config.load(workspace.config_path))
    syncing.sync()
    syncing.close()

    cli = MemoryService(workspace, Config.load(workspace.config_path))  # no database open
    from_rows = cli.finding._recall_from_rows("big", "step 59")
    assert from_rows is not None  # in sync: the rows answered
    assert [e.render() for e in from_rows] == cli.recall("big", "step 59").lines
    assert cli.recall("big", "STEP 5999 of ärger").lines == [lines[5999]]
    assert not cli.shared.db_is_open  # and nothing opened it

    with open(path, "a", encoding="utf-8") as handle:  # changed since the last sync
        handle.write(render_entry_line("2026-11-30 10:00:01", "step 5900 typed later") + "\n")
    assert cli.finding._recall_from_rows("big", "step 59") is None
    assert cli.recall("big", "typed later").lines[0].endswith("step 5900 typed later")
    cli.close()


def test_a_small_file_is_recalled_from_itself(service: MemoryService, workspace: Workspace) -> None:
    set_value(workspace.config_path, "memory.recall", "keyword")  # its strategy, tested here
    service.save("coder", "small and quick")
    cli = MemoryService(workspace, Config.load(workspace.config_path))  # a new CLI process
    assert cli.finding._recall_from_rows("coder", "quick") is None
    assert cli.recall("coder", "quick").lines[0].endswith("small and quick")
    assert not cli.shared.db_is_open
    cli.close()


def test_sync_takes_in_answered_saves_whose_rows_never_came(service: MemoryService) -> None:
    """What a crash between an answer and its rows left in the answered log (and an old
    copy of the file took out of MEMORY.md) is back in the rows and the file after sync."""
    from oryxmem.store.format import ARCHIVAL, EntryIds

    service.save("a", "kept")
    store = service.files.get("a")
    lost = EntryIds().entry(ARCHIVAL, "2026-07-22 09:30:00", "answered, never mirrored")
    with store.lock.hold():
        store.answered.note([lost])
    service.sync()
    assert "] answered, never mirrored\n" in service.workspace.memory_path("a").read_text()
    held = service.db.execute("SELECT content FROM memory_entries WHERE agent = 'a'")
    assert sorted(row[0] for row in held) == ["answered, never mirrored", "kept"]
    assert store.answered.entries() == []


def test_a_save_is_synced_into_memory_md_with_its_rows_or_when_the_rows_fail(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write path answers after one sync (the journal's record). MEMORY.md is synced
    and the record let go once the rows have the save; when the rows cannot take it,
    MEMORY.md is synced all the same and the record marked done, kept until they can."""
    import sqlite3

    from oryxmem.store import rows

    store = service.files.get("a")
    service.save("a", "with its rows")
    assert not store.journal.unsettled and store.answered.records() == []
    mirror = rows.mirror_appends

    def failing(*args: object, **kwargs: object) -> bool:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(rows, "mirror_appends", failing)
    service.save("a", "while the rows fail")
    assert not store.journal.unsettled
    assert [(r["done"], r["entries"][0]["content"]) for r in store.answered.records()] == [
        (1, "while the rows fail")
    ]
    monkeypatch.setattr(rows, "mirror_appends", mirror)
    service.mirror_saves()
    assert store.answered.records() == []


def test_the_mirror_syncs_its_rows_with_the_lock_let_go_and_a_failed_sync_keeps_the_log(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror's commit is made durable (its WAL synced) once the write lock is free for
    other programs, and only then does the answered log let the saves go. When that sync
    fails, the records stay (the rows have the saves, the disk may not yet), and the
    saves are not mirrored twice."""
    import sqlite3

    from oryxmem.service import saving as saving_module

    store = service.files.get("a")
    lock_free: list[bool] = []
    real_sync = saving_module.sync_wal

    def sync_wal(db: object) -> None:
        other = sqlite3.connect(service.workspace.db_path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            lock_free.append(True)
        except sqlite3.OperationalError:
            lock_free.append(False)
        finally:
            other.close()
        real_sync(db)  # type: ignore[arg-type]

    monkeypatch.setattr(saving_module, "sync_wal", sync_wal)
    service.save("a", "synced with the lock let go")
    assert lock_free == [True] and store.answered.records() == []

    def failing(db: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(saving_module, "sync_wal", failing)
    service.save("a", "its WAL not synced")
    assert [r["entries"][0]["content"] for r in store.answered.records()] == ["its WAL not synced"]
    assert service.saving.unmirrored_agents == []  # in the rows: not mirrored again
    history = service.db.execute(
        "SELECT count(*) FROM memory_history WHERE content = 'its WAL not synced'"
    ).fetchone()[0]
    assert history == 1
    monkeypatch.setattr(saving_module, "sync_wal", real_sync)
    service.save("a", "the next one")
    service.mirror_saves()
    assert store.answered.records() == []  # a later durable mirror lets them all go


def test_a_failed_mirror_keeps_its_saves_queued_until_the_rows_take_them(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A save whose rows could not be written (an I/O error, not a lock) stays queued: an
    old editor buffer that takes it out of MEMORY.md meanwhile cannot lose it, since the
    next mirror gives it its row and history and sync puts it back."""
    import sqlite3

    from oryxmem.store import rows

    service.save("a", "before")
    path = service.workspace.memory_path("a")
    old_buffer = path.read_text()
    mirror = rows.mirror_appends

    def failing(*args: object, **kwargs: object) -> bool:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(rows, "mirror_appends", failing)
    service.save("a", "acknowledged while the rows failed")
    service.mirror_saves()  # fails again: said once
    assert service.saving.unmirrored_agents == ["a"]
    assert caplog.text.count("mirroring saves failed") == 1
    path.write_text(old_buffer)  # an editor's old buffer, saved over it
    monkeypatch.setattr(rows, "mirror_appends", mirror)
    service.mirror_saves()
    assert service.saving.unmirrored_agents == []
    service.sync()
    assert "] acknowledged while the rows failed\n" in path.read_text()
    held = service.db.execute("SELECT content FROM memory_entries WHERE agent = 'a'")
    assert sorted(row[0] for row in held) == ["acknowledged while the rows failed", "before"]


def test_every_answered_save_is_in_the_rows_once_a_mirror_has_put_it_there(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What lets the daemon answer a search without its memory thread: an append is
    counted before its saves are acknowledged, and a mirror's saves once the rows hold
    them; a save refused, or kept in the rows while MEMORY.md cannot take it, is neither."""
    from oryxmem.service import SaveRequest
    from oryxmem.store import rows
    from oryxmem.store.format import ARCHIVAL

    saving = service.saving
    assert saving.every_answered_save_in_rows
    requests = [SaveRequest(text, ARCHIVAL, "api") for text in ("one", "two", "")]
    batch = saving.prepare_batch(service.resolve("a"), requests)
    saving.write_batch(batch)
    assert [type(o).__name__ for o in batch.outcomes][:2] == ["SaveResult", "SaveResult"]
    assert not saving.every_answered_save_in_rows  # acknowledged, not in the rows yet
    saving.finish_batch(batch)
    mirror = rows.mirror_appends

    def failing(*args: object, **kwargs: object) -> bool:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(rows, "mirror_appends", failing)
    service.mirror_saves()
    assert not saving.every_answered_save_in_rows  # a failed mirror put in nothing
    monkeypatch.setattr(rows, "mirror_appends", mirror)
    service.mirror_saves()
    assert saving.every_answered_save_in_rows
    service.save("a", "three")  # alone: written, then mirrored at once
    assert saving.every_answered_save_in_rows


def test_a_save_answered_after_someone_else_wrote_keeps_its_record_until_its_own_rows(
    service: MemoryService,
) -> None:
    """A save that does not continue the appends waiting for the rows (someone appended to
    MEMORY.md between) has those mirrored first. Their records leave the answered log
    then, and its own must not: until its rows are in, that record is what brings it back
    after a crash if an editor's old copy of the file took it out. (It went with them: an
    answered save the soak then found nowhere.)"""
    saving = service.saving
    ref = service.resolve("a")
    store = service.files.get("a")

    def save(content: str) -> None:
        batch = saving.prepare_batch(ref, [SaveRequest(content, "archival", "api")])
        saving.write_batch(batch)
        saving.finish_batch(batch)

    save("queued for the rows")
    with open(service.workspace.memory_path("a"), "a", encoding="utf-8") as handle:
        handle.write("- [2026-07-22 09:30:00] typed by hand\n")  # `>>`, no lock
    path = service.workspace.memory_path("a")
    written = path.stat().st_mtime - 60  # a while ago: not an editor at work now
    os.utime(path, (written, written))
    save("answered after the hand")
    noted = [e["content"] for r in store.answered.records() for e in r["entries"]]
    assert noted == ["answered after the hand"]
    assert saving.unmirrored_agents == ["a"]
    saving.mirror_saves()
    assert store.answered.records() == []
    in_rows = {row[0] for row in service.db.execute("SELECT content FROM memory_entries")}
    assert {"queued for the rows", "answered after the hand"}.issubset(in_rows)


def test_a_mirror_between_two_agents_writes_keeps_the_record_of_the_one_not_queued_yet(
    service: MemoryService,
) -> None:
    """The memory thread writes a round of several agents' saves (each answered once
    written), then queues them one by one. When the first does not continue its agent's
    appends waiting (someone wrote the file between), the waiting saves are mirrored
    first: the log of the second agent keeps the record of its save just answered, whose
    rows are not in yet (its earlier save's record goes: those rows are in)."""
    saving = service.saving
    a, b = service.resolve("a"), service.resolve("b")

    def batch(ref: AgentRef, content: str) -> SaveBatch:
        return saving.prepare_batch(ref, [SaveRequest(content, "archival", "api")])

    first_a, first_b = batch(a, "a waits for the rows"), batch(b, "b waits for the rows")
    for prepared in (first_a, first_b):
        saving.write_batch(prepared)
        saving.finish_batch(prepared)
    path = service.workspace.memory_path("a")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("- [2026-07-22 09:30:00] typed by hand\n")  # `>>`, no lock
    written = path.stat().st_mtime - 60  # a while ago: not an editor at work now
    os.utime(path, (written, written))
    round_a, round_b = batch(a, "a after the hand"), batch(b, "b in the same round")
    saving.write_batch(round_a)
    saving.write_batch(round_b)  # both answered now
    saving.finish_batch(round_a)  # not a continuation: the waiting saves mirrored first

    def noted(agent: str) -> list[str]:
        records = service.files.get(agent).answered.records()
        return [e["content"] for r in records for e in r["entries"]]

    assert noted("a") == ["a after the hand"]
    assert noted("b") == ["b in the same round"]
    saving.finish_batch(round_b)
    saving.mirror_saves()
    assert noted("a") == noted("b") == []
    in_rows = {row[0] for row in service.db.execute("SELECT content FROM memory_entries")}
    assert {"a after the hand", "b in the same round", "b waits for the rows"} <= in_rows


def test_the_mirror_is_tried_less_and_less_often_while_another_program_holds_the_database(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each try of the mirror waits briefly for another program's lock, on the daemon's
    memory thread, and saves wait behind it. While that program keeps the database
    locked, the tries come half as often each time, up to once a second; once the rows
    take the saves, the next failure is tried again soon. A wait for the daemon's own
    writers (brief) is tried again soon however often it happens."""
    import sqlite3
    from types import SimpleNamespace

    from oryxmem.service import saving as saving_module
    from oryxmem.store import rows
    from oryxmem.store.db import OwnWritersBusy, brief_wait

    now = 1000.0  # the saving module's clock, held still: the pauses are read exactly
    monkeypatch.setattr(saving_module, "time", SimpleNamespace(monotonic=lambda: now))
    saving = service.saving
    ref = service.resolve("a")

    def save(content: str) -> None:
        batch = saving.prepare_batch(ref, [SaveRequest(content, "archival", "api")])
        saving.write_batch(batch)
        saving.finish_batch(batch)

    def pauses(tries: int) -> list[float]:
        found = []
        with brief_wait(service.db, 10):  # as the memory thread waits
            for _ in range(tries):
                saving.mirror_saves()
                found.append(round(max(saving.mirror_not_before - now, 0.0), 3))
        return found

    save("while another program holds the database")
    assert service.db is not None  # opened (and migrated) before the other program locks it
    other = sqlite3.connect(service.workspace.db_path, timeout=0, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        assert pauses(7) == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert saving.every_answered_save_in_rows is False
    assert pauses(1) == [0.0]  # the lock let go: in the rows, no pause
    assert saving.every_answered_save_in_rows

    def busy(*args: object, **kwargs: object) -> bool:
        raise OwnWritersBusy("database is locked by another thread of this process")

    save("while the daemon's own writer holds it")
    monkeypatch.setattr(rows, "mirror_appends", busy)
    assert pauses(3) == [0.05, 0.05, 0.05]
