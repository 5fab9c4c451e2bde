"""The sync watcher as a real process: editors, git, the sqlite3 shell, SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.daemon import wait_for_ready
from support.sync import Background, disagreements, file_items, git, row_items, sql, wait_until

from oryxmem.config import Config
from oryxmem.service import MemoryService
from oryxmem.workspace import Workspace

TS = "2026-07-22 09:30:00"
Start = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture
def watcher(workspace: Workspace, tmp_path: Path) -> Iterator[Start]:
    """Start `oryxmem sync --watch` (again, after a kill); all are stopped at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        log = tmp_path / f"watch-{len(procs)}.log"
        name = f"oryxmem-watch-{os.getpid()}-{len(procs)}"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notifications:
            notifications.bind("\0" + name)  # where it says READY=1
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "oryxmem", "sync", "--watch"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env={
                        **os.environ,
                        "ORYXMEM_ROOT": str(workspace.root),
                        "NOTIFY_SOCKET": "@" + name,
                    },
                )
            procs.append(proc)
            wait_for_ready(proc, notifications, log)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
    for log in tmp_path.glob("watch-*.log"):
        assert "Traceback" not in log.read_text(), log.read_text()


def settled(workspace: Workspace) -> float:
    return wait_until(lambda: disagreements(workspace) == [], timeout=30)


def contents(workspace: Workspace, agent: str) -> list[str]:
    return sorted(item[2] for item in file_items(workspace, agent).elements())


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_editor_saves_and_shell_writes_converge_live(workspace: Workspace, watcher: Start) -> None:
    path = workspace.memory_path("coder")
    write(path, f"## 归档记忆\n- [{TS}] one\n")
    watcher()
    settled(workspace)
    swap = path.with_name(".MEMORY.md.swp")  # vim: write aside, rename over
    swap.write_text(path.read_text() + f"- [{TS}] from vim\n")
    os.replace(swap, path)
    settled(workspace)
    with open(path, "r+", encoding="utf-8") as handle:  # VS Code: truncate, then write, slowly
        text = handle.read() + f"- [{TS}] from vscode\n"
        handle.seek(0)
        handle.truncate()
        handle.write(text[: len(text) // 2])
        handle.flush()
        time.sleep(0.05)  # a save caught half-way
        handle.write(text[len(text) // 2 :])
    settled(workspace)
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'from the shell')")
    settled(workspace)
    assert contents(workspace, "coder") == ["from the shell", "from vim", "from vscode", "one"]


def test_new_agent_directory_written_at_once(workspace: Workspace, watcher: Start) -> None:
    watcher()
    for n in range(5):
        write(workspace.memory_path(f"agent{n}"), f"## 归档记忆\n- [{TS}] hello {n}\n")
    settled(workspace)
    assert all(len(row_items(workspace, f"agent{n}")) == 1 for n in range(5))


def test_file_deleted_then_restored_by_git(workspace: Workspace, watcher: Start) -> None:
    git(workspace.root, "init", "-q")
    path = workspace.memory_path("coder")
    write(path, f"## 归档记忆\n- [{TS}] a\n- [{TS}] b\n")
    git(workspace.root, "add", ".oryxos")
    git(workspace.root, "commit", "-qm", "memory")
    watcher()
    settled(workspace)
    path.unlink()
    wait_until(lambda: row_items(workspace, "coder") == {})
    git(workspace.root, "checkout", "--", ".oryxos/agents/coder/MEMORY.md")
    settled(workspace)
    assert len(row_items(workspace, "coder")) == 2


def test_git_checkout_merge_stash_and_pull_rebase(
    workspace: Workspace, watcher: Start, tmp_path: Path
) -> None:
    from support.processes import run_cli

    repo = workspace.root
    git(repo, "init", "-q", "-b", "main")
    run_cli("init", "--git")
    path = workspace.memory_path("coder")
    write(path, f"## 核心记忆\n- [{TS}] stable\n\n## 归档记忆\n- [{TS}] base\n")
    git(repo, "add", ".oryxos")
    git(repo, "commit", "-qm", "base")
    watcher()
    settled(workspace)

    git(repo, "checkout", "-qb", "topic")
    with open(path, "a") as handle:
        handle.write(f"- [{TS}] on topic\n")
    git(repo, "commit", "-qam", "topic")
    git(repo, "checkout", "-q", "main")
    settled(workspace)
    assert contents(workspace, "coder") == ["base", "stable"]
    git(repo, "checkout", "-q", "topic")
    settled(workspace)
    assert contents(workspace, "coder") == ["base", "on topic", "stable"]

    git(repo, "checkout", "-q", "main")
    with open(path, "a") as handle:
        handle.write(f"- [{TS}] on main\n")
    git(repo, "commit", "-qam", "main")
    git(repo, "merge", "-q", "--no-edit", "topic")  # merge=union: both appends survive
    settled(workspace)
    assert contents(workspace, "coder") == ["base", "on main", "on topic", "stable"]

    with open(path, "a") as handle:
        handle.write(f"- [{TS}] stashed\n")
    settled(workspace)
    git(repo, "stash", "-q")
    settled(workspace)
    assert "stashed" not in contents(workspace, "coder")
    git(repo, "stash", "pop", "-q")
    settled(workspace)
    assert "stashed" in contents(workspace, "coder")
    git(repo, "commit", "-qam", "stash popped")

    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(repo), str(other))
    other_file = other / ".oryxos" / "agents" / "coder" / "MEMORY.md"
    with open(other_file, "a") as handle:
        handle.write(f"- [{TS}] from the other clone\n")
    git(other, "commit", "-qam", "other")
    with open(path, "a") as handle:
        handle.write(f"- [{TS}] local before pull\n")
    git(repo, "commit", "-qam", "local")
    git(repo, "pull", "-q", "--rebase", str(other), "main")
    settled(workspace)
    assert {"from the other clone", "local before pull"} <= set(contents(workspace, "coder"))


def test_conflicted_merge_is_not_ingested_and_saves_wait(
    workspace: Workspace, watcher: Start, tmp_path: Path
) -> None:
    repo = workspace.root
    git(repo, "init", "-q", "-b", "main")
    path = workspace.memory_path("coder")
    write(path, f"## 归档记忆\n- [{TS}] base\n")  # no merge=union here: git will conflict
    git(repo, "add", ".oryxos")
    git(repo, "commit", "-qm", "base")
    git(repo, "checkout", "-qb", "topic")
    path.write_text(f"## 归档记忆\n- [{TS}] base\n- [{TS}] topic\n")
    git(repo, "commit", "-qam", "topic")
    git(repo, "checkout", "-q", "main")
    path.write_text(f"## 归档记忆\n- [{TS}] base\n- [{TS}] main\n")
    git(repo, "commit", "-qam", "main")
    watcher()
    settled(workspace)
    subprocess.run(["git", "merge", "topic"], cwd=repo, capture_output=True)
    assert "<<<<<<<" in path.read_text()
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'saved mid-merge')")
    log = tmp_path / "watch-0.log"
    wait_until(lambda: b"coder: deferred: git is busy (MERGE_HEAD)" in log.read_bytes())
    assert "<<<<<<<" in path.read_text(), "a conflicted file is never written"
    assert "saved mid-merge" in [i[2] for i in row_items(workspace, "coder").elements()]
    path.write_text(f"## 归档记忆\n- [{TS}] base\n- [{TS}] main\n- [{TS}] topic\n")
    git(repo, "commit", "-qam", "resolved")
    settled(workspace)
    assert contents(workspace, "coder") == ["base", "main", "saved mid-merge", "topic"]


def test_sigkill_at_random_points_loses_and_duplicates_nothing(
    workspace: Workspace, watcher: Start
) -> None:
    rng = random.Random(int(os.environ.get("ORYXMEM_SEED", "20261130")))
    acknowledged: list[tuple[str, str]] = []
    stop = threading.Event()

    def writer() -> None:
        service = MemoryService(workspace, Config.load(workspace.config_path))
        conn = sqlite3.connect(workspace.db_path, timeout=30)
        i = 0
        while not stop.is_set():
            agent = f"a{i % 3}"
            if i % 2:
                service.save(agent, f"save {i}", "core" if i % 7 == 0 else "archival")
            else:
                with conn:
                    conn.execute(
                        "INSERT INTO memory_entries(agent, scope, content) VALUES (?, ?, ?)",
                        [agent, "core" if i % 5 == 0 else "archival", f"row {i}"],
                    )
            acknowledged.append((agent, f"save {i}" if i % 2 else f"row {i}"))
            i += 1
            time.sleep(rng.uniform(0, 0.01))
        conn.close()
        service.close()

    proc = watcher()
    thread = Background(writer)
    thread.start()
    try:
        for _ in range(5):
            time.sleep(rng.uniform(0.1, 0.6))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            proc = watcher()
    finally:
        stop.set()
        thread.join()  # and any error the writer met is this test's
    settled(workspace)
    assert len(acknowledged) > 50
    for agent in ("a0", "a1", "a2"):
        expected = sorted(content for who, content in acknowledged if who == agent)
        assert contents(workspace, agent) == expected
        assert sorted(i[2] for i in row_items(workspace, agent).elements()) == expected
    assert list(workspace.os_dir.rglob("*.tmp")) == []
