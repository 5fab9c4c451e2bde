"""Fault injection against the real daemon: a full disk and a failing one.

For each fault: the save is refused with a clear error, MEMORY.md keeps its
previous bytes (never empty, never half-written), the daemon keeps serving, and
once the disk is back saves work again and the rows catch up.

- I/O errors come from an LD_PRELOAD shim (support/faultshim.c, built here with gcc)
  that fails write() or fsync() on MEMORY.md, its temp files and the journal of its
  appends while a trigger file says so.
- A full disk is a real 4 MiB tmpfs filled to the brim (skipped where mounting
  is not allowed), and RLIMIT_FSIZE lowered on the running daemon with prlimit.
"""

from __future__ import annotations

import errno
import os
import resource
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import daemon
from support.sync import disagreements, wait_until

from oryxmem.client import Client
from oryxmem.config import default_config_text
from oryxmem.errors import StorageError
from oryxmem.store.format import parse
from oryxmem.workspace import Workspace, init_workspace

SHIM_SOURCE = Path(__file__).parents[1] / "support" / "faultshim.c"


@pytest.fixture(scope="session")
def fault_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("shim") / "faultshim.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(built), str(SHIM_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    return built


def contents(workspace: Workspace, agent: str) -> list[str]:
    doc = parse(workspace.memory_path(agent).read_text(encoding="utf-8"))
    assert doc.parseable and doc.unparsed == []
    return [entry.content for entry in doc.all_entries()]


def refused_and_untouched(client: Client, path: Path, content: str, scope: str) -> StorageError:
    """The save fails with a storage error and the file keeps every byte it had."""
    before = path.read_bytes()
    with pytest.raises(StorageError) as caught:
        client.save("coder", content, scope)
    assert path.read_bytes() == before
    assert client.health()["watcher_alive"]  # and the daemon still serves
    return caught.value


def test_io_errors_on_write_and_fsync_refuse_the_save_and_keep_the_file(
    workspace: Workspace, tmp_path: Path, fault_shim: Path
) -> None:
    trigger = tmp_path / "fault"
    env = {"LD_PRELOAD": str(fault_shim), "ORYXMEM_FAULT_TRIGGER": str(trigger)}
    with daemon(workspace, tmp_path / "daemon.log", env=env) as running:
        client = Client(running.socket)
        client.save("coder", "a core fact", "core")
        client.save("coder", "before the faults")
        path = workspace.memory_path("coder")
        # archival lands at the end: an append in place; core sits above: a rewrite.
        for call in ("fsync", "write"):
            for scope in ("archival", "core"):
                trigger.write_text(call)
                error = refused_and_untouched(client, path, f"during {call} {scope}", scope)
                assert "Input/output error" in error.message, error.message
                assert error.code == 2003
                trigger.unlink()
        client.save("coder", "after the faults")
        client.save("coder", "another core fact", "core")
        wait_until(lambda: disagreements(workspace) == [])
        assert contents(workspace, "coder") == [
            "a core fact",
            "another core fact",
            "before the faults",
            "after the faults",
        ]
        assert not list(path.parent.glob("*.tmp"))
    assert "failed: could not" in running.text()  # one line per refused save


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(disk: Path) -> Path:
    """Write zeros until the disk is full; the file, to delete when space must return."""
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as error:
            assert error.errno == errno.ENOSPC
    return filler


def save_until_refused(client: Client, path: Path) -> tuple[list[str], StorageError]:
    """Saves that still fit, then the first one refused (which must change nothing)."""
    saved: list[str] = []
    for n in range(2000):
        content = f"while full {n} " + "x" * 200
        before = path.read_bytes()
        try:
            client.save("coder", content)
        except StorageError as error:
            assert path.read_bytes() == before
            return saved, error
        saved.append(content)
    raise AssertionError("the disk never filled up")


def test_a_full_disk_refuses_saves_and_they_work_again_when_space_returns(
    small_disk: Path, tmp_path: Path
) -> None:
    init_workspace(small_disk, config_text=default_config_text())
    workspace = Workspace(small_disk.resolve())
    env = {"ORYXMEM_ROOT": str(small_disk)}
    with daemon(workspace, tmp_path / "daemon.log", env=env) as running:
        client = Client(running.socket)
        client.save("coder", "before the disk filled")
        path = workspace.memory_path("coder")
        filler = fill(small_disk)
        saved, error = save_until_refused(client, path)
        assert "No space left on device" in error.message, error.message
        refused_and_untouched(client, path, "still full", "core")  # a rewrite needs room too
        assert contents(workspace, "coder") == ["before the disk filled", *saved]
        filler.unlink()
        client.save("coder", "after space returned")
        wait_until(lambda: disagreements(workspace) == [], timeout=40)
        assert contents(workspace, "coder") == [
            "before the disk filled",
            *saved,
            "after space returned",
        ]


def test_a_file_size_limit_refuses_saves_and_lifting_it_recovers(
    workspace: Workspace, tmp_path: Path
) -> None:
    """RLIMIT_FSIZE lowered on the running daemon (prlimit): the kernel's EFBIG."""
    with daemon(workspace, tmp_path / "daemon.log") as running:
        client = Client(running.socket)
        for n in range(300):  # MEMORY.md the largest file the daemon writes to
            client.save("coder", f"history {n} " + "y" * 100)
        path = workspace.memory_path("coder")
        pid = running.proc.pid
        soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (path.stat().st_size + 1, hard))
        try:
            error = refused_and_untouched(client, path, "over the limit", "archival")
            assert "No space left on device" in error.message or "too large" in error.message
            refused_and_untouched(client, path, "over the limit too", "core")
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))
        client.save("coder", "after the limit was lifted")
        wait_until(lambda: disagreements(workspace) == [], timeout=40)
        found = contents(workspace, "coder")
        assert found[-1] == "after the limit was lifted" and len(found) == 301
        assert not any("over the limit" in content for content in found)
        os.kill(pid, 0)  # still the same process
