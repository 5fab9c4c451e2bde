"""Running oryxmem as a user does: the CLI in a subprocess, a Python without some
modules (a plain install), a script with no network at all; and the samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The realistic MEMORY.md files of ../shared/samples, vendored so a lone clone can test.
SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SHARED_SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "samples"


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


def raw_mcp_tool_call(
    command: list[str], tool: str, arguments: dict[str, Any]
) -> tuple[list[dict[str, Any]], str, str]:
    """An MCP server run as a host runs it, spoken to in raw JSON-RPC lines: initialize,
    then one tools/call. Gives the two replies (each stdout line must be JSON), what
    stdout held after them once stdin closed, and stderr. The server must exit 0."""
    requests = [
        MCP_INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        },
    ]
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(json.dumps(r) + "\n" for r in requests))
    proc.stdin.flush()
    replies = [json.loads(proc.stdout.readline()) for _ in range(2)]
    rest, stderr = proc.communicate(timeout=60)  # closes stdin: the server ends
    assert proc.returncode == 0, stderr
    return replies, rest, stderr
