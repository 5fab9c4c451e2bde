"""oryxmem mcp: the SDK's own clients (in-process, and over stdio to a real subprocess)
drive every tool, with and without the daemon; many server processes share one writer."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from support.daemon import daemon
from support.processes import raw_mcp_tool_call, run_cli, run_offline
from support.sync import sql

from oryxmem.agents.mcp import RESULT_CHARS, MemoryTools, build_server
from oryxmem.config import set_value
from oryxmem.errors import ContentTooLongError
from oryxmem.reach import Reach
from oryxmem.service import MemoryService
from oryxmem.store.format import parse
from oryxmem.workspace import Workspace

TOOLS = {"save_memory", "recall_memory", "search_memory", "memory_block"}


def in_process(
    workspace: Workspace, agent: str | None, work: Callable[[Client], Awaitable[Any]]
) -> Any:
    async def main() -> Any:
        reach = Reach(str(workspace.root), recheck=True)
        try:
            async with Client(build_server(MemoryTools(reach, agent))) as client:
                return await work(client)
        finally:
            reach.close()

    return anyio.run(main)


def over_stdio(
    workspace: Workspace, args: list[str], work: Callable[[Client], Awaitable[Any]]
) -> Any:
    async def main() -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "oryxmem", "--root", str(workspace.root), "mcp", *args],
            env=dict(os.environ),
        )
        async with Client(params) as client:
            return await work(client)

    return anyio.run(main)


def text_of(result: Any) -> str:
    return "".join(block.text for block in result.content)


def archival(workspace: Workspace, agent: str) -> list[str]:
    document = parse(workspace.memory_path(agent).read_text(encoding="utf-8"))
    return [entry.content for entry in document.archival]


def test_every_tool_has_a_description_for_the_model_and_full_annotations(
    workspace: Workspace,
) -> None:
    async def listed(client: Client) -> Any:
        return (await client.list_tools()).tools, client.instructions

    tools, instructions = in_process(workspace, "coder", listed)
    assert {tool.name for tool in tools} == TOOLS
    assert "save_memory" in (instructions or "")
    for tool in tools:
        assert len(tool.description or "") > 80, tool.name
        notes = tool.annotations
        assert notes is not None and notes.open_world_hint is False
        assert None not in (notes.read_only_hint, notes.destructive_hint, notes.idempotent_hint)
        assert notes.read_only_hint is (tool.name != "save_memory")
        assert notes.destructive_hint is False
        description = tool.description or ""
        assert "\n" not in description and "  " not in description, description  # no indent
    save = next(tool for tool in tools if tool.name == "save_memory")
    assert save.input_schema["properties"]["scope"]["enum"] == ["archival", "core"]


def test_a_save_too_long_for_an_entry_is_told_in_the_tools_terms_with_and_without_a_daemon(
    workspace: Workspace, tmp_path: Path
) -> None:
    """A 1 MB save: the error speaks of its content, never of an HTTP body."""

    async def too_long(client: Client) -> str:
        result = await client.call_tool("save_memory", {"content": "x" * (1024 * 1024)})
        assert result.is_error
        return text_of(result)

    alone = over_stdio(workspace, ["--agent", "coder"], too_long)
    with daemon(workspace, tmp_path / "daemon.log"):
        through = over_stdio(workspace, ["--agent", "coder"], too_long)
    for said in (alone, through):
        assert "content is 1048576 characters; the limit is 32768" in said, said
        assert "body" not in said and "1006" in said
    assert not workspace.memory_path("coder").exists()


def test_the_tools_save_recall_search_and_show_the_block_without_a_daemon(
    workspace: Workspace,
) -> None:
    async def session(client: Client) -> dict[str, str]:
        said = {}
        said["save"] = text_of(await client.call_tool("save_memory", {"content": "likes tea"}))
        core = {"content": "User's name is Ada.", "scope": "core"}
        said["core"] = text_of(await client.call_tool("save_memory", core))
        said["recall"] = text_of(await client.call_tool("recall_memory", {"keyword": "TEA"}))
        said["none"] = text_of(await client.call_tool("recall_memory", {"keyword": "zqxj"}))
        query = {"query": "favourite beverage", "limit": 1}
        said["search"] = text_of(await client.call_tool("search_memory", query))
        said["block"] = text_of(await client.call_tool("memory_block", {}))
        asked = {"query": "what does the user drink?"}
        said["asked"] = text_of(await client.call_tool("memory_block", asked))
        empty = await client.call_tool("save_memory", {"content": "  "})
        said["empty"] = f"{empty.is_error} {text_of(empty)}"
        scope = await client.call_tool("save_memory", {"content": "x", "scope": "weird"})
        said["scope"] = f"{scope.is_error}"
        return said

    said = in_process(workspace, "coder", session)
    assert said["asked"].startswith("## 核心记忆") and "likes tea" in said["asked"]
    assert (
        said["save"].startswith("Saved to agent 'coder' (archival): - [")
        and "likes tea" in said["save"]
    )
    assert "(core)" in said["core"]
    assert said["recall"].endswith("] likes tea") and said["recall"].count("\n") == 0
    assert said["none"] == "No memory of agent 'coder' matches 'zqxj'."
    assert "likes tea" in said["search"] and "semantic" in said["search"]
    assert said["block"].splitlines()[1] == "- " + said["core"].split("- ", 1)[1]
    assert "likes tea" in said["block"]
    assert said["empty"].startswith("True ") and "oryxmem error 1004" in said["empty"]
    assert said["scope"] == "True"
    assert archival(workspace, "coder") == ["likes tea"]  # the refused saves wrote nothing
    calls = subprocess.run(
        [
            "sqlite3",
            str(workspace.db_path),
            "SELECT tool, agent, ok, input FROM tool_invocations ORDER BY id",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert calls[0] == 'save_memory|coder|1|{"content": "likes tea", "scope": "archival"}'
    assert calls[2] == 'recall_memory|coder|1|{"keyword": "TEA"}'
    assert calls[-1].startswith("save_memory|coder|0|")  # a refused call is recorded too


def test_a_large_result_is_capped_and_the_rest_comes_with_offset(
    workspace: Workspace, service: MemoryService
) -> None:
    """memory.recall = keyword answers every match: 120 long lines, 8,000 characters at
    a time."""
    assert run_cli("config", "set", "memory.recall", "keyword").returncode == 0
    lines = [f"deploy note {n:03d} " + "x" * 150 for n in range(120)]
    for line in lines:
        service.save("coder", line)
    service.close()

    async def pages(client: Client) -> list[str]:
        got, offset = [], 0
        while True:
            text = text_of(
                await client.call_tool(
                    "recall_memory", {"keyword": "deploy note", "offset": offset}
                )
            )
            got.append(text)
            footer = text.splitlines()[-1]
            if "offset=" not in footer:
                return got
            offset = int(footer.rsplit("offset=", 1)[1].split(" ")[0])

    got = in_process(workspace, "coder", pages)
    assert len(got) > 1 and all(len(text) <= RESULT_CHARS for text in got)
    shown = [line for text in got for line in text.splitlines() if not line.startswith("(lines")]
    assert [line.split("] ", 1)[1] for line in shown] == lines  # every one, once, in order


def test_over_stdio_every_call_goes_to_the_daemon_and_stdout_holds_only_the_protocol(
    workspace: Workspace, tmp_path: Path
) -> None:
    async def session(client: Client) -> list[str]:
        said = [text_of(await client.call_tool("save_memory", {"content": "prefers tabs"}))]
        said.append(text_of(await client.call_tool("recall_memory", {"keyword": "tabs"})))
        said.append(
            text_of(await client.call_tool("search_memory", {"query": "indentation style"}))
        )
        said.append(text_of(await client.call_tool("memory_block", {})))
        return said

    with daemon(workspace, tmp_path / "d.log") as running:
        said = over_stdio(workspace, ["--agent", "writer"], session)
        assert running.curl("http://x/api/v1/health")[0] == 200
    assert "prefers tabs" in said[1] and "prefers tabs" in said[2] and "prefers tabs" in said[3]
    log = subprocess.run(
        ["sqlite3", str(workspace.db_path), "SELECT tool, agent FROM tool_invocations"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert log == ["save_memory|writer", "recall_memory|writer"]

    # The raw bytes on stdout: JSON-RPC lines and nothing else, even with a warning to say.
    command = [sys.executable, "-m", "oryxmem", "mcp", "--agent", "../bad"]
    replies, rest, stderr = raw_mcp_tool_call(command, "memory_block", {})
    assert rest == ""
    assert [reply.get("id") for reply in replies] == [1, 2]
    assert "## " in replies[1]["result"]["content"][0]["text"]
    assert "using the global memory file" in stderr


def _save_forty(workspace: Workspace, agent: str, tag: str) -> subprocess.Popen[str]:
    script = f"""
import anyio, os, sys
from mcp import Client, StdioServerParameters
async def main():
    params = StdioServerParameters(command=sys.executable, env=dict(os.environ),
        args=["-m", "oryxmem", "--root", {str(workspace.root)!r}, "mcp", "--agent", {agent!r}])
    async with Client(params) as client:
        async with anyio.create_task_group() as group:
            for n in range(40):
                group.start_soon(client.call_tool, "save_memory", {{"content": f"{tag} %d" % n}})
anyio.run(main)
"""
    return subprocess.Popen([sys.executable, "-c", script], text=True, stderr=subprocess.PIPE)


def _three_servers_at_once(workspace: Workspace) -> None:
    procs = [
        _save_forty(workspace, "a", "a1"),
        _save_forty(workspace, "b", "b1"),
        _save_forty(workspace, "a", "a2"),
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    a, b = archival(workspace, "a"), archival(workspace, "b")
    assert sorted(a) == sorted([f"a1 {n}" for n in range(40)] + [f"a2 {n}" for n in range(40)])
    assert sorted(b) == sorted(f"b1 {n}" for n in range(40))
    assert run_cli("sync", "--check").returncode == 0


def test_three_server_processes_save_forty_each_through_one_daemon_and_all_land_once(
    workspace: Workspace, tmp_path: Path
) -> None:
    with daemon(workspace, tmp_path / "d.log") as running:
        _three_servers_at_once(workspace)
        assert running.curl("http://x/api/v1/health")[0] == 200


def test_three_server_processes_with_no_daemon_share_the_locks_and_all_land_once(
    workspace: Workspace,
) -> None:
    _three_servers_at_once(workspace)


def test_the_mcp_server_runs_with_no_network_and_connects_nowhere(workspace: Workspace) -> None:
    """The server, in a network namespace of its own, with every socket connection its
    Python side attempts recorded: the SDK and the model load, the tools answer, and
    nothing tried to connect anywhere (no daemon here: the stores directly)."""
    script = (
        "import anyio\n"
        "from mcp import Client\n"
        "from oryxmem.agents.mcp import MemoryTools, build_server\n"
        "from oryxmem.reach import Reach\n"
        "async def main():\n"
        "    async with Client(build_server(MemoryTools(Reach(None), 'coder'))) as c:\n"
        "        await c.call_tool('save_memory', {'content': 'likes tea'})\n"
        "        r = await c.call_tool('search_memory', {'query': 'hot drinks', 'limit': 1})\n"
        "        assert 'likes tea' in r.content[0].text, r\n"
        "anyio.run(main)\n"
    )
    run_offline(script, workspace.root)


def test_a_server_started_before_the_daemon_finds_it_on_the_next_call(
    workspace: Workspace, tmp_path: Path
) -> None:
    """With no daemon the stores answer; once one runs, the next call goes to it (its
    history says socket, not mcp), with no restart of the MCP server."""

    async def before_and_after(client: Client) -> None:
        await client.call_tool("save_memory", {"content": "saved alone"})
        with daemon(workspace, tmp_path / "d.log"):
            await client.call_tool("save_memory", {"content": "saved through the daemon"})

    in_process(workspace, "late", before_and_after)
    sources = sql(
        workspace, "SELECT content, source FROM memory_history WHERE agent = 'late' ORDER BY id"
    ).split()
    assert sources == ["saved", "alone|mcp", "saved", "through", "the", "daemon|socket"]


def test_a_call_without_the_daemon_runs_beside_the_loop_which_answers_the_host_meanwhile(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call the daemon does not answer goes to the stores on a worker thread: while it
    waits, the server still answers the host (it lists its tools). Were it run on the
    event loop, the listing would wait for it, and it waits for the listing: it would
    time out."""
    monkeypatch.setenv("ORYXMEM_NO_DAEMON", "1")
    order: list[str] = []
    listed = threading.Event()
    reach = Reach(str(workspace.root), recheck=True)
    stores = reach.call

    def after_the_listing(*args: Any, **kwargs: Any) -> Any:
        order.append("call sees the listing" if listed.wait(10) else "call timed out")
        return stores(*args, **kwargs)

    reach.call = after_the_listing  # type: ignore[method-assign]

    async def main() -> str:
        async with Client(build_server(MemoryTools(reach, "coder"))) as client:
            found: dict[str, Any] = {}

            async def block() -> None:
                found["block"] = await client.call_tool("memory_block", {})

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(block)
                await anyio.sleep(0.05)
                assert {tool.name for tool in (await client.list_tools()).tools} >= TOOLS
                order.append("tools listed")
                listed.set()
            return text_of(found["block"])

    try:
        assert anyio.run(main).split() == ["##", "核心记忆", "##", "归档记忆"]
    finally:
        reach.close()
    assert order == ["tools listed", "call sees the listing"]


def test_tools_the_daemon_answers_load_no_store(workspace: Workspace, tmp_path: Path) -> None:
    """A server whose calls the daemon answers imports neither the service nor the
    stores (reach.py): a save and a recall, in a process of their own."""
    script = (
        "import sys, anyio\n"
        "from oryxmem.reach import Reach\n"
        "from oryxmem.agents.mcp import MemoryTools\n"
        f"tools = MemoryTools(Reach({str(workspace.root)!r}, recheck=True), 'lean')\n"
        "print(anyio.run(tools.save_memory, 'through the daemon'))\n"
        "print(anyio.run(tools.recall_memory, 'daemon'))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('oryxmem.service', 'oryxmem.store'))))\n"
    )
    with daemon(workspace, tmp_path / "d.log"):
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
        )
    saved, recalled, loaded = done.stdout.strip().splitlines()
    assert saved.startswith("Saved to agent 'lean'") and recalled.endswith("through the daemon")
    assert loaded == "[]"


def test_a_daemon_gone_between_calls_leaves_the_next_to_the_stores(
    workspace: Workspace, tmp_path: Path
) -> None:
    """The call after the daemon stopped finds its socket dead and is answered by the
    stores (history says mcp), in the same server."""

    async def through_then_alone(client: Client) -> None:
        with daemon(workspace, tmp_path / "d.log"):
            await client.call_tool("save_memory", {"content": "saved through the daemon"})
        result = await client.call_tool("save_memory", {"content": "saved alone after"})
        assert not result.is_error, text_of(result)

    in_process(workspace, "gone", through_then_alone)
    sources = sql(
        workspace, "SELECT content, source FROM memory_history WHERE agent = 'gone' ORDER BY id"
    ).splitlines()
    assert sources == ["saved through the daemon|socket", "saved alone after|mcp"]


def test_a_long_lived_server_checks_content_against_the_config_as_it_is_now(
    workspace: Workspace,
) -> None:
    """The server reads config.toml once, and again only when the file has changed."""
    reach = Reach(str(workspace.root))
    reach.check_content("x" * 100)
    set_value(workspace.config_path, "memory.max_content_chars", "50")
    with pytest.raises(ContentTooLongError, match="the limit is 50"):
        reach.check_content("x" * 100)
    assert reach.config() is reach.config()  # unchanged file: not read again


def test_forget_memory_is_offered_only_when_allowed_and_forgets_over_stdio(
    workspace: Workspace,
) -> None:
    from support.processes import run_cli

    async def names(client: Client) -> set[str]:
        return {tool.name for tool in (await client.list_tools()).tools}

    assert "forget_memory" not in over_stdio(workspace, ["--agent", "coder"], names)
    assert run_cli("config", "set", "mcp.allow_forget", "true").returncode == 0

    async def forget(client: Client) -> dict[str, Any]:
        said = {"names": await names(client)}
        await client.call_tool("save_memory", {"content": "likes tea"})
        await client.call_tool("save_memory", {"content": "likes coffee"})
        done = await client.call_tool("forget_memory", {"memory": "likes tea"})
        said["done"] = text_of(done)
        missing = await client.call_tool("forget_memory", {"memory": "likes juice"})
        said["missing"] = (missing.is_error, text_of(missing))
        return said

    said = over_stdio(workspace, ["--agent", "coder"], forget)
    assert "forget_memory" in said["names"]
    assert said["done"].startswith("Forgot from agent 'coder':") and "likes tea" in said["done"]
    assert said["missing"][0] and "says exactly 'likes juice'" in said["missing"][1]
    assert archival(workspace, "coder") == ["likes coffee"]
    assert workspace.tombstones_path("coder").exists()
