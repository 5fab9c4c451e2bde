"""Run the real daemon as a subprocess on a short socket path, and talk to it.

It is ready when it says so the way it tells systemd: READY=1 on $NOTIFY_SOCKET.
"""

from __future__ import annotations

import json
import os
import signal
import socket as sockets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from oryxmem.config import default_config_text, set_value
from oryxmem.workspace import Workspace, init_workspace


class RunningDaemon:
    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        socket: Path,
        log: Path,
        workspace: Workspace,
        notifications: sockets.socket,
    ) -> None:
        self.proc = proc
        self.socket = socket
        self.log = log
        self.workspace = workspace
        self.notifications = notifications  # what it tells systemd (STOPPING=1 at the end)

    def curl(self, *args: str, timeout: float = 30) -> tuple[int, dict[str, Any]]:
        """(HTTP status, envelope) from curl --unix-socket, a real outside client."""
        done = subprocess.run(
            ["curl", "-s", "-w", "\n%{http_code}", "--unix-socket", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        body, _, status = done.stdout.rpartition("\n")
        return int(status), json.loads(body) if body else {}

    def until_closed(self, data: bytes) -> bytes:
        """Send these bytes on a new connection; everything received until the daemon
        ends it (a socket timeout, 30 s, fails the test when it never does)."""
        with sockets.socket(sockets.AF_UNIX) as conn:
            conn.settimeout(30)
            conn.connect(str(self.socket))
            conn.sendall(data)
            received = b""
            while chunk := conn.recv(65536):
                received += chunk
        return received

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.notifications.close()
        return code

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def start_daemon(
    workspace: Workspace,
    log: Path,
    env: dict[str, str] | None = None,
    prefix: tuple[str, ...] = (),
    **popen: Any,
) -> RunningDaemon:
    """``prefix``: a command the daemon runs under (setpriv, to drop capabilities)."""
    socket = Path((env or {}).get("ORYXMEM_SOCKET") or os.environ["ORYXMEM_SOCKET"])
    # An abstract socket (a leading NUL): nothing on disk to clean up.
    notify_name = f"oryxmem-test-{os.getpid()}-{time.monotonic_ns()}"
    notifications = sockets.socket(sockets.AF_UNIX, sockets.SOCK_DGRAM)
    notifications.bind("\0" + notify_name)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "oryxmem", "daemon"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "ORYXMEM_ROOT": str(workspace.root),
                "NOTIFY_SOCKET": "@" + notify_name,
                **(env or {}),
            },
            **popen,
        )
    try:
        wait_for_ready(proc, notifications, log)
    except BaseException:
        notifications.close()
        raise
    return RunningDaemon(proc, socket, log, workspace, notifications)


def wait_for_ready(
    proc: subprocess.Popen[bytes], notifications: sockets.socket, log: Path, timeout: float = 60
) -> None:
    """Until the daemon sends READY=1 (it serves then); fails if it exits or never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        notifications.settimeout(0.2)  # to notice a daemon that exits instead
        try:
            if b"READY=1" in notifications.recv(4096):
                return
        except TimeoutError:
            continue
    proc.kill()
    raise AssertionError(f"the daemon did not start:\n{log.read_text(errors='replace')}")


@contextmanager
def daemon(workspace: Workspace, log: Path, **kwargs: Any) -> Iterator[RunningDaemon]:
    running = start_daemon(workspace, log, **kwargs)
    try:
        yield running
    except BaseException:  # the daemon's side of a failure, in the test's report
        sys.stderr.write(f"--- the daemon's log ({log}), its end ---\n{running.text()[-20000:]}")
        raise
    finally:
        if running.proc.poll() is None:
            assert running.stop() == 0, running.text()
        assert "Traceback" not in running.text(), running.text()


@contextmanager
def daemon_on_new_workspace(folder: Path, client_timeout: int) -> Iterator[RunningDaemon]:
    """A daemon on a workspace made in ``folder``, its socket at a short path outside it
    (one daemon a test module shares), with this client_timeout_seconds."""
    root = folder / "ws"
    init_workspace(root, config_text=default_config_text())
    workspace = Workspace(root.resolve())
    set_value(workspace.config_path, "daemon.client_timeout_seconds", str(client_timeout))
    with tempfile.TemporaryDirectory(prefix="oxs-", dir="/tmp") as short:
        env = {"ORYXMEM_SOCKET": os.path.join(short, "s.sock"), "ORYXMEM_ROOT": str(root)}
        with daemon(workspace, folder / "daemon.log", env=env) as proc:
            yield proc
