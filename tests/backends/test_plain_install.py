"""oryxmem installed with no extras: everything but the optional backends works, and an
optional backend that is configured but not installed is one clear line.

(.ci/run also builds the wheel, installs it with no extras in a fresh venv and runs
.ci/smoke against that install.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.daemon import daemon
from support.processes import run_cli, without_modules

from oryxmem.config import set_value
from oryxmem.workspace import Workspace


def test_the_daemon_serves_the_default_backend_without_mem0_installed(
    workspace: Workspace, tmp_path: Path
) -> None:
    env = without_modules(tmp_path / "plain", "mem0")
    with daemon(workspace, tmp_path / "daemon.log", env=env) as running:
        status, saved = running.curl(
            "-d", '{"content": "likes green tea"}', "http://x/api/v1/agents/coder/memory"
        )
        assert status == 200 and saved["code"] == 0, saved
        status, found = running.curl("http://x/api/v1/agents/coder/memory/recall?keyword=tea")
        assert found["data"]["lines"][0].endswith("likes green tea")
        done = run_cli("show", "--agent", "coder", env=env)
        assert done.returncode == 0 and "likes green tea" in done.stdout
    assert "mem0" not in running.text()


@pytest.mark.parametrize(
    "command",
    [
        ["daemon"],
        ["save", "--agent", "coder", "tea"],
        ["show", "--agent", "coder"],
        ["recall", "--agent", "coder", "tea"],
        ["context", "--agent", "coder"],
        ["agents"],
    ],
)
def test_a_configured_backend_that_is_not_installed_is_one_line_and_exit_1(
    workspace: Workspace, tmp_path: Path, command: list[str]
) -> None:
    set_value(workspace.config_path, "memory.backend", "mem0")
    env = without_modules(tmp_path / "plain", "mem0")
    done = run_cli(*command, env=env)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'oryxmem[mem0]'" in lines[0], done.stderr
    # nothing was written
    assert not list(workspace.os_dir.glob("agents/*/MEMORY.md"))
