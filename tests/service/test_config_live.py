"""A running daemon follows config.toml: live settings taken, restart-only ones reported."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import RunningDaemon, daemon
from support.processes import run_cli
from support.sync import wait_until

from oryxmem.config import set_value
from oryxmem.workspace import Workspace


@pytest.fixture
def running(workspace: Workspace, tmp_path: Path) -> Iterator[RunningDaemon]:
    with daemon(workspace, tmp_path / "daemon.log") as proc:
        yield proc


def recall_strategy(running: RunningDaemon) -> str:
    status, reply = running.curl("http://x/api/v1/agents/coder/memory/recall?keyword=tea")
    assert status == 200, reply
    return str(reply["data"]["strategy"])


def test_config_set_of_a_live_setting_reaches_the_running_daemon(
    workspace: Workspace, running: RunningDaemon
) -> None:
    for text in ("likes green tea", "the CI uses pytest", "x" * 300):
        assert run_cli("save", "--agent", "coder", text).returncode == 0
    assert recall_strategy(running) == "hybrid"
    done = run_cli("config", "set", "memory.recall", "keyword")
    assert done.returncode == 0 and "restart" not in done.stdout, done.stdout
    wait_until(lambda: recall_strategy(running) == "keyword")

    # a smaller archival budget: the block the daemon builds is cut to it
    assert "x" * 300 in run_cli("context", "--agent", "coder").stdout
    assert run_cli("config", "set", "memory.archival_limit_chars", "200").returncode == 0
    wait_until(lambda: "x" * 300 not in run_cli("context", "--agent", "coder").stdout)
    assert 'config: memory.recall = "keyword", taken now' in running.text()


def test_a_setting_that_needs_a_restart_is_said_by_config_set_and_status(
    workspace: Workspace, running: RunningDaemon
) -> None:
    done = run_cli("config", "set", "memory.backend", "sqlite")
    assert done.returncode == 0, done.stderr
    note = done.stdout.strip().splitlines()
    assert note[0] == 'memory.backend = "sqlite"'
    assert len(note) == 2 and 'keeps memory.backend = "markdown" until it is restarted' in note[1]

    def reported() -> bool:
        health = json.loads(run_cli("status", "--json").stdout)
        return bool(health["config"]["restart_needed"])

    wait_until(reported)
    health = json.loads(run_cli("status", "--json").stdout)
    assert health["config"]["restart_needed"] == [
        {"key": "memory.backend", "running": "markdown", "file": "sqlite"}
    ]
    status = run_cli("status").stdout
    assert 'memory.backend = "sqlite" in config.toml; the daemon runs with "markdown"' in status
    # it still serves with what it started with, and a restart takes the file's
    assert run_cli("save", "--agent", "coder", "still markdown").returncode == 0
    assert running.stop() == 0
    with daemon(workspace, running.log) as again:
        health = again.curl("http://x/api/v1/health")[1]["data"]
        assert health["config"]["restart_needed"] == []
        assert health["config"]["fixed_at_start"]["memory.backend"] == "sqlite"


def test_a_config_file_that_does_not_parse_changes_nothing_and_is_told_once(
    workspace: Workspace, running: RunningDaemon
) -> None:
    set_value(workspace.config_path, "memory.recall", "keyword")
    wait_until(lambda: recall_strategy(running) == "keyword")
    with workspace.config_path.open("a") as config:
        config.write("\n[memory]\nrecall = [\n")  # an editor's half-typed line
    wait_until(lambda: "config.toml not taken" in running.text())
    health = running.curl("http://x/api/v1/health")[1]["data"]
    assert "not valid TOML" in health["config"]["problem"]
    assert recall_strategy(running) == "keyword"  # as before: nothing was taken
    assert running.text().count("config.toml not taken") == 1
