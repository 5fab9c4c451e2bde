"""Every test gets its own workspace: ORYXMEM_ROOT and ORYXMEM_SOCKET point into tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from oryxmem.config import Config, default_config_text
from oryxmem.service import MemoryService
from oryxmem.workspace import Workspace, init_workspace

# No per-example deadline: a loaded CI machine must not turn a slow example into a failure.
settings.register_profile("oryxmem", deadline=None, print_blob=True)
settings.load_profile("oryxmem")

# The realistic MEMORY.md files of ../shared/samples, vendored so a lone clone can test.
SAMPLES = Path(__file__).resolve().parent / "samples"
SHARED_SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"


@pytest.fixture(autouse=True)
def isolated_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "ws"
    root.mkdir()
    monkeypatch.setenv("ORYXMEM_ROOT", str(root))
    # No test starts a daemon behind its back; the tests of that turn it on themselves.
    monkeypatch.setenv("ORYXMEM_AUTOSTART", "0")
    # Unix socket paths are limited to 108 bytes: keep them short, outside tmp_path.
    with tempfile.TemporaryDirectory(prefix="oxm-", dir="/tmp") as short:
        monkeypatch.setenv("ORYXMEM_SOCKET", os.path.join(short, "s.sock"))
        monkeypatch.setenv("XDG_RUNTIME_DIR", short)
        yield root


@pytest.fixture
def workspace(isolated_paths: Path) -> Workspace:
    init_workspace(isolated_paths, config_text=default_config_text())
    return Workspace(isolated_paths.resolve())


@pytest.fixture
def service(workspace: Workspace) -> Iterator[MemoryService]:
    svc = MemoryService(workspace, Config.load(workspace.config_path))
    yield svc
    svc.close()


@pytest.fixture
def expected_samples() -> dict[str, dict[str, object]]:
    data: dict[str, dict[str, object]] = json.loads((SAMPLES / "EXPECTED.json").read_text())
    return data


def run_cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "oryxmem", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=60,
    )


def without_modules(folder: Path, *names: str) -> dict[str, str]:
    """The environment of a Python on which these top-level modules are not installed
    (a sitecustomize in ``folder`` refuses to find them), as after a plain ``pip install``
    of oryxmem with no extras."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"HIDDEN = {set(names)!r}\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in HIDDEN:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    return {"PYTHONPATH": f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


# Every socket connection the script's Python side attempts is recorded; none may be.
OFFLINE_PRELUDE = (
    "import sys\n"
    "tried = []\n"
    "sys.addaudithook(lambda e, a: tried.append(a) if e == 'socket.connect' else None)\n"
)
OFFLINE_CODA = "assert tried == [], tried\nprint('offline ok')\n"


def run_offline(script: str, home: Path) -> None:
    """Run a Python script with no network at all (a network namespace of its own, with
    only a down loopback) and HOME at ``home``, every connection it tries recorded: it
    must succeed and have tried none. Skips where that cannot be."""
    import shutil

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root for a network namespace")
    done = subprocess.run(
        ["unshare", "-n", sys.executable, "-c", OFFLINE_PRELUDE + script + OFFLINE_CODA],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "offline ok", done.stdout


# What an MCP client sends first (over stdio, one JSON object per line).
MCP_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "oryxmem-tests", "version": "0"},
    },
}
