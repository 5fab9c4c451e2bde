"""Starting oryxmem from elsewhere: the command other programs run (hosts' MCP servers and
hooks, systemd, git), and the daemon a command starts in the background.

The command is this interpreter with ``-P``: ``python -m oryxmem`` alone puts the
folder it is started in first on ``sys.path``, so a project holding an ``oryxmem.py`` or
an ``oryxmem/`` folder would run its own code whenever a host starts us there. ``-P``
(Python 3.11+) leaves that folder out; the installed package is the one imported. No
PATH lookup happens at run time either: the interpreter is named by its full path.

A command that needs the embedding model and finds no daemon (``daemon.autostart``)
answers by itself and starts one, detached, for the calls that follow, as git's
fsmonitor daemon, Gradle and dmypy do. It stops after ``daemon.autostart_idle_minutes``
without a request, and logs to ``.oryxos/run/daemon.log``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import time

from oryxmem.config import Config
from oryxmem.workspace import Workspace

# A background start not answered yet is not tried again this soon: it is still coming
# up, or it failed (its log says why) and a retry at every command would fail the same.
RESTART_AFTER_SECONDS = 30.0
LOG_KEEP_BYTES = 1024 * 1024  # the background daemon's log starts afresh above this


def oryxmem_command(*args: str) -> list[str]:
    """The argv that runs ``oryxmem ARGS`` with this installation, wherever it starts."""
    return [sys.executable, "-P", "-m", "oryxmem", *args]


def autostart_wanted(config: Config) -> bool:
    """``ORYXMEM_AUTOSTART`` (1 or 0) decides; else not in CI ($CI set); else the config."""
    chosen = os.environ.get("ORYXMEM_AUTOSTART", "").strip().lower()
    if chosen:
        return chosen in ("1", "true", "on", "yes")
    if os.environ.get("CI"):
        return False
    return bool(config.get("daemon.autostart"))


def start_daemon_in_background(workspace: Workspace, config: Config) -> bool:
    """Start the workspace's daemon detached from this process, unless another command
    started one moments ago. True when one was started. It never waits for it."""
    run = workspace.run_dir
    run.mkdir(parents=True, exist_ok=True)
    fd = os.open(run / "autostart", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another command is starting it right now
        info = os.fstat(fd)
        if info.st_size and time.time() - info.st_mtime < RESTART_AFTER_SECONDS:
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {time.time():.3f}\n".encode(), 0)
        _spawn(workspace, config)
        return True
    finally:
        os.close(fd)


def _spawn(workspace: Workspace, config: Config) -> None:
    log_path = workspace.run_dir / "daemon.log"
    with contextlib.suppress(FileNotFoundError):
        if log_path.stat().st_size > LOG_KEEP_BYTES:
            log_path.unlink()
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    idle = int(config.get("daemon.autostart_idle_minutes")) * 60
    # Not systemd's: this daemon is ours, and must not answer for a unit it is not.
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "LISTEN_FDS")}
    argv = oryxmem_command("--root", str(workspace.root), "daemon", "--idle-exit", str(idle))
    try:
        # The shell starts the daemon as its background job and exits at once: the daemon
        # is nobody's child then (no zombie to reap), in a session of its own (the
        # terminal's Ctrl-C and hang-up are not for it), its output in the log.
        subprocess.run(
            ["/bin/sh", "-c", '"$@" &', "oryxmem-autostart", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=workspace.root,
            env=env,
            start_new_session=True,
            check=False,
            timeout=30,
        )
    finally:
        os.close(log)
