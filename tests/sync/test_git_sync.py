"""Three clones of one bare remote, each with its own daemon syncing through git
(sync.git.remote, a short interval): saves on all three at once, a hand edit on one, a
forget on another, pushes racing. After quiet every clone has the same bytes, each save
once, the forgotten entry nowhere, no clone mid-merge, rows equal to files. The CPU is
kept busy meanwhile, as a user's machine is."""

from __future__ import annotations

import json
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from support.daemon import RunningDaemon, start_daemon
from support.sync import cpu_load
from test_git import cli, git

from oryxmem.fileio import FileLock
from oryxmem.store.format import parse
from oryxmem.workspace import Workspace

SAVES_EACH = 9
QUIET_SECONDS = 240


def files_of(root: Path) -> dict[str, str]:
    os_dir = root / ".oryxos"
    return {
        str(path.relative_to(os_dir)): path.read_text()
        for path in sorted(os_dir.glob("agents/*/*")) + sorted(os_dir.glob("memory/*"))
        if path.name in ("MEMORY.md", "TOMBSTONES")
    }


def rows_match_files(root: Path) -> bool:
    db = sqlite3.connect(root / ".oryxos" / "oryxos.db")
    try:
        rows = Counter(db.execute("SELECT agent, scope, ts, content FROM memory_entries"))
    finally:
        db.close()
    in_files: Counter[tuple[str, str, str | None, str]] = Counter()
    for agent in ("coder", "writer"):
        path = root / ".oryxos" / "agents" / agent / "MEMORY.md"
        if path.exists():
            for e in parse(path.read_text()).all_entries():
                in_files[(agent, e.scope, e.ts, e.content)] += 1
    return rows == in_files


def save(daemon: RunningDaemon, agent: str, content: str) -> None:
    body = json.dumps({"content": content})
    status, reply = daemon.curl("-X", "POST", "-d", body, f"http://x/api/v1/agents/{agent}/memory")
    assert status == 200, reply


@pytest.mark.timeout(600)
def test_three_clones_with_daemons_converge(tmp_path: Path, isolated_paths: Path) -> None:
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    roots = [tmp_path / name for name in ("a", "b", "c")]
    git(tmp_path, "clone", "-q", str(remote), str(roots[0]))
    git(roots[0], "checkout", "-q", "-b", "main")
    assert cli(roots[0], "init", "--git").returncode == 0
    assert cli(roots[0], "save", "-a", "coder", "the first entry").returncode == 0
    assert cli(roots[0], "save", "-a", "coder", "to be forgotten").returncode == 0
    git(roots[0], "add", "-A")
    git(roots[0], "commit", "-qm", "base")
    git(roots[0], "push", "-q", "origin", "main")
    for root in roots[1:]:
        git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(root))
        assert cli(root, "git", "setup").returncode == 0
    for root in roots:
        assert cli(root, "config", "set", "sync.git.remote", "origin").returncode == 0
        assert cli(root, "config", "set", "sync.git.interval_seconds", "1").returncode == 0
    daemons: list[RunningDaemon] = []
    sockets = tempfile.TemporaryDirectory(prefix="oxg-", dir="/tmp")
    expected = {"the first entry"}
    try:
        for index, root in enumerate(roots):
            env = {"ORYXMEM_SOCKET": f"{sockets.name}/{index}.sock", "ORYXMEM_ROOT": str(root)}
            daemons.append(start_daemon(Workspace(root), tmp_path / f"d{index}.log", env=env))
        with cpu_load(1):  # one spinner: the suite's other files share the machine too
            threads = []
            for index, running in enumerate(daemons):
                texts = [f"clone {index} save {n}" for n in range(SAVES_EACH)]
                expected.update(texts)

                def saves(running: RunningDaemon = running, texts: list[str] = texts) -> None:
                    for n, text in enumerate(texts):
                        save(running, "writer" if n % 3 == 0 else "coder", text)
                        time.sleep(0.1)

                threads.append(threading.Thread(target=saves))
            for thread in threads:
                thread.start()
            time.sleep(1.5)
            # A hand edit on b: a line appended by another program. It holds the agent's
            # lock, as the daemon's git merges and file writes do: git's checkout and an
            # atomic replace each put a new file in place, and an append that lands on
            # the old one between their read and their rename is gone whoever wrote it.
            path = roots[1] / ".oryxos" / "agents" / "coder" / "MEMORY.md"
            lock = FileLock(Workspace(roots[1]).lock_path("coder"))
            with lock.hold(), path.open("a") as out:
                out.write("- [2026-01-01 00:00:00] typed by hand on b\n")
            expected.add("typed by hand on b")
            # A forget on c, by id, through its daemon.
            status, shown = daemons[2].curl("http://x/api/v1/agents/coder/memory")
            (gone,) = [
                e["id"] for e in shown["data"]["archival"] if e["content"] == "to be forgotten"
            ]
            status, reply = daemons[2].curl(
                "-X",
                "POST",
                "-d",
                json.dumps({"ids": [gone]}),
                "http://x/api/v1/agents/coder/memory/forget",
            )
            assert status == 200, reply
            for thread in threads:
                thread.join()
            converged = _wait_for_quiet(roots)
        assert converged, [files_of(root) for root in roots]
        final = files_of(roots[0])
        for agent_file, text in final.items():
            assert "<<<<<<<" not in text and ">>>>>>>" not in text, agent_file
        said = Counter(
            e.content
            for name, text in final.items()
            if name.endswith("MEMORY.md")
            for e in parse(text).all_entries()
        )
        assert set(said) == expected, set(said) ^ expected
        assert all(count == 1 for count in said.values()), said
        for root in roots:
            assert not (root / ".git" / "MERGE_HEAD").exists()
            assert rows_match_files(root)
        for running in daemons:  # more rounds: the forgotten entry stays gone
            status, health = running.curl("http://x/api/v1/health")
            assert health["data"]["git"]["last_push"] or health["data"]["git"]["last_pull"]
        time.sleep(2.5)  # more passes on every clone: nothing changes, nothing comes back
        assert all(files_of(root) == final for root in roots)
    finally:
        for running in daemons:
            running.stop()
            assert "Traceback" not in running.text(), running.text()
        sockets.cleanup()


def _wait_for_quiet(roots: list[Path]) -> bool:
    """Until every clone has the same memory files and rows that match them, twice over a
    few seconds (a pass may still be under way)."""
    deadline = time.monotonic() + QUIET_SECONDS
    agreed = 0
    while time.monotonic() < deadline:
        states = [files_of(root) for root in roots]
        heads = {git(root, "rev-parse", "HEAD").stdout for root in roots}
        if (
            all(s == states[0] for s in states)
            and len(heads) == 1
            and all(rows_match_files(root) for root in roots)
        ):
            agreed += 1
            if agreed >= 2:
                return True
        else:
            agreed = 0
        time.sleep(1.0)
    return False
