"""The MCP server's stdio, read and written by the event loop itself.

The SDK's stdio transport hands each line it reads, and each message it writes and
flushes, to a worker thread (anyio.wrap_file), and passes each message between its
reader, the server and its writer through memory streams, a task each side: hand-offs
that are most of what a tool call costs beyond the call itself. Here asyncio's pipe
transports read and write the host's pipes on the loop, and the server reads and
writes them itself: ``receive`` parses the next line into the SDK's message (as its
transport does, with its adapter), ``send`` writes the message's line at once. The
server is the SDK's (its low-level server, as ``MCPServer.run_stdio_async`` runs it).

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
from anyio.abc import AsyncResource
from mcp import types
from mcp.server.mcpserver import MCPServer
from mcp.shared.message import SessionMessage

LINE_LIMIT = 64 * 1024 * 1024  # the longest message a host may send, in bytes


class _Incoming(AsyncResource):
    """The host's messages, one a line, as the server reads a stream: a line that is
    not a JSON-RPC message is handed on as its error, as the SDK's transport does."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def receive(self) -> SessionMessage | Exception:
        line = await self.reader.readline()
        if not line:
            raise anyio.EndOfStream
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except Exception as error:  # the SDK's own answer to a line it cannot read
            return error
        return SessionMessage(message)

    def __aiter__(self) -> _Incoming:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.reader.feed_eof()


class _Outgoing(AsyncResource):
    """The server's messages, each written to the host's pipe as one line, at once (a
    line is one write: messages written side by side never interleave)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def send(self, item: SessionMessage) -> None:
        if self.writer.is_closing():
            raise anyio.ClosedResourceError
        text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        try:
            self.writer.write(text.encode("utf-8") + b"\n")
            await self.writer.drain()
        except OSError as error:  # the host closed its end: what the server drops, said so
            raise anyio.BrokenResourceError from error

    async def aclose(self) -> None:
        self.writer.close()


def _loop_can_serve(fd: int) -> bool:
    """Can asyncio's pipe transports take this descriptor (not a regular file)?"""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@asynccontextmanager
async def _claimed_stdio() -> AsyncIterator[tuple[_Incoming, _Outgoing]]:
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
        yield _Incoming(reader), _Outgoing(asyncio.StreamWriter(sent, protocol, None, loop))
    finally:
        for transport in transports:
            transport.close()
        for fd, copy in enumerate(saved):
            os.dup2(copy, fd)
            os.close(copy)


async def _serve(server: Any) -> None:
    async with _claimed_stdio() as (incoming, outgoing):
        await server.run(incoming, outgoing, server.create_initialization_options())


def run_over_stdio(server: MCPServer) -> None:
    """Serve until the host closes stdin."""
    lowlevel = getattr(server, "_lowlevel_server", None)
    if lowlevel is None or not (_loop_can_serve(0) and _loop_can_serve(1)):
        server.run("stdio")
        return
    anyio.run(_serve, lowlevel)
