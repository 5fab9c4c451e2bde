"""SyncWatcher in-process: no echo loops, the polling fallback, path-to-agent mapping."""

from __future__ import annotations

import errno
import subprocess
import time
from collections.abc import Iterator

import pytest
from support.sync import disagreements, sql, wait_until
from watchdog import events as watchdog_events

from oryxmem.config import Config, set_value
from oryxmem.service import MemoryService
from oryxmem.sync import watcher as watcher_module
from oryxmem.sync.watcher import SyncWatcher, agent_for_path
from oryxmem.workspace import Workspace

TS = "2026-07-22 09:30:00"


@pytest.fixture
def running(workspace: Workspace) -> Iterator[SyncWatcher]:
    watcher = SyncWatcher(workspace)
    watcher.start()
    assert watcher.ready.wait(30)
    yield watcher
    watcher.stop()


def test_own_writes_do_not_echo_into_a_loop(workspace: Workspace, running: SyncWatcher) -> None:
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'one row')")
    wait_until(lambda: disagreements(workspace) == [] and workspace.memory_path("coder").exists())

    def quiet_for(seconds: float) -> bool:
        """No reconcile at all for this long (an echo loop would never go quiet)."""
        before = running.reconciles
        time.sleep(seconds)
        return running.reconciles == before

    # The echo of our own write may still be on its way (a loaded machine delays it);
    # what must hold is that it dies out instead of feeding itself.
    # An echo cycle takes a debounce (30 ms) and a database check (100 ms); a loop would
    # show several times in this window.
    wait_until(lambda: quiet_for(0.6), timeout=20, step=0)
    assert running.last_error is None


def test_a_program_closing_the_database_after_its_write_is_followed_at_once(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sqlite3 shell's INSERT is taken into MEMORY.md as soon as the shell closes the
    database, not at the next look at data_version or the next rescan (here: an hour
    away)."""
    monkeypatch.setattr(watcher_module, "DB_POLL_SECONDS", 3600.0)
    watcher = SyncWatcher(workspace, rescan_seconds=3600.0)
    watcher.start()
    try:
        assert watcher.ready.wait(30)
        sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'by a script')")
        path = workspace.memory_path("coder")
        wait_until(lambda: path.exists() and "by a script" in path.read_text(), timeout=30)
        assert disagreements(workspace) == []
    finally:
        watcher.stop()


def test_falls_back_to_polling_when_inotify_limits_are_hit(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoWatchesLeft(watcher_module.PollingObserver):
        def start(self) -> None:
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(watcher_module, "Observer", NoWatchesLeft)
    watcher = SyncWatcher(workspace)
    watcher.start()
    try:
        assert watcher.ready.wait(30)
        assert watcher.polling and watcher.alive
        path = workspace.memory_path("coder")
        path.parent.mkdir(parents=True)
        path.write_text(f"## 归档记忆\n- [{TS}] seen by polling\n")
        wait_until(lambda: disagreements(workspace) == [] and watcher.reconciles > 0, timeout=30)
    finally:
        watcher.stop()


def test_periodic_rescan_catches_what_events_missed(workspace: Workspace) -> None:
    watcher = SyncWatcher(workspace, rescan_seconds=0.3)
    watcher.start()
    try:
        assert watcher.ready.wait(30)
        assert watcher.observer is not None
        watcher.observer.stop()  # as if inotify dropped every event from now on
        watcher.observer.join()
        path = workspace.memory_path("coder")
        path.parent.mkdir(parents=True)
        path.write_text(f"## 归档记忆\n- [{TS}] no event for this\n")
        wait_until(lambda: disagreements(workspace) == [], timeout=10)
    finally:
        watcher.stop()


def test_an_edit_while_the_watches_are_rebuilt_after_an_overflow_is_caught_at_once(
    workspace: Workspace,
) -> None:
    """After the kernel's queue overflows, watchdog rebuilds its watches; an editor's
    save meanwhile makes no event, and comes after the rescan the overflow's log record
    asked for. The soak met it: the file unseen until the periodic rescan (here: an hour
    away). watchdog's word that events were lost, queued once it has rebuilt them, makes
    the watcher look again."""
    lost_event = getattr(watchdog_events, "EventsLostEvent", None)
    if lost_event is None:
        pytest.skip("this watchdog does not say when events were lost")
    watcher = SyncWatcher(workspace, rescan_seconds=3600.0)
    watcher.start()
    try:
        assert watcher.ready.wait(30)
        assert watcher.observer is not None
        watcher.observer.unschedule_all()  # the watches being rebuilt: no event at all
        path = workspace.memory_path("coder")
        path.parent.mkdir(parents=True)
        path.write_text(f"## 归档记忆\n- [{TS}] saved while the watches were rebuilt\n")
        time.sleep(0.5)
        assert disagreements(workspace) != []  # unseen: nothing told the watcher
        watcher_module._Events(watcher).dispatch(
            lost_event(str(workspace.agents_dir), is_directory=True)
        )
        wait_until(lambda: disagreements(workspace) == [], timeout=10)
        assert watcher.overflows == 1
    finally:
        watcher.stop()


def test_agent_for_path(workspace: Workspace) -> None:
    agents = workspace.agents_dir
    assert agent_for_path(workspace, str(agents / "coder" / "MEMORY.md")) == "coder"
    assert agent_for_path(workspace, str(agents / "coder")) == "coder"
    assert agent_for_path(workspace, str(agents / "coder" / ".MEMORY.md.ab12.tmp")) == "coder"
    assert agent_for_path(workspace, str(agents / "coder" / "skills" / "x.md")) is None
    assert agent_for_path(workspace, str(workspace.global_memory_dir / "MEMORY.md")) == ""
    assert agent_for_path(workspace, str(workspace.os_dir / "config.toml")) is None


def test_only_the_echo_of_our_own_write_is_ignored(workspace: Workspace) -> None:
    """A file event is skipped only while the file has exactly the stat our last write left."""

    watcher = SyncWatcher(workspace)
    store = watcher.files.get("coder")
    store.append("written by oryxmem")
    assert watcher.is_own_write("coder")
    with open(store.path, "a") as handle:  # a human appends right after
        handle.write(f"- [{TS}] written by a human\n")
    assert not watcher.is_own_write("coder")
    assert not watcher.is_own_write("other")  # never wrote that one
    watcher.stop()


def test_another_program_holding_the_database_is_one_line_not_a_traceback(
    workspace: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    """The passes wait for the lock and say so once; the file is taken in once it is free."""
    watcher = SyncWatcher(workspace, rescan_seconds=0.3)
    watcher.start()
    holder = None
    try:
        assert watcher.ready.wait(30)
        watcher.db.others_wait = 0.1  # give up on another program's lock quickly, retry sooner
        holder = subprocess.Popen(
            ["sqlite3", str(workspace.db_path)], stdin=subprocess.PIPE, text=True
        )
        assert holder.stdin is not None
        # it waits out the watcher's own short write (the change log pruned once it is
        # ready, and at each rescan), then holds the lock
        holder.stdin.write(".timeout 10000\nBEGIN EXCLUSIVE;\nSELECT 1;\n")
        holder.stdin.flush()
        path = workspace.memory_path("coder")
        path.parent.mkdir(parents=True)
        with caplog.at_level("INFO", logger="oryxmem"):
            wait_until(lambda: watcher.last_error is not None, timeout=30)
            path.write_text(f"## 归档记忆\n- [{TS}] written while the database is held\n")
            time.sleep(1)  # several passes find the lock
            holder.stdin.write("COMMIT;\n.quit\n")
            holder.stdin.flush()
            holder.wait(timeout=30)
            wait_until(lambda: disagreements(workspace) == [], timeout=30)
        said = [r.getMessage() for r in caplog.records]
        assert not any("failed" in line for line in said), said
        assert sum("sync waits: database is locked" in line for line in said) >= 1
        assert not any(r.exc_info for r in caplog.records)
    finally:
        if holder is not None and holder.poll() is None:
            holder.kill()
        watcher.stop()


def test_an_agent_whose_saves_are_not_in_the_rows_yet_waits_for_them(
    workspace: Workspace,
) -> None:
    """The daemon names the agents whose acknowledged saves it could not mirror yet: the
    watcher judges their file only once it has them (their history judges a stale
    buffer), and the others at once."""
    held = {"coder"}
    watcher = SyncWatcher(workspace)
    watcher.before_reconcile = lambda due: set(held) & set(due)
    watcher.start()
    try:
        assert watcher.ready.wait(30)
        for agent in ("coder", "writer"):
            path = workspace.memory_path(agent)
            path.parent.mkdir(parents=True)
            path.write_text(f"## 归档记忆\n- [{TS}] typed for {agent}\n")

        def rows_of(agent: str) -> str:
            return sql(workspace, f"SELECT content FROM memory_entries WHERE agent = '{agent}'")

        wait_until(lambda: rows_of("writer") != "", timeout=20)
        time.sleep(1.5)  # three retries of a held agent
        assert rows_of("coder") == ""
        held.clear()  # its saves are in the rows now
        wait_until(lambda: disagreements(workspace) == [], timeout=20)
        assert rows_of("coder") == "typed for coder\n"
    finally:
        watcher.stop()


def test_the_change_log_is_pruned_once_the_watcher_is_ready_not_before(
    workspace: Workspace,
) -> None:
    """The catch-up pass at start only reconciles; the change log (long after an import)
    is pruned right after it, with no rescan due for an hour."""
    set_value(workspace.config_path, "recall.embedder", "none")
    service = MemoryService(workspace, Config.load(workspace.config_path))
    for n in range(30):
        service.save("coder", f"entry {n}")
    service.upkeep.catch_up_indexes()  # the indexes have taken every change in
    service.close()
    assert int(sql(workspace, "SELECT count(*) FROM memory_changes")) == 30
    watcher = SyncWatcher(workspace, rescan_seconds=3600.0)
    pruned_when_ready: list[bool] = []
    prune = watcher.engine.prune_changes

    def noted() -> int:
        pruned_when_ready.append(watcher.ready.is_set())
        return prune()

    watcher.engine.prune_changes = noted  # type: ignore[method-assign]
    watcher.start()
    try:
        assert watcher.ready.wait(30)
        wait_until(lambda: int(sql(workspace, "SELECT count(*) FROM memory_changes")) == 0)
    finally:
        watcher.stop()
    assert pruned_when_ready and all(pruned_when_ready)


def test_a_row_written_while_the_watcher_starts_is_followed_without_a_rescan(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program's INSERT committed after the catch-up pass looked, but before the loop
    began, is still seen by the database check (here every hour, as the rescan): it
    stayed a plain row until the rescan when the check's baseline was read after it."""
    monkeypatch.setattr(watcher_module, "DB_POLL_SECONDS", 3600.0)
    watcher = SyncWatcher(workspace, rescan_seconds=3600.0)
    prune = watcher.engine.prune_changes

    def written_meanwhile() -> int:  # runs between the catch-up and the loop
        sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'late')")
        return prune()

    watcher.engine.prune_changes = written_meanwhile  # type: ignore[method-assign]
    watcher.start()
    try:
        path = workspace.memory_path("coder")
        wait_until(lambda: path.exists() and "late" in path.read_text(), timeout=30)
        assert disagreements(workspace) == []
    finally:
        watcher.stop()
