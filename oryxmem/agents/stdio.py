"""The MCP server's stdio, read and written by the event loop itself.

The SDK's stdio transport hands each line it reads, and each message it writes and
flushes, to a worker thread (anyio.wrap_file): three hand-offs between threads per
call, most of what a tool call costs beyond the call itself. Here asyncio's pipe
transports read and write the host's pipes on the loop, and the SDK's own
``stdio_server`` frames the messages over these two streams; the server is the SDK's
(its low-level server, as ``MCPServer.run_stdio_async`` runs it).

While serving, as the SDK's transport does, fd 0 reads /dev/null and fd 1 writes to
stderr, so nothing a library prints reaches the wire. When stdin or stdout is not a
pipe, socket or terminal (a file), or the SDK no longer has the server this runs, the
SDK's own transport serves instead.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

LINE_LIMIT = 64 * 1024 * 1024  # the longest message a host may send, in bytes


class _Lines:
    """The host's messages, one line each, as the SDK's transport iterates stdin."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self.reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _Out:
    """The host's end of stdout, written as the SDK's transport writes it."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()


def _loop_can_serve(fd: int) -> bool:
    """Can asyncio's pipe transports take this descriptor (not a regular file)?"""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@asynccontextmanager
async def _claimed_stdio() -> AsyncIterator[tuple[_Lines, _Out]]:
    """The wire on descriptors of its own (the transports own and close them); fd 0
    and 1 point elsewhere meanwhile, and at the wire again after."""
    saved = [os.dup(0), os.dup(1)]  # os.dup's copies are not inherited by children
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    transports: list[asyncio.BaseTransport] = []
    try:
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        got, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(wire_in, "rb", buffering=0)
        )
        transports.append(got)
        sent, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(wire_out, "wb", buffering=0)
        )
        transports.append(sent)
        yield _Lines(reader), _Out(asyncio.StreamWriter(sent, protocol, None, loop))
    finally:
        for transport in transports:
            transport.close()
        for fd, copy in enumerate(saved):
            os.dup2(copy, fd)
            os.close(copy)


async def _serve(server: Any) -> None:
    # The SDK's framing over our streams: it takes anything that iterates lines and
    # writes text, as its anyio.AsyncFile does.
    async with (
        _claimed_stdio() as (lines, out),
        stdio_server(lines, out) as (read_stream, write_stream),  # type: ignore[arg-type]
    ):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def run_over_stdio(server: MCPServer) -> None:
    """Serve until the host closes stdin."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if lowlevel is None or not (_loop_can_serve(0) and _loop_can_serve(1)):
        server.run("stdio")
        return
    anyio.run(_serve, lowlevel)
