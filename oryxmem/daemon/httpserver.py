"""The memory API's HTTP/1.1 server on the daemon's Unix socket: llhttp's parser (by
httptools) under an asyncio protocol, each connection's requests answered in order.

Every route of the socket takes JSON and answers a JSON envelope, so the server only
parses, hands a whole request to the application and writes its reply. A web
framework's request, response and task per request took the event loop about twice
as long per save, while the loop's time is a third of what the daemon's one
interpreter does for a save (docs/performance.md). The console, which serves pages,
runs on aiohttp in its own process.

What a client that misbehaves gets:
- a peer of another user: a 403 for its request, and the connection closed;
- bytes that are not HTTP, a request line or header over ``MAX_FIELD_BYTES``, or more
  than ``MAX_HEADERS`` headers: a 400 (``MalformedRequestError``) and the connection
  closed; the log gets one line without the request's bytes;
- a body over ``max_body`` bytes: a 413, at its headers, and the connection closed;
- a body that does not arrive within ``client_timeout``: a 408 and the connection
  closed; a connection idle that long (or stalled in its headers) is closed.

A connection closed after a reply is closed lingering (``_Connection._end``): the
client reads the reply whole even while it is still sending.
"""

from __future__ import annotations

import asyncio
import logging
import re
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol, cast

import httptools

from oryxmem.daemon.sockets import peer_uid
from oryxmem.errors import (
    BodyTooLargeError,
    ForbiddenError,
    InternalError,
    MalformedRequestError,
    OryxError,
    RequestTimeoutError,
)

log = logging.getLogger("oryxmem.daemon")

MAX_FIELD_BYTES = 8190  # the request line, or one header's name and value
MAX_HEADERS = 128
QUEUED_MAX = 16  # pipelined requests read ahead of their answers before reading pauses
_PHRASES = {status.value: status.phrase for status in HTTPStatus}


@dataclass(slots=True)
class Call:
    """One whole request, as the application sees it."""

    method: str
    path: str  # as sent (percent-encoded)
    query: dict[str, str]  # the first value of each name
    headers: dict[str, str]  # names lower-cased; the first of repeated ones
    body: bytes
    keep_alive: bool = True
    path_args: dict[str, str] = field(default_factory=dict)  # the route's {name}s, decoded
    json: Any = None  # the parsed body, once the application has read it

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes  # JSON


class Application(Protocol):
    """What the server serves: an answer for each request (never raising), and the
    reply that refuses one."""

    async def answer(self, call: Call) -> Reply: ...

    def refusal(self, error: OryxError) -> Reply: ...


@dataclass
class _Partial:
    """The request being read."""

    url: bytearray = field(default_factory=bytearray)
    headers: dict[str, str] = field(default_factory=dict)
    count: int = 0
    body: list[bytes] = field(default_factory=list)
    size: int = 0
    headers_done: bool = False


class _Connection(asyncio.Protocol):
    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.partial: _Partial | None = None
        self.queue: deque[Call] = deque()
        self.busy = False
        self.closing = False
        self.paused = False
        self.forbidden = False
        self.timer: asyncio.TimerHandle | None = None
        self.refused: OryxError | None = None  # why a callback stopped the parser
        self.task: asyncio.Task[None] | None = None  # the answer being made

    # --- the transport ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass
        self.server.connections.add(self)
        sock = transport.get_extra_info("socket")
        self.forbidden = sock is not None and peer_uid(sock) != self.server.uid
        self._idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._cancel_timer()
        self.server.connections.discard(self)
        self.server.gone()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._malformed("a protocol upgrade is not served here")
        except httptools.HttpParserError as error:
            refused, self.refused = self.refused, None
            if refused is not None:  # raised by a callback below
                if isinstance(refused, MalformedRequestError):
                    log.warning("refused a malformed request (400): %s", refused.message)
                self._refuse(refused)
            else:
                self._malformed(str(error))
            return
        partial = self.partial
        if partial is not None and partial.headers_done and self.timer is None:
            self._body_timer()

    # --- the parser's callbacks ------------------------------------------------------

    def on_message_begin(self) -> None:
        self.partial = _Partial()

    def on_url(self, url: bytes) -> None:
        assert self.partial is not None
        self.partial.url += url
        if len(self.partial.url) > MAX_FIELD_BYTES:
            self._stop_parser(MalformedRequestError("malformed HTTP request: the URL is too long"))

    def on_header(self, name: bytes, value: bytes) -> None:
        partial = self.partial
        assert partial is not None
        partial.count += 1
        if len(name) + len(value) > MAX_FIELD_BYTES or partial.count > MAX_HEADERS:
            too_large = MalformedRequestError("malformed HTTP request: a header is too large")
            self._stop_parser(too_large)
        # UTF-8 as sent (a name of an agent in X-OryxOS-Agent); bytes that are not UTF-8
        # stay lone surrogates, which the tools refuse
        value_text = value.decode("utf-8", "surrogateescape")
        partial.headers.setdefault(name.decode("latin-1").lower(), value_text)

    def on_headers_complete(self) -> None:
        partial = self.partial
        assert partial is not None
        self._cancel_timer()
        length = partial.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.server.max_body:
            self._stop_parser(self._too_large())
        if partial.headers.get("expect", "").lower() == "100-continue":
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        partial.headers_done = True  # the body's timer starts if it is not all here

    def on_body(self, body: bytes) -> None:
        partial = self.partial
        assert partial is not None
        partial.size += len(body)
        if partial.size > self.server.max_body:
            self._stop_parser(self._too_large())
        partial.body.append(body)

    def on_message_complete(self) -> None:
        partial, self.partial = self.partial, None
        assert partial is not None
        self._cancel_timer()
        url = httptools.parse_url(bytes(partial.url))
        raw_query = url.query.decode("utf-8", "replace") if url.query else ""
        query: dict[str, str] = {}
        for name, value in urllib.parse.parse_qsl(raw_query, keep_blank_values=True):
            query.setdefault(name, value)
        body = partial.body[0] if len(partial.body) == 1 else b"".join(partial.body)
        call = Call(
            self.parser.get_method().decode("ascii"),
            url.path.decode("utf-8", "replace"),
            query,
            partial.headers,
            body,
            self.parser.should_keep_alive(),
        )
        self.queue.append(call)
        if len(self.queue) >= QUEUED_MAX and not self.paused:
            assert self.transport is not None
            self.transport.pause_reading()
            self.paused = True
        self._next()

    # --- answering ---------------------------------------------------------------------

    def _next(self) -> None:
        if self.busy or self.closing:
            return
        if not self.queue:
            if self.paused and self.transport is not None:
                self.transport.resume_reading()
                self.paused = False
            partial = self.partial
            if partial is None or not partial.headers_done:
                self._idle()  # closes a connection left idle, or stalled in its headers
            elif self.timer is None:
                self._body_timer()
            return
        call = self.queue.popleft()
        if self.forbidden:
            self._refuse(ForbiddenError("this socket serves only the user who runs the daemon"))
            return
        self.busy = True
        self.task = self.loop.create_task(self._answer(call))  # held: the loop's ref is weak

    async def _answer(self, call: Call) -> None:
        try:
            reply = await self.server.application.answer(call)
        except Exception:  # the application answers errors itself; this is a defect
            log.exception("%s %s failed", call.method, call.path)
            reply = self.server.application.refusal(InternalError("an unexpected error"))
        self.busy = False
        self.server.on_answer()
        close = not call.keep_alive or self.closing or self.server.stopping
        self._write(reply, close, head_only=call.method == "HEAD")
        self._next()

    def _write(self, reply: Reply, close: bool, head_only: bool = False) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        head = (
            f"HTTP/1.1 {reply.status} {_PHRASES.get(reply.status, 'Unknown')}\r\n"
            "Content-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(reply.body)}\r\n"
            + ("Connection: close\r\n" if close else self.server.keep_alive_header)
            + "\r\n"
        )
        data = head.encode("ascii")
        transport.write(data if head_only else data + reply.body)
        if close:
            self._end(transport)

    def _end(self, transport: asyncio.Transport) -> None:
        """Close after what was written, lingering: the client may still be sending (a
        body refused at its headers) and must read the reply, not a broken pipe. What it
        sends meanwhile is dropped, and the connection ends when it closes its side, or
        after ``client_timeout``."""
        self.closing = True
        self._cancel_timer()
        if self.paused:
            transport.resume_reading()
            self.paused = False
        if transport.can_write_eof():
            transport.write_eof()
            self.timer = self.loop.call_later(self.server.client_timeout, transport.close)
        else:
            transport.close()

    def _refuse(self, error: OryxError) -> None:
        """Answer with this error and end the connection: the rest of what was sent
        must not be read as a request."""
        self.queue.clear()
        self.partial = None
        self._cancel_timer()
        if not self.busy:
            self._write(self.server.application.refusal(error), True)
        else:  # the answer in flight goes first; nothing after it is read
            self.closing = True

    def _malformed(self, reason: str) -> None:
        # Only the parser's words: what it may quote of the request (b'...') stays out.
        reason = re.split(r"""\s*b['"]""", reason.strip())[0]
        reason = reason.splitlines()[0].rstrip(": ")[:120] if reason.strip() else "bad request"
        log.warning("refused a malformed request (400): %s", reason)
        self._refuse(MalformedRequestError(f"malformed HTTP request: {reason}"))

    def _stop_parser(self, error: OryxError) -> None:
        """From a parser callback: the request is refused with this error (the parser
        stops with a callback error, which data_received turns into the refusal)."""
        self.refused = error
        raise _StopParsing

    def _too_large(self) -> OryxError:
        return BodyTooLargeError(f"the request body is larger than {self.server.max_body} bytes")

    # --- the timer: an idle connection closes, a late body is refused ------------------

    def _idle(self) -> None:
        self._cancel_timer()
        self.timer = self.loop.call_later(self.server.client_timeout, self._close_idle)

    def _body_timer(self) -> None:
        self.timer = self.loop.call_later(self.server.client_timeout, self._body_late)

    def _close_idle(self) -> None:
        self.timer = None
        if not self.busy and not self.queue and self.transport is not None:
            self.closing = True
            self.transport.close()

    def _body_late(self) -> None:
        self.timer = None
        if self.partial is not None:
            late = f"the body did not arrive within {self.server.client_timeout:g} s; closing"
            self._refuse(RequestTimeoutError(late))

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def stop(self) -> None:
        """The server stops: an idle connection ends now, a busy one after its answer."""
        if not self.busy and self.transport is not None:
            self.closing = True
            self.transport.close()


class _StopParsing(Exception):
    pass


class ApiServer:
    """Serves ``application`` on a listening Unix socket."""

    def __init__(
        self,
        application: Application,
        client_timeout: float,
        max_body: int,
        uid: int,
        on_answer: Callable[[], None] = lambda: None,
    ) -> None:
        self.application = application
        self.client_timeout = client_timeout
        self.max_body = max_body
        self.uid = uid
        self.on_answer = on_answer
        # Each reply says how long an idle connection is kept: the client opens a new
        # one rather than send on one that may be closing.
        self.keep_alive_header = f"Keep-Alive: timeout={client_timeout:g}\r\n"
        self.loop = asyncio.get_running_loop()
        self.connections: set[_Connection] = set()
        self.stopping = False
        self._all_gone = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None

    async def start(self, sock: Any, backlog: int) -> None:
        self._server = await self.loop.create_unix_server(
            lambda: _Connection(self), sock=sock, backlog=backlog
        )

    def gone(self) -> None:
        if self.stopping and not self.connections:
            self._all_gone.set()

    async def stop(self, drain_seconds: float) -> None:
        """Stop accepting; let the requests in flight be answered (for up to
        ``drain_seconds``), then end every connection."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.stop()
        if self.connections:
            try:
                await asyncio.wait_for(self._all_gone.wait(), drain_seconds)
            except TimeoutError:
                unanswered = len(self.connections)
                log.warning("%d connections unanswered after %g s", unanswered, drain_seconds)
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
