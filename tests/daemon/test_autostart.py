"""A command that needs the model and finds no daemon answers itself and starts one in
the background; the calls after it go through that daemon, which stops when idle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.processes import run_cli
from support.sync import wait_until

from oryxmem.config import set_value
from oryxmem.workspace import Workspace

ON = {"ORYXMEM_AUTOSTART": "1"}


def daemon_pid() -> int | None:
    done = run_cli("status", "--json")
    data = json.loads(done.stdout) if done.returncode == 0 else {}
    return int(data["pid"]) if data.get("status") == "ok" else None


@pytest.fixture
def background(workspace: Workspace) -> Iterator[Workspace]:
    """Whatever daemon a test's command started is stopped at its end."""
    yield workspace
    pid = daemon_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: daemon_pid() is None, timeout=30)


def in_process(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI, and then whether this process loaded numpy (the model's first need); the
    process exits as the command did."""
    script = (
        "import sys\n"
        "from oryxmem.cli import main\n"
        "code = 0\n"
        "try:\n"
        f"    main({list(args)!r})\n"
        "except SystemExit as done:\n"
        "    code = done.code\n"
        "print('numpy loaded' if 'numpy' in sys.modules else 'numpy not loaded', file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_the_first_recall_answers_itself_and_the_next_go_through_the_daemon_it_started(
    background: Workspace,
) -> None:
    assert run_cli("save", "--agent", "coder", "User likes green tea.").returncode == 0
    assert daemon_pid() is None
    first = in_process("recall", "--agent", "coder", "tea", env=ON)
    assert "User likes green tea." in first.stdout, first.stderr  # by itself
    wait_until(lambda: daemon_pid() is not None, timeout=60, step=0.2)
    log = background.run_dir / "daemon.log"
    wait_until(lambda: "serving" in log.read_text(), timeout=60, step=0.2)
    second = in_process("recall", "--agent", "coder", "tea", env=ON)
    assert "User likes green tea." in second.stdout, second.stderr
    assert "numpy not loaded" in second.stderr  # the daemon answered
    # started to stop when idle
    assert "--idle-exit" in " ".join(Path(f"/proc/{daemon_pid()}/cmdline").read_text().split("\0"))


def test_a_save_or_a_show_starts_no_daemon_and_autostart_off_starts_none(
    background: Workspace,
) -> None:
    assert run_cli("save", "--agent", "coder", "tea", env=ON).returncode == 0
    assert run_cli("show", "--agent", "coder", env=ON).returncode == 0
    assert run_cli("recall", "--agent", "coder", "tea").returncode == 0  # ORYXMEM_AUTOSTART=0
    assert run_cli("recall", "--agent", "coder", "tea", env={"CI": "1"}).returncode == 0
    set_value(background.config_path, "daemon.autostart", "false")
    assert (
        run_cli("recall", "--agent", "coder", "tea", env={"ORYXMEM_AUTOSTART": ""}).returncode == 0
    )
    assert daemon_pid() is None and not (background.run_dir / "daemon.log").exists()


@pytest.mark.parametrize(
    "command",
    [
        ("save", "--agent", "coder", "User drinks oolong."),
        ("show", "--agent", "coder"),
        ("context", "--agent", "coder"),
        ("agents",),
        ("status",),
    ],
    ids=lambda command: command[0],
)
def test_commands_that_need_no_model_load_no_numpy_with_no_daemon(
    background: Workspace, command: tuple[str, ...]
) -> None:
    """A cold command with no daemon reads and writes the stores, and the words index
    follows a save: none of it needs numpy (about 70 ms of a command's start)."""
    off = {"ORYXMEM_AUTOSTART": "0"}
    assert run_cli("save", "--agent", "coder", "User likes green tea.", env=off).returncode == 0
    assert run_cli("sync", env=off).returncode == 0
    done = in_process(*command, env=off)
    assert done.returncode == 0 and "numpy not loaded" in done.stderr, done.stderr
    shown = run_cli("show", "--agent", "coder", env=off).stdout
    assert ("User drinks oolong." in shown) == (command[0] == "save")  # the save landed
    assert daemon_pid() is None


def test_the_hooks_answer_with_no_daemon_and_leave_one_for_the_next(
    background: Workspace,
) -> None:
    run_cli("save", "--agent", "coder", "--scope", "core", "Project uses Python 3.11.")
    run_cli("save", "--agent", "coder", "The staging server is called bluejay.")

    def hook(event: str, payload: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return run_cli("hook", event, "--agent", "coder", stdin=json.dumps(payload), env=ON)

    start = hook("session-start", {"session_id": "s1", "hook_event_name": "SessionStart"})
    assert start.returncode == 0 and "Project uses Python 3.11." in start.stdout, start.stderr
    prompt = hook("prompt", {"session_id": "s1", "prompt": "deploy it to staging"})
    assert prompt.returncode == 0 and "bluejay" in prompt.stdout, prompt.stderr
    wait_until(lambda: daemon_pid() is not None, timeout=60, step=0.2)


def test_a_daemon_with_idle_exit_stops_once_nobody_asks(workspace: Workspace) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "oryxmem", "daemon", "--idle-exit", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "no request for" in done.stderr and "stopped" in done.stderr
