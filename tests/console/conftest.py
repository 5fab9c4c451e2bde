"""One daemon and one console per test module (each starts in seconds, and most tests
only read): ``served`` is that pair, on a workspace of the module's own; ``running`` is the
console as a browser that has not signed in yet."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.console import RunningConsole, Served, clone_in, console
from support.daemon import daemon

from oryxmem.config import default_config_text
from oryxmem.workspace import Workspace, init_workspace


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("console")
    root = folder / "ws"
    init_workspace(root, config_text=default_config_text())
    workspace = Workspace(root.resolve())
    clone_in(workspace)
    with tempfile.TemporaryDirectory(prefix="oxc-", dir="/tmp") as short:
        env = {
            "ORYXMEM_ROOT": str(workspace.root),
            "ORYXMEM_SOCKET": str(Path(short) / "s.sock"),
            "XDG_RUNTIME_DIR": short,
            "ORYXMEM_AUTOSTART": "0",
        }
        with (
            daemon(workspace, folder / "daemon.log", env=env) as running_daemon,
            console(workspace, folder / "console.log", env) as running_console,
        ):
            yield Served(workspace, running_daemon, running_console, env)


@pytest.fixture
def running(served: Served) -> RunningConsole:
    return served.console.fresh()
