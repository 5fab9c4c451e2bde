"""The fixtures every test may ask for; each test gets its own workspace (ORYXMEM_ROOT
and ORYXMEM_SOCKET point into tmp_path). Helpers live in tests/support/."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from support.processes import SAMPLES

from oryxmem.config import Config, default_config_text
from oryxmem.service import MemoryService
from oryxmem.workspace import Workspace, init_workspace

# No per-example deadline: a loaded CI machine must not turn a slow example into a failure.
settings.register_profile("oryxmem", deadline=None, print_blob=True)
settings.load_profile("oryxmem")


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
        monkeypatch.setenv("XDG_CACHE_HOME", os.path.join(short, "cache"))  # not the user's
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
