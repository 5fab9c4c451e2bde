"""The MCP server's stdio on the event loop (oryxmem/agents/stdio.py): the wire holds the
protocol and nothing else, whatever a tool, a library or a child process prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from support.processes import MCP_INITIALIZE, raw_mcp_tool_call

from oryxmem.agents.stdio import _loop_can_serve

NOISY_SERVER = """
import os, subprocess, sys
from mcp.server.mcpserver import MCPServer
from oryxmem.agents.stdio import run_over_stdio

server = MCPServer("noisy", log_level="WARNING")

@server.tool(structured_output=False)
def noisy(text: str) -> str:
    print("printed noise", flush=True)
    os.write(1, b"written noise\\n")
    subprocess.run(["echo", "child noise"], check=True)
    return text.upper()

run_over_stdio(server)
"""


def test_what_a_tool_or_its_child_prints_goes_to_stderr_and_the_wire_holds_the_protocol() -> None:
    command = [sys.executable, "-c", NOISY_SERVER]
    replies, rest, stderr = raw_mcp_tool_call(command, "noisy", {"text": "über"})
    assert rest == ""
    assert [reply["id"] for reply in replies] == [1, 2]
    assert replies[1]["result"]["content"][0]["text"] == "ÜBER"
    for noise in ("printed noise", "written noise", "child noise"):
        assert noise in stderr


def test_a_regular_file_is_left_to_the_sdks_transport_and_a_pipe_is_served_on_the_loop(
    tmp_path: Path,
) -> None:
    regular = tmp_path / "requests.jsonl"
    regular.write_text("")
    with open(regular, "rb") as file:
        assert not _loop_can_serve(file.fileno())
    read, write = os.pipe()
    try:
        assert _loop_can_serve(read) and _loop_can_serve(write)
    finally:
        os.close(read)
        os.close(write)


def test_requests_from_a_file_are_answered_by_the_sdks_transport(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(MCP_INITIALIZE) + "\n")
    with open(requests, encoding="utf-8") as stdin:
        done = subprocess.run(
            [sys.executable, "-c", NOISY_SERVER],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["id"] == 1


ECHO_SERVER = """
from mcp.server.mcpserver import MCPServer
from oryxmem.agents.stdio import run_over_stdio

server = MCPServer("echo", log_level="WARNING")

@server.tool(structured_output=False)
def echo(text: str) -> str:
    return text

run_over_stdio(server)
"""


def _call(request_id: int, text: str) -> bytes:
    call = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": text}},
    }
    return (json.dumps(call) + "\n").encode()


def test_the_loop_reads_lines_however_the_pipe_cuts_them_and_skips_a_line_it_cannot_read() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        opening = (json.dumps(MCP_INITIALIZE) + "\n").encode()
        opening += b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
        proc.stdin.write(opening)
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1

        # One request cut in three writes, a line that is not JSON-RPC, then two
        # requests in one write (the second a 2 MiB argument): every request answered,
        # whole. The SDK's server handles requests side by side, so answers may come
        # in any order (JSON-RPC matches them by id): they are compared by id.
        first = _call(2, "über")
        for piece in (first[:7], first[7:30], first[30:]):
            proc.stdin.write(piece)
            proc.stdin.flush()
        big = "x" * (2 * 1024 * 1024)
        proc.stdin.write(b"this is not json\n" + _call(3, "second") + _call(4, big))
        proc.stdin.flush()
        replies = [json.loads(proc.stdout.readline()) for _ in range(3)]
    finally:
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    by_id = {reply["id"]: reply["result"]["content"][0]["text"] for reply in replies}
    assert by_id == {2: "über", 3: "second", 4: big}


def test_a_host_that_stops_reading_leaves_the_server_reading_until_it_ends_cleanly() -> None:
    """The host closes its end of stdout: the answers are dropped, the server goes on
    reading stdin (the host's writes do not break) and ends at EOF with exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ECHO_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    opening = (json.dumps(MCP_INITIALIZE) + "\n").encode()
    opening += b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
    proc.stdin.write(opening)
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    proc.stdout.close()
    for request_id in range(2, 7):
        proc.stdin.write(_call(request_id, "unread"))
        proc.stdin.flush()  # BrokenPipeError here: the server died with its host's reader
        time.sleep(0.1)
    assert proc.poll() is None
    proc.stdin.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, stderr
    assert "Traceback" not in stderr
