"""Lines the parser keeps but does not understand, and repairs after a crash, are told:
in `oryxmem sync`'s output and the daemon's log once each, in `oryxmem status` while
they last, always with the file and the line number."""

from __future__ import annotations

from pathlib import Path

from support.daemon import daemon
from support.processes import run_cli
from support.sync import wait_until

from oryxmem.fileio import AppendIntent, FileLock
from oryxmem.store.answered import AnsweredLog
from oryxmem.workspace import Workspace

TS = "2026-07-22 09:30:00"
ODD = "this line is neither an entry nor a heading"


def write_with_an_odd_line(workspace: Workspace) -> Path:
    path = workspace.memory_path("coder")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"## 归档记忆\n- [{TS}] fine\n{ODD}\n- [{TS}] also fine\n", encoding="utf-8")
    return path


def test_kept_lines_are_told_once_by_sync_and_always_by_status(workspace: Workspace) -> None:
    path = write_with_an_odd_line(workspace)
    first = run_cli("sync")
    assert first.returncode == 0, first.stderr
    assert f"note: {path}:3: kept as it is, not an entry: {ODD}\n" in first.stdout
    again = run_cli("sync")
    assert "note:" not in again.stdout, "told once"
    for _ in range(2):
        status = run_cli("status")
        assert f"kept       {path}:3: not an entry: {ODD}\n" in status.stdout
    path.write_text(f"## 归档记忆\n- [{TS}] fine\n- [{TS}] also fine\n", encoding="utf-8")
    run_cli("sync")
    assert "kept " not in run_cli("status").stdout, "fixed: no longer listed"


def test_a_repair_after_a_crash_is_told_with_its_line(workspace: Workspace) -> None:
    path = workspace.memory_path("coder")
    path.parent.mkdir(parents=True)
    path.write_text(f"## 归档记忆\n- [{TS}] before the crash\n", encoding="utf-8")
    run_cli("sync")
    line = f"- [{TS}] the line being written when the power failed\n".encode()
    lock = FileLock(workspace.lock_path("coder"))
    journal = AnsweredLog(lock.lock_path.with_name(lock.lock_path.name + ".answered"))
    with lock.hold():  # what a crash mid-append leaves: the intent, not marked done
        journal.note([], AppendIntent(path.stat().st_ino, path.stat().st_size, line))
    lock.close()
    with open(path, "ab") as handle:
        handle.write(line[:17])  # torn
    done = run_cli("sync")
    assert f"note: {path}:3: after a crash, repaired a torn line (17 of" in done.stdout
    assert "note:" not in run_cli("sync").stdout
    status = run_cli("status").stdout
    assert f"{path}:3: after a crash, repaired a torn line" in status
    assert path.read_bytes().endswith(line)


def test_the_daemon_logs_a_kept_line_once(workspace: Workspace, tmp_path: Path) -> None:
    path = write_with_an_odd_line(workspace)
    log = tmp_path / "daemon.log"
    with daemon(workspace, log) as running:
        wait_until(lambda: f"{path}:3: kept as it is, not an entry" in running.text())
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"- [{TS}] typed later\n")
        wait_until(lambda: "typed later" in run_cli("recall", "-a", "coder", "typed").stdout)
        _, reply = running.curl("http://x/api/v1/health")
        assert reply["data"]["sync"]["kept_lines"] == [
            {"agent": "coder", "path": str(path), "line": 3, "text": ODD}
        ]
    assert running.text().count("kept as it is, not an entry") == 1
