"""What an agent host pays: a tool call over MCP stdio, and a hook's whole process.

One daemon on a workspace whose agent holds --agent-entries archival entries. A real
`oryxmem mcp` subprocess, driven by the SDK's stdio client, times each tool warm (the
same call over HTTP beside it, and the SDK's own stdio server with an echo tool as the
floor a call over a pipe costs here); then each hook runs as a host runs it, a fresh
process with its JSON on stdin, and its wall time is taken.

Run: python -m bench.agents_bench [--agent-entries 1000] [--calls 200] [--hooks 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client as MCPClient
from mcp import StdioServerParameters

from bench.common import (
    Figure,
    at_most,
    percentile,
    run_alone,
    scratch_workspace,
    start_oryxmem,
    stop,
    time_calls,
)
from oryxmem.client import Client
from oryxmem.launch import oryxmem_command
from oryxmem.store.format import render_entry_line

TS = "2026-11-01 09:00:00"


def seed(root: Path, count: int) -> None:
    path = root / ".oryxos" / "agents" / "coder" / "MEMORY.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    topics = ["deploy", "tests", "the user's editor", "release notes", "the CI", "tea"]
    lines = [
        render_entry_line(TS, f"note {i} about {topics[i % len(topics)]}") for i in range(count)
    ]
    path.write_text(
        "## 核心记忆\n- [2026-01-01 00:00:00] User is Ada.\n\n## 归档记忆\n"
        + "\n".join(lines)
        + "\n"
    )


ECHO_SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("echo", log_level="WARNING")
@server.tool(structured_output=False)
def echo(text: str) -> str:
    return text
server.run("stdio")
"""


def timed_tools(
    params: StdioServerParameters, tools: dict[str, dict[str, Any]], calls: int
) -> dict[str, list[float]]:
    """Milliseconds of each warm call of each tool, through the SDK's stdio client."""

    async def main() -> dict[str, list[float]]:
        timed: dict[str, list[float]] = {}
        async with MCPClient(params) as client:
            for name, arguments in tools.items():
                for _ in range(10):  # warm: imports, the daemon's caches
                    await client.call_tool(name, arguments)
                samples = []
                for _ in range(calls):
                    started = time.perf_counter()
                    result = await client.call_tool(name, arguments)
                    samples.append((time.perf_counter() - started) * 1000)
                    assert not result.is_error, result
                timed[name] = samples
        return timed

    return anyio.run(main)


def echo_floor(calls: int) -> list[float]:
    """The SDK's own stdio server with a tool that returns its argument: what a call
    over stdio costs on this machine with nothing behind it."""
    params = StdioServerParameters(command=sys.executable, args=["-c", ECHO_SERVER])
    return timed_tools(params, {"echo": {"text": "hi"}}, calls)["echo"]


def mcp_calls(root: Path, env: dict[str, str], calls: int) -> dict[str, list[float]]:
    """Milliseconds of each warm tool call, by tool."""
    tools: dict[str, dict[str, Any]] = {
        "recall_memory": {"keyword": "note 77 about"},
        "search_memory": {"query": "which editor does the user like", "limit": 5},
        "memory_block": {},
        "save_memory": {"content": "a benchmark save"},
    }
    command, *args = oryxmem_command("--root", str(root), "mcp", "--agent", "coder")
    params = StdioServerParameters(command=command, args=args, env=env)
    return timed_tools(params, tools, calls)


def hook_runs(
    root: Path, env: dict[str, str], runs: int, transcript: Path
) -> dict[str, list[float]]:
    payloads = {
        "session-start": {
            "session_id": "s",
            "hook_event_name": "SessionStart",
            "source": "startup",
        },
        "prompt": {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "deploy it"},
        "stop": {"session_id": "s", "hook_event_name": "Stop", "transcript_path": str(transcript)},
    }
    timed: dict[str, list[float]] = {}
    for event, payload in payloads.items():
        command = oryxmem_command("hook", event, "--agent", "coder")
        stdin = json.dumps(payload)

        def once(command: list[str] = command, stdin: str = stdin) -> None:
            subprocess.run(
                command, input=stdin, text=True, env=env, check=True, capture_output=True
            )

        once()
        timed[event] = time_calls(once, runs)
    return timed


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent-entries", type=int, default=1000, help="the agent's entries")
    parser.add_argument("--calls", type=int, default=200, help="warm calls timed per tool")
    parser.add_argument("--hooks", type=int, default=20, help="runs timed per hook")


def main(argv: list[str] | None = None) -> list[Figure]:
    return run_alone("agents benchmark (MCP and hooks)", __doc__, options, run, argv)


def run(args: argparse.Namespace) -> list[Figure]:
    figures: list[Figure] = []
    with scratch_workspace("oryxmem-agents-") as root:
        seed(root, args.agent_entries)
        sock = Path(f"/tmp/oryxmem-bench-agents-{os.getpid()}.sock")
        env = {**os.environ, "ORYXMEM_ROOT": str(root), "ORYXMEM_SOCKET": str(sock)}
        proc = start_oryxmem(["daemon"], root, root / "daemon.log", b"serving", env)
        try:
            client = Client(sock)
            client.search("coder", "warm up")
            while any(index["pending"] for index in client.health()["indexes"].values()):
                time.sleep(0.1)  # every entry embedded before anything is timed
            http = time_calls(
                lambda: client.recall_memory_tool({"keyword": "note 77 about"}, "coder"), args.calls
            )
            context = time_calls(lambda: client.context("coder"), args.calls)
            client.close()
            timed = mcp_calls(root, env, args.calls)
            floor = statistics.median(echo_floor(args.calls))
            recall = timed["recall_memory"]
            block = statistics.median(timed["memory_block"])
            figures += [
                Figure("floor: the SDK's stdio, an echo tool, p50", floor, "ms"),
                Figure("MCP memory_block p50, warm", block, "ms", at_most(3, 21, "ms")),
                Figure("  same call over HTTP (context), p50", statistics.median(context), "ms"),
                Figure("  MCP's cost over HTTP", block - statistics.median(context), "ms"),
                Figure(
                    "MCP recall_memory p50, warm",
                    statistics.median(recall),
                    "ms",
                    at_most(3, 21, "ms"),
                ),
                Figure("MCP recall_memory p99, warm", percentile(recall, 0.99), "ms"),
                Figure("  same tool over HTTP, p50", statistics.median(http), "ms"),
                Figure(
                    "  MCP's cost over HTTP",
                    statistics.median(recall) - statistics.median(http),
                    "ms",
                ),
            ]
            for name in ("search_memory", "save_memory"):
                goal = at_most(3, 21, "ms")
                figures.append(
                    Figure(f"MCP {name} p50, warm", statistics.median(timed[name]), "ms", goal)
                )
            transcript = root / "transcript.jsonl"
            transcript.write_text(
                json.dumps({"type": "user", "message": {"role": "user", "content": "ship it"}})
                + "\n"
                + json.dumps(
                    {
                        "type": "assistant",
                        "message": {
                            "role": "assistant",
                            "content": [{"type": "text", "text": "Shipped."}],
                        },
                    }
                )
                + "\n"
            )
            for event, samples in hook_runs(root, env, args.hooks, transcript).items():
                goal = at_most(150, 13, "ms")
                figures.append(
                    Figure(
                        f"hook {event}, whole process p50", statistics.median(samples), "ms", goal
                    )
                )
        finally:
            stop(proc)
    return figures


if __name__ == "__main__":
    main()
