"""Memory in real git: setup, the merge driver run by git itself on two clones, the
pre-commit hook, tombstones through merges, scan, and forget from the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import run_cli

from oryxmem.store.format import parse

AWS = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key: what detect-secrets knows


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if check:
        assert done.returncode == 0, f"git {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def cli(root: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli("--root", str(root), *args, cwd=cwd or root)


def memory_of(root: Path, agent: str = "coder") -> str:
    return (root / ".oryxos" / "agents" / agent / "MEMORY.md").read_text()


def contents(root: Path, agent: str = "coder") -> list[str]:
    return sorted(entry.content for entry in parse(memory_of(root, agent)).all_entries())


@pytest.fixture
def clones(tmp_path: Path, isolated_paths: Path) -> tuple[Path, Path]:
    """A bare remote and two clones of it, each set up with oryxmem git setup."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    a, b = tmp_path / "a", tmp_path / "b"
    git(tmp_path, "clone", "-q", str(remote), str(a))
    git(a, "checkout", "-q", "-b", "main")
    assert cli(a, "init", "--git").returncode == 0
    memory = a / ".oryxos" / "agents" / "coder" / "MEMORY.md"
    memory.parent.mkdir(parents=True)
    memory.write_text(
        "## 核心记忆\n- [2026-07-22 09:30:00] the user is Ada\n"
        "## 归档记忆\n- [2026-07-22 09:30:01] the project is oryx\n"
    )
    git(a, "add", "-A")
    git(a, "commit", "-qm", "base")
    git(a, "push", "-q", "origin", "main")
    git(tmp_path, "clone", "-q", "-b", "main", str(remote), str(b))
    assert cli(b, "git", "setup").returncode == 0
    return a, b


def test_setup_is_idempotent_chains_a_hook_and_is_not_shadowed(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    hooks = repo / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    theirs = hooks / "pre-commit"
    theirs.write_text(f"#!/bin/sh\necho their hook ran >> {tmp_path / 'ran'}\n")
    theirs.chmod(0o755)
    first = cli(repo, "init", "--git")
    assert first.returncode == 0 and "pre-commit.oryxmem-chained" in first.stdout
    assert cli(repo, "git", "setup").stdout == "already set up; nothing changed\n"
    attributes = (repo / ".oryxos" / ".gitattributes").read_text()
    assert "agents/*/MEMORY.md merge=oryxmem" in attributes and "union" not in attributes
    driver = git(repo, "config", "merge.oryxmem.driver").stdout
    assert driver.startswith(sys.executable) and " -P -m oryxmem merge-driver %O %A %B %P" in driver
    # A project folder holding an oryxmem.py (or package) must not run as the driver/hook.
    (repo / "oryxmem.py").write_text("raise SystemExit('hijacked')\n")
    (repo / "oryxmem").mkdir()
    (repo / "oryxmem" / "__main__.py").write_text("raise SystemExit('hijacked')\n")
    assert cli(repo, "save", "-a", "coder", "a note", cwd=tmp_path).returncode == 0
    git(repo, "add", ".oryxos")
    done = git(repo, "commit", "-qm", "one")
    assert "hijacked" not in done.stdout + done.stderr
    assert (tmp_path / "ran").read_text() == "their hook ran\n"  # chained, after ours


def test_two_clones_with_plain_git_merge_by_entry(clones: tuple[Path, Path]) -> None:
    a, b = clones
    assert cli(a, "save", "-a", "coder", "from a").returncode == 0
    assert cli(b, "save", "-a", "coder", "from b").returncode == 0
    (forgotten,) = [
        e["id"]
        for e in json.loads(cli(b, "show", "-a", "coder", "--json").stdout)["archival"]
        if e["content"] == "the project is oryx"
    ]
    assert cli(b, "forget", "-a", "coder", forgotten).returncode == 0
    for clone in (a, b):
        git(clone, "add", "-A")
        git(clone, "commit", "-qm", f"on {clone.name}")
    git(b, "push", "-q", "origin", "main")
    pulled = git(a, "pull", "-q", "--no-rebase", "origin", "main")
    assert "CONFLICT" not in pulled.stdout + pulled.stderr
    text = memory_of(a)
    assert "<<<<<<<" not in text
    assert contents(a) == ["from a", "from b", "the user is Ada"]
    git(a, "push", "-q", "origin", "main")
    git(b, "pull", "-q", "origin", "main")
    assert memory_of(b) == text  # the same bytes on both clones
    # b's stale copy of the forgotten entry cannot come back: not by a merge of an old
    # branch, not by a file restored with it.
    tombstones = (a / ".oryxos" / "agents" / "coder" / "TOMBSTONES").read_text()
    assert forgotten in tombstones and "the project is oryx" not in tombstones
    git(b, "checkout", "-q", "-b", "old", "HEAD~2")
    assert "the project is oryx" in contents(b)
    assert cli(b, "save", "-a", "coder", "on the old branch").returncode == 0
    git(b, "commit", "-qam", "old")
    git(b, "checkout", "-q", "main")
    git(b, "merge", "-q", "--no-edit", "old")
    assert "the project is oryx" not in contents(b)
    assert "on the old branch" in contents(b)


def test_a_core_entry_edited_on_both_clones_keeps_both_and_status_says(
    clones: tuple[Path, Path],
) -> None:
    a, b = clones
    for clone, name in ((a, "Ada Lovelace"), (b, "Ada King")):
        path = clone / ".oryxos" / "agents" / "coder" / "MEMORY.md"
        path.write_text(path.read_text().replace("the user is Ada", f"the user is {name}"))
        git(clone, "commit", "-qam", f"edit on {clone.name}")
    git(b, "push", "-q", "origin", "main")
    from support.daemon import daemon
    from support.sync import wait_until

    from oryxmem.workspace import Workspace

    log = a.parent / "a-daemon.log"
    with daemon(Workspace(a), log, env={"ORYXMEM_ROOT": str(a)}):  # a person's git pull
        pulled = git(a, "pull", "--no-rebase", "origin", "main")
        wait_until(lambda: "git merge:" in log.read_text())
    assert "both versions are kept: 'the user is Ada Lovelace' and 'the user is Ada King'" in (
        log.read_text()
    )
    assert "both versions are kept" in pulled.stderr
    assert {"the user is Ada Lovelace", "the user is Ada King"} <= set(contents(a))
    assert "<<<<<<<" not in memory_of(a)
    status = cli(a, "status").stdout
    assert "merge kept both versions of the core entry" in status
    ids = json.loads(cli(a, "show", "-a", "coder", "--json").stdout)["core"]
    wrong = next(e["id"] for e in ids if e["content"] == "the user is Ada King")
    assert cli(a, "forget", "-a", "coder", wrong).returncode == 0
    assert "merge kept both versions" not in cli(a, "status").stdout  # resolved


def test_a_line_deleted_by_hand_is_tombstoned_when_committed(clones: tuple[Path, Path]) -> None:
    a, b = clones
    path = a / ".oryxos" / "agents" / "coder" / "MEMORY.md"
    path.write_text("".join(line for line in path.open() if "oryx" not in line))
    git(a, "commit", "-qam", "removed by hand")
    stones = (a / ".oryxos" / "agents" / "coder" / "TOMBSTONES").read_text()
    assert len([line for line in stones.splitlines() if not line.startswith("#")]) == 1
    assert git(a, "show", "--stat", "HEAD").stdout.count("TOMBSTONES") == 1  # in the commit
    # A clone whose file still has it, merged without the driver (union): the next
    # reconcile there takes it out again, because the tombstone came with the merge.
    git(b, "config", "--unset", "merge.oryxmem.driver")
    (b / ".oryxos" / ".gitattributes").write_text("agents/*/MEMORY.md merge=union\n")
    git(b, "commit", "-qam", "union here")
    assert cli(b, "save", "-a", "coder", "b note").returncode == 0
    git(b, "commit", "-qam", "b note")
    git(a, "push", "-q", "origin", "main")
    git(b, "pull", "-q", "--no-rebase", "-X", "theirs", "origin", "main")
    assert cli(b, "sync").returncode == 0
    assert "the project is oryx" not in contents(b) and "b note" in contents(b)


def test_the_hook_refuses_a_staged_secret_and_scan_finds_it(clones: tuple[Path, Path]) -> None:
    a, _ = clones
    refused = cli(a, "save", "-a", "coder", f"the deploy key is {AWS}")
    assert refused.returncode == 1 and "looks like a credential" in refused.stderr
    assert AWS not in memory_of(a)  # nothing written
    path = a / ".oryxos" / "agents" / "coder" / "MEMORY.md"
    with path.open("a") as out:  # typed by hand: the save check never saw it
        out.write(f"- [2026-01-01 00:00:00] aws {AWS}\n")
    scanned = cli(a, "scan")
    assert scanned.returncode == 1 and "AWS Access Key" in scanned.stdout
    assert f"{path}:" in scanned.stdout
    git(a, "add", "-A")
    done = git(a, "commit", "-qm", "with a key", check=False)
    assert done.returncode != 0 and "commit refused" in done.stderr
    git(a, "commit", "-qm", "with a key anyway", "--no-verify")
    path.write_text("".join(line for line in path.open() if AWS not in line))
    git(a, "commit", "-qam", "key removed")
    assert cli(a, "scan").returncode == 0
    history = cli(a, "scan", "--history")
    assert history.returncode == 1 and "AWS Access Key" in history.stdout


def test_redact_and_allow(workspace) -> None:  # type: ignore[no-untyped-def]
    root = workspace.root
    assert cli(root, "config", "set", "memory.secrets", "redact").returncode == 0
    assert cli(root, "save", f"key {AWS} for prod").returncode == 0
    text = (root / ".oryxos" / "memory" / "MEMORY.md").read_text()
    assert AWS not in text and "[secret removed: AWS Access Key]" in text
    assert cli(root, "config", "set", "memory.secrets", "allow").returncode == 0
    assert cli(root, "save", f"key {AWS}").returncode == 0
    assert AWS in (root / ".oryxos" / "memory" / "MEMORY.md").read_text()


def test_forget_by_match_with_purge(workspace) -> None:  # type: ignore[no-untyped-def]
    root = workspace.root
    for text in ("likes green tea", "likes black tea", "drives a bike"):
        assert cli(root, "save", "-a", "coder", text).returncode == 0
    asked = run_cli("--root", str(root), "forget", "-a", "coder", "--match", "TEA", stdin="n\n")
    assert asked.returncode == 1 and "nothing was forgotten" in asked.stderr
    assert len(contents(root)) == 3
    done = cli(root, "forget", "-a", "coder", "--match", "tea", "--yes", "--purge")
    assert done.returncode == 0 and done.stdout.count("forgot from agent 'coder'") == 2
    assert contents(root) == ["drives a bike"]
    history = json.loads(cli(root, "history", "-a", "coder", "--json").stdout)
    assert not any("tea" in (event.get("content") or "") for event in history)
    stones = (root / ".oryxos" / "agents" / "coder" / "TOMBSTONES").read_text()
    assert "tea" not in stones and len(stones.splitlines()) == 4  # header + 2
    missing = cli(root, "forget", "-a", "coder", "0000000000000000")
    assert missing.returncode == 1 and "no entry 0000000000000000" in missing.stderr


def test_the_daemon_says_when_a_clone_lacks_the_driver(clones: tuple[Path, Path]) -> None:
    from support.daemon import daemon

    from oryxmem.workspace import Workspace

    _, b = clones
    assert "merge.oryxmem.driver" not in cli(b, "status").stdout
    git(b, "config", "--unset", "merge.oryxmem.driver")
    assert "run 'oryxmem git setup' once" in cli(b, "status").stdout  # a clone lacks it
    log = b.parent / "b-daemon.log"
    with daemon(Workspace(b), log, env={"ORYXMEM_ROOT": str(b)}):
        pass
    assert "git: this clone has no merge.oryxmem.driver: run 'oryxmem git setup' once" in (
        log.read_text()
    )


def _loop(root: Path, remote: str = "origin"):  # type: ignore[no-untyped-def]
    from oryxmem.config import Config
    from oryxmem.service import MemoryService
    from oryxmem.sync.gitloop import GitSync
    from oryxmem.workspace import Workspace

    workspace = Workspace(root)
    assert cli(root, "config", "set", "sync.git.remote", remote).returncode == 0
    config = Config.load(workspace.config_path)
    service = MemoryService(workspace, config)
    return GitSync(workspace, service.files, config), service


def test_the_loop_waits_for_a_person_stays_inside_oryxos_and_backs_off(
    clones: tuple[Path, Path],
) -> None:
    a, b = clones
    loop, service = _loop(a)
    try:
        assert cli(a, "save", "-a", "coder", "saved on a").returncode == 0
        before = git(a, "rev-parse", "HEAD").stdout
        git(a, "bisect", "start")  # a person is mid-bisect: nothing is committed
        loop.step()
        assert "BISECT_LOG" in (loop.state.waiting or "")
        assert git(a, "rev-parse", "HEAD").stdout == before
        git(a, "bisect", "reset")
        # A key typed into a MEMORY.md by hand: nothing is committed, nothing left staged.
        memory = a / ".oryxos" / "agents" / "coder" / "MEMORY.md"
        clean = memory.read_text()
        memory.write_text(clean + f"- [2026-01-01 00:00:00] aws {AWS}\n")
        loop.step()
        assert "AWS Access Key" in (loop.state.waiting or "")
        assert git(a, "rev-parse", "HEAD").stdout == before
        assert not git(a, "diff", "--cached", "--name-only").stdout
        memory.write_text(clean)
        # The remote has a change outside .oryxos/: memory is committed, not merged or pushed.
        (b / "README").write_text("code, not memory\n")
        git(b, "add", "README")
        git(b, "commit", "-qm", "code")
        git(b, "push", "-q", "origin", "main")
        (a / "notes.txt").write_text("a person's file, never committed by oryxmem\n")
        git(a, "add", "notes.txt")
        loop.step()
        assert "pull them yourself" in (loop.state.waiting or "")
        assert "oryxmem: coder +1" in git(a, "log", "-1", "--format=%s").stdout
        assert not (a / "README").exists() and not (a / ".git" / "MERGE_HEAD").exists()
        assert "notes.txt" in git(a, "diff", "--cached", "--name-only").stdout  # still staged
        assert "notes.txt" not in git(a, "show", "--name-only", "HEAD").stdout
    finally:
        service.close()
    broken, service = _loop(a, remote=str(a.parent / "no-such-remote.git"))
    try:
        interval = broken.interval()
        broken.step()
        assert broken.state.last_error and broken.state.failures == 1
        assert broken.interval() == 2 * interval  # backs off
    finally:
        service.close()
