"""The systemd user units: what install-systemd writes, checked by systemd-analyze."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import run_cli

from oryxmem.config import Config
from oryxmem.workspace import Workspace, socket_path


def test_install_systemd_writes_matching_socket_and_service(
    workspace: Workspace, tmp_path: Path
) -> None:
    unit_dir = tmp_path / "units"
    done = run_cli("install-systemd", "--unit-dir", str(unit_dir))
    assert done.returncode == 0, done.stderr
    name = f"oryxmem-{workspace.workspace_id}"
    service = (unit_dir / f"{name}.service").read_text()
    sock = (unit_dir / f"{name}.socket").read_text()
    assert not re.search(r"@[A-Z]+@", service + sock), "every placeholder is filled"
    assert "Type=notify" in service and "WatchdogSec=" in service
    assert "Restart=on-failure" in service
    assert f"ExecStart={sys.executable} -P -m oryxmem --root {workspace.root} daemon" in service
    assert f"Requires={name}.socket" in service
    runtime = os.environ["XDG_RUNTIME_DIR"]
    expected = socket_path(workspace, Config.load(workspace.config_path))
    listen = next(
        line.split("=", 1)[1] for line in sock.splitlines() if line.startswith("ListenStream=")
    )
    assert listen.replace("%t", runtime) == str(expected)
    assert "SocketMode=0600" in sock and "DirectoryMode=0700" in sock
    assert f"systemctl --user enable --now {name}.socket" in done.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_analyze_verify_finds_no_warning(workspace: Workspace, tmp_path: Path) -> None:
    config_home = tmp_path / "config"
    env = {"XDG_CONFIG_HOME": str(config_home)}
    assert run_cli("install-systemd", env=env).returncode == 0
    units = sorted((config_home / "systemd" / "user").iterdir())
    assert [u.suffix for u in units] == [".service", ".socket"]
    done = subprocess.run(
        ["systemd-analyze", "--user", "verify", *map(str, units)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_the_verifier_would_catch_a_broken_unit(workspace: Workspace, tmp_path: Path) -> None:
    """So that the test above can fail: a unit with a typo does not pass."""
    config_home = tmp_path / "config"
    env = {"XDG_CONFIG_HOME": str(config_home)}
    run_cli("install-systemd", env=env)
    service = next((config_home / "systemd" / "user").glob("*.service"))
    service.write_text(service.read_text().replace("Restart=", "Restrat="))
    done = subprocess.run(
        ["systemd-analyze", "--user", "verify", str(service)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )
    assert "Restrat" in done.stdout + done.stderr
