"""Run the real daemon as a subprocess on a short socket path, and talk to it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from oryxmem.workspace import Workspace


class RunningDaemon:
    def __init__(self, proc: subprocess.Popen[bytes], socket: Path, log: Path) -> None:
        self.proc = proc
        self.socket = socket
        self.log = log

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

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def start_daemon(
    workspace: Workspace, log: Path, env: dict[str, str] | None = None, **popen: Any
) -> RunningDaemon:
    socket = Path((env or {}).get("ORYXMEM_SOCKET") or os.environ["ORYXMEM_SOCKET"])
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "oryxmem", "daemon"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "ORYXMEM_ROOT": str(workspace.root), **(env or {})},
            **popen,
        )
    deadline = time.monotonic() + 60
    while b"serving" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the daemon did not start:\n{log.read_text()}")
        time.sleep(0.02)
    return RunningDaemon(proc, socket, log)


@contextmanager
def daemon(workspace: Workspace, log: Path, **kwargs: Any) -> Iterator[RunningDaemon]:
    running = start_daemon(workspace, log, **kwargs)
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            assert running.stop() == 0, running.text()
        assert "Traceback" not in running.text(), running.text()
