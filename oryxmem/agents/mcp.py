"""``oryxmem mcp``: one agent's memory as MCP tools over stdio (the official SDK).

Every call goes to the workspace's daemon over its socket, so many agent processes
share its one writer; with no daemon running, the stores are used directly with the
same locks as the CLI (reach.py). save_memory and recall_memory are the seed's tools,
exactly as on the socket and recorded in tool_invocations; search_memory and
memory_block read. A result is capped at RESULT_CHARS, and says how to ask for the
rest (``offset``). The host's pipes are read and written on the event loop (stdio.py);
nothing but the protocol reaches stdout: fd 1 points at stderr while it serves, and
everything of ours logs to stderr.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from oryxmem import __version__
from oryxmem.agents.stdio import run_over_stdio
from oryxmem.errors import OryxError
from oryxmem.operations import MAX_RESULTS
from oryxmem.reach import Reach

if TYPE_CHECKING:
    from oryxmem.client import Client
    from oryxmem.service import MemoryService

RESULT_CHARS = 8000  # the most one result holds; offset asks for the rest
T = TypeVar("T")

INSTRUCTIONS = """\
Long-term memory that outlives this conversation, kept by oryxmem in MEMORY.md files \
the user reads and edits. Call memory_block once at the start of a task to see what \
is known (core facts, then recent archival entries). Before you answer a question \
that may depend on the user's preferences, the project's facts or earlier work, look \
it up: search_memory with a question in plain words, or recall_memory with an exact \
word. When you learn something worth keeping (a preference, a decision, a fact about \
the project, what you did), save it with save_memory: one self-contained sentence."""


def page(lines: list[str], offset: int, tool: str, empty: str, limit: int = RESULT_CHARS) -> str:
    """As many of lines[offset:] as fit in ``limit`` characters, with how to get more."""
    if offset < 0:
        raise ToolError("offset must be 0 or more")
    if not lines:
        return empty
    if offset >= len(lines):
        return f"(nothing from offset {offset}: there are {len(lines)} lines)"
    shown: list[str] = []
    size = 0
    for line in lines[offset:]:
        if shown and size + len(line) + 1 > limit - 120:  # room for the footer
            break
        shown.append(line[: limit - 120])
        size += len(shown[-1]) + 1
    end = offset + len(shown)
    if offset == 0 and end == len(lines):
        return "\n".join(shown)
    footer = f"(lines {offset + 1}-{end} of {len(lines)}"
    footer += f"; call {tool} with offset={end} for more)" if end < len(lines) else ")"
    return "\n".join([*shown, footer])


def tool_error(error: OryxError) -> ToolError:
    return ToolError(f"{error.message} (oryxmem error {error.code})")


class MemoryTools:
    """The four tools, for one agent, over a Reach (daemon or stores). A host may send
    calls at once: one at a time goes through the Reach.

    The daemon's answer is awaited on the event loop itself: it comes over a local
    socket in a few milliseconds, and handing the call to a worker thread and back
    cost about a third of what the SDK's stdio adds to it. A call the daemon does not
    answer (none runs: the stores directly, perhaps the model) runs on a worker
    thread, so the loop keeps reading the host meanwhile."""

    def __init__(self, reach: Reach, agent: str | None) -> None:
        self.reach = reach
        self.agent = agent
        self._turn = anyio.Lock()

    async def _call(
        self,
        remote: Callable[[Client], T],
        local: Callable[[MemoryService], T],
        needs_model: bool = True,
    ) -> T:
        async with self._turn:
            try:
                answered = self.reach.ask_daemon(remote)
                if answered is not None:
                    return answered[0]
                return await anyio.to_thread.run_sync(
                    lambda: self.reach.call(remote, local, needs_model=needs_model)
                )
            except OryxError as error:
                raise tool_error(error) from None

    async def _tool(self, tool: str, body: dict[str, Any]) -> dict[str, Any]:
        def remote(client: Client) -> dict[str, Any]:
            send = client.save_memory_tool if tool == "save_memory" else client.recall_memory_tool
            return send(body, self.agent)

        def local(service: MemoryService) -> dict[str, Any]:
            from oryxmem.tools import ToolCall, run_tool  # only without a daemon

            return run_tool(service, ToolCall.of(tool, body, self.agent), "mcp")

        return await self._call(remote, local, needs_model=tool != "save_memory")

    def where(self, data: dict[str, Any]) -> str:
        return f"agent {data['agent']!r}" if data.get("agent") else "the global memory"

    async def save_memory(self, content: str, scope: str = "archival") -> str:
        try:
            self.reach.check_content(content)  # the tool's own argument, before it is sent
        except OryxError as error:
            raise tool_error(error) from None
        data = await self._tool("save_memory", {"content": content, "scope": scope})
        verb = "Kept for" if data.get("deferred") else "Saved to"
        return f"{verb} {self.where(data)} ({scope}): {data['entry']['line']}"

    async def forget_memory(self, memory: str) -> str:
        """Forget every entry that says exactly ``memory`` (as a tool result showed it)."""
        from oryxmem.payloads import forgotten_data, memory_data

        wanted = memory.strip()
        if wanted.startswith("- ["):  # the whole line, as recall shows it
            wanted = wanted.partition("] ")[2].strip()
        shown = await self._call(
            lambda c: c.memory(self.agent), lambda s: memory_data(s.get(self.agent)), False
        )
        ids = [e["id"] for e in shown["core"] + shown["archival"] if e["content"] == wanted]
        if not ids:
            raise ToolError(f"No memory of {self.where(shown)} says exactly {wanted!r}.")
        data = await self._call(
            lambda c: c.forget(self.agent, ids),
            lambda s: forgotten_data(
                s.forget(self.agent, ids, source="mcp"), s.resolve(self.agent)
            ),
            False,
        )
        lines = [entry["line"] for entry in data["forgotten"]]
        return f"Forgot from {self.where(data)}:\n" + "\n".join(lines)

    async def recall_memory(self, keyword: str, offset: int = 0) -> str:
        data = await self._tool("recall_memory", {"keyword": keyword})
        lines = list(data["lines"])
        empty = f"No memory of {self.where(data)} matches {keyword!r}."
        return page(lines, offset, "recall_memory", empty)

    async def search_memory(self, query: str, limit: int = 10, offset: int = 0) -> str:
        if not 1 <= limit <= MAX_RESULTS:
            raise ToolError(f"limit must be from 1 to {MAX_RESULTS}")
        want = min(offset + limit, MAX_RESULTS)

        def local(service: MemoryService) -> dict[str, Any]:
            from oryxmem.payloads import search_data

            return search_data(service.search(self.agent, query, limit=want))

        data = await self._call(lambda c: c.search(self.agent, query, want), local)
        lines = [f"{hit['line']}  ({'+'.join(hit['arms'])})" for hit in data["hits"]]
        text = page(lines, offset, "search_memory", f"Nothing in {self.where(data)} matches.")
        if data.get("note"):
            text += f"\n({data['note']})"
        return text

    async def memory_block(self, offset: int = 0, query: str = "") -> str:
        asked = query.strip() or None

        def local(service: MemoryService) -> dict[str, Any]:
            from oryxmem.payloads import context_data

            return context_data(service, self.agent, query=asked)

        data = await self._call(lambda c: c.context(self.agent, query=asked), local)
        return page(str(data["context"]).splitlines(), offset, "memory_block", "(empty)")


def one_paragraph(docstring: str | None) -> str:
    """A docstring as the model reads it: one paragraph, no source indentation."""
    return " ".join(inspect.cleandoc(docstring or "").split())


def build_server(tools: MemoryTools) -> MCPServer:
    server: MCPServer = MCPServer(
        "oryxmem", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    Tool = Callable[..., Awaitable[str]]

    def tool(notes: ToolAnnotations) -> Callable[[Tool], Tool]:
        """A tool described by its docstring; text for the model (no {"result": ...})."""

        def register(function: Tool) -> Tool:
            described = one_paragraph(function.__doc__)
            return server.tool(description=described, structured_output=False, annotations=notes)(
                function
            )

        return register

    def reading(title: str) -> Callable[[Tool], Tool]:
        """A tool that only reads: read-only, so idempotent and destroying nothing."""
        return tool(
            ToolAnnotations(
                title=title,
                read_only_hint=True,
                destructive_hint=False,
                idempotent_hint=True,
                open_world_hint=False,
            )
        )

    @tool(
        ToolAnnotations(
            title="Save a memory",
            read_only_hint=False,
            destructive_hint=False,  # it only adds a line
            idempotent_hint=False,  # the same text twice is two entries
            open_world_hint=False,
        ),
    )
    async def save_memory(
        content: Annotated[str, Field(description="The memory: one self-contained sentence.")],
        scope: Annotated[
            Literal["archival", "core"],
            Field(description="archival (default): dated notes; core: lasting facts."),
        ] = "archival",
    ) -> str:
        """Save something worth remembering beyond this conversation: a preference of the
        user, a decision, a fact about the project, what you did. Saved at once, durably,
        to MEMORY.md, with the time. Core is for facts that always matter (the user's
        name, the project's language); the rest is archival."""
        return await tools.save_memory(content, scope)

    @reading("Recall by keyword")
    async def recall_memory(
        keyword: Annotated[str, Field(description="A word or phrase the memory holds.")],
        offset: Annotated[int, Field(description="Skip this many lines (for more).")] = 0,
    ) -> str:
        """The memories that hold this word or phrase (case-insensitive), each with its
        time; as the workspace's memory.recall says, also those close to it in meaning
        (hybrid, the default) or only exact matches, oldest first (keyword). To ask a
        question in plain words, use search_memory."""
        return await tools.recall_memory(keyword, offset)

    @reading("Search by meaning")
    async def search_memory(
        query: Annotated[str, Field(description="A question or words, in plain language.")],
        limit: Annotated[int, Field(description="How many memories (1-100).")] = 10,
        offset: Annotated[int, Field(description="Skip this many results (for more).")] = 0,
    ) -> str:
        """The memories that best answer a question, by meaning and by words: 'what does
        the user drink' finds 'likes tea'. Best first, each with its time and how it was
        found."""
        return await tools.search_memory(query, limit, offset)

    @reading("Memory block")
    async def memory_block(
        offset: Annotated[int, Field(description="Skip this many lines (for more).")] = 0,
        query: Annotated[
            str,
            Field(
                description="The user's current message, if any: the block then also holds"
                " the memories and the rounds of past sessions most relevant to it."
            ),
        ] = "",
    ) -> str:
        """What is known about the user and the project: every core memory, then the
        most recent archival ones (with a query, also the most relevant ones, a digest
        of the older ones and relevant rounds of past sessions). Read it at the start of
        a task."""
        return await tools.memory_block(offset, query)

    if tools.reach.config().get("mcp.allow_forget"):

        @tool(
            ToolAnnotations(
                title="Forget a memory",
                read_only_hint=False,
                destructive_hint=True,
                idempotent_hint=True,
                open_world_hint=False,
            ),
        )
        async def forget_memory(
            memory: Annotated[
                str, Field(description="The memory's text, exactly as a tool showed it.")
            ],
        ) -> str:
            """Forget a memory that is wrong or that the user asked you to forget: every
            entry saying exactly this text is taken out of memory for good."""
            return await tools.forget_memory(memory)

    return server


def serve(root: str | None, agent: str | None) -> None:
    """Serve until stdin closes. With no daemon, one is started in the background at once
    (daemon.autostart): the calls go through it as soon as it serves."""
    reach = Reach(root, timeout=30.0, recheck=True)
    try:
        with contextlib.suppress(OryxError, OSError):  # each call says what is wrong
            reach.start_daemon()
        run_over_stdio(build_server(MemoryTools(reach, agent)))
    finally:
        reach.close()
