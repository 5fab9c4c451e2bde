"""A small Python client for the daemon's socket: the standard library only.

    from oryxmem.client import Client
    memory = Client.for_workspace()              # finds the workspace and its socket
    memory.save("coder", "User prefers tabs.", scope="core")
    memory.recall("coder", "tabs")               # {"lines": [...], ...}
    memory.context("coder")["context"]           # the prompt's memory block
    memory.search("coder", "what does the user drink?")["hits"]

Errors come back as the same OryxError classes the library raises.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.parse
from pathlib import Path
from typing import Any

from oryxmem.config import Config
from oryxmem.errors import (
    DaemonUnavailableError,
    InternalError,
    InvalidFieldError,
    OryxError,
    error_for_code,
)
from oryxmem.operations import BY_NAME
from oryxmem.workspace import WORKSPACE_HEADER, open_workspace, socket_path

MAX_LINE = 65536
MAX_HEADERS = 100


class _ReplyError(Exception):
    """The daemon closed the connection or sent something that is not an HTTP reply."""


CONNECT_RETRY_SECONDS = 2.0  # how long a full backlog is waited out
# How long the daemon keeps an idle connection when its reply does not say (the
# setting's default); a connection is sent on again only while it has been idle for
# less than half of that (_Connection.fresh).
DEFAULT_KEEP_ALIVE_SECONDS = float(Config.defaults().get("daemon.client_timeout_seconds"))


class _Connection:
    """One kept-alive HTTP/1.1 connection to the daemon's Unix socket.

    Exactly the HTTP this client needs, for the one server it talks to: a request
    goes out in one write; a reply is a status line, headers and a body framed by
    Content-Length (daemon/httpserver.py frames every reply that way) or by the end
    of the connection. http.client does all of that and much more, and cost
    twice the CPU per call (0.13 ms against 0.06: it sends a request in two writes,
    and parses every reply's headers with the email package); on a busy machine
    that is taken from the daemon.
    """

    def __init__(self, path: str, timeout: float) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self._connect(path, min(timeout, CONNECT_RETRY_SECONDS))
        except BaseException:
            self.sock.close()
            raise
        self.reader = self.sock.makefile("rb")
        self.reusable = True
        self.keep_alive = DEFAULT_KEEP_ALIVE_SECONDS  # as the last reply's Keep-Alive says
        self.idle_since = time.monotonic()

    def _connect(self, path: str, patience: float) -> None:
        """A Unix socket whose backlog is full refuses at once (EAGAIN): many clients
        arrived together. Try again for a moment before that counts as no daemon."""
        deadline = time.monotonic() + patience
        pause = 0.001
        while True:
            try:
                self.sock.connect(path)
                return
            except BlockingIOError:
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.05)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()

    def fresh(self) -> bool:
        """Idle for less than half of what the daemon keeps it? A request sent on a
        connection the daemon is closing (its keep-alive timer fired, or fires first
        when the daemon wakes from a pause: a suspended laptop, SIGSTOP) is reset
        unread, and a save cannot be sent again (it may have been carried out)."""
        return time.monotonic() - self.idle_since < self.keep_alive / 2

    def send(self, request: bytes) -> None:
        self.sock.sendall(request)

    def read_reply(self) -> bytes:
        """The body of the next reply (the envelope carries the outcome, not the status)."""
        status = self._line()
        if not status:
            raise _ReplyError("the connection was closed")
        version, _, rest = status.partition(b" ")
        if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
            raise _ReplyError(f"not an HTTP reply: {status[:80]!r}")
        length: int | None = None
        keep_alive = version != b"HTTP/1.0"
        for _ in range(MAX_HEADERS):
            line = self._line()
            if line in (b"\r\n", b"\n"):
                break
            if not line:
                raise _ReplyError("the connection was closed in the headers")
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                if not value.strip().isdigit():
                    raise _ReplyError(f"a bad Content-Length: {value.strip()[:40]!r}")
                length = int(value)
            elif name == b"connection":
                keep_alive = value.strip().lower() != b"close"
            elif name == b"keep-alive":
                self.keep_alive = _keep_alive_timeout(value, self.keep_alive)
            elif name == b"transfer-encoding":
                raise _ReplyError("a chunked reply; the daemon sends none")
        else:
            raise _ReplyError(f"more than {MAX_HEADERS} header lines")
        if length is None:
            self.reusable = False  # the body ends with the connection
            return self.reader.read()
        body = self.reader.read(length)
        if len(body) < length:
            raise _ReplyError("the connection was closed in the body")
        self.reusable = keep_alive
        self.idle_since = time.monotonic()
        return body

    def _line(self) -> bytes:
        line = self.reader.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise _ReplyError("a header line is too long")
        return line


def _keep_alive_timeout(value: bytes, otherwise: float) -> float:
    """The ``timeout=N`` of a Keep-Alive header (``timeout=10, max=100``)."""
    for part in value.split(b","):
        name, _, number = part.partition(b"=")
        if name.strip().lower() == b"timeout":
            try:
                return max(0.0, float(number.strip()))
            except ValueError:
                return otherwise
    return otherwise


def _request_bytes(method: str, path: str, body: bytes | None, headers: dict[str, str]) -> bytes:
    if not path.startswith("/") or not path.isascii() or not path.isprintable() or " " in path:
        raise InvalidFieldError(f"not a request path: {path!r}")
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost"]
    for name, value in headers.items():
        if any(c in value for c in "\r\n\0") or not name.isascii() or ":" in name:
            raise InvalidFieldError(f"header {name!r} holds a character it may not hold")
        lines.append(f"{name}: {value}")
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    return head if body is None else head + body


class Client:
    """One keep-alive connection to the daemon; not for sharing between threads."""

    def __init__(
        self, socket_path: str | Path, timeout: float = 30.0, workspace: Path | None = None
    ) -> None:
        """``workspace``: the root this client means; a daemon serving another refuses
        every request (error 1018) instead of storing a save in the wrong place."""
        self.socket_path = str(socket_path)
        self.timeout = timeout
        self._meant = (
            {} if workspace is None else {WORKSPACE_HEADER: urllib.parse.quote(str(workspace))}
        )
        self._conn: _Connection | None = None

    @classmethod
    def for_workspace(cls, root: str | None = None, timeout: float = 30.0) -> Client:
        workspace = open_workspace(root)
        path = socket_path(workspace, Config.load(workspace.config_path))
        return cls(path, timeout, workspace.root)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> _Connection:
        """The kept-alive connection while it is fresh, else a new one."""
        if self._conn is not None and not self._conn.fresh():
            self.close()
        if self._conn is None:
            self._conn = _Connection(self.socket_path, self.timeout)
        return self._conn

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Send one request; return the envelope's data or raise its error.

        A kept-alive connection idle for half of what the daemon keeps it is not
        used again: a new one is opened. One the daemon has closed fails while
        sending (a Unix socket refuses at once): then it reconnects and sends again.
        A request that went out whole and got no answer is sent again only when it
        is a GET: a save may have been carried out, and sending it twice could store
        it twice.
        """
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        all_headers = {"Content-Type": "application/json", **self._meant, **(headers or {})}
        message = _request_bytes(method, path, payload, all_headers)
        for attempt in (1, 2):
            try:
                conn = self._connection()
                conn.send(message)
            except OSError as error:
                self.close()
                if attempt == 2 or isinstance(error, FileNotFoundError | ConnectionRefusedError):
                    raise DaemonUnavailableError(
                        f"no daemon answers on {self.socket_path}: {error}"
                    ) from None
                continue  # not sent: a closed kept-alive connection
            try:
                raw = conn.read_reply()
                if not conn.reusable:
                    self.close()
                break
            except (OSError, _ReplyError) as error:
                self.close()
                if method != "GET" or attempt == 2:
                    raise DaemonUnavailableError(
                        f"the daemon on {self.socket_path} did not answer ({error});"
                        f" the {method} {path} may or may not have been carried out"
                    ) from None
        try:
            envelope = json.loads(raw)
        except ValueError:  # not JSON, or not UTF-8
            raise InternalError(
                f"the daemon sent a reply that is not JSON: {raw[:200]!r}"
            ) from None
        if envelope.get("code") != 0:
            raise error_for_code(
                int(envelope["code"]), str(envelope.get("message")), envelope.get("data")
            )
        return envelope.get("data")

    # --- the memory calls ---------------------------------------------------------

    def call(self, name: str, headers: dict[str, str] | None = None, **args: Any) -> Any:
        """Carry out the operation ``name`` of the table (operations.py): its arguments
        go where the table says (the path, the query or the body); for an operation
        served per agent, ``agent`` picks the agent's route (none: the global file's).
        Gives the envelope's data."""
        # Lean on purpose: it runs between a reply and the next request, with the CPU's
        # caches cold, where every step costs several times what it does in a loop.
        operation = BY_NAME[name]
        agent = args.pop("agent", None) if operation.per_agent else None
        if not operation.names.issuperset(args):
            raise TypeError(f"{name} takes no {', '.join(sorted(args.keys() - operation.names))}")
        path = self._prefix(agent) + operation.path if operation.per_agent else operation.path
        placed = operation.placed
        for param in placed.get("path", ()):
            path = path.replace(f"{{{param.wire}}}", urllib.parse.quote(str(args[param.name])))
        in_query = placed.get("query")
        if in_query:
            query = {p.wire: _query_text(args[p.name]) for p in in_query if _sent(args.get(p.name))}
            if query:
                path += "?" + urllib.parse.urlencode(query)
        in_body = placed.get("body")
        body = None
        if in_body is not None:
            body = {p.wire: args[p.name] for p in in_body if p.name in args}
        return self.request(operation.method, path, body, headers)

    @staticmethod
    def _prefix(agent: str | None) -> str:
        return "/api/v1" if not agent else f"/api/v1/agents/{urllib.parse.quote(agent, safe='')}"

    def health(self) -> dict[str, Any]:
        return dict(self.call("health"))

    def openapi(self) -> dict[str, Any]:
        """The API as an OpenAPI 3.1 document."""
        return dict(self.call("openapi"))

    def agents(self) -> list[dict[str, Any]]:
        return list(self.call("agents"))

    def save(self, agent: str | None, content: str, scope: str = "archival") -> dict[str, Any]:
        return dict(self.call("save", agent=agent, content=content, scope=scope))

    def recall(self, agent: str | None, keyword: str) -> dict[str, Any]:
        return dict(self.call("recall", agent=agent, keyword=keyword))

    def search(
        self,
        agent: str | None,
        query: str,
        limit: int | None = None,
        mode: str = "hybrid",
        relevant: bool = False,
    ) -> dict[str, Any]:
        """The agent's entries ranked for a question (hits with score and arms);
        ``relevant``: only those the words found or close enough in meaning."""
        found = self.call(
            "search", agent=agent, query=query, limit=limit, mode=mode, relevant=relevant
        )
        return dict(found)

    def reindex(self, agent: str | None = None) -> dict[str, Any]:
        """Have the daemon build the indexes again (of one agent, or all); it embeds in
        the background: health()["indexes"] says how much is left."""
        return dict(self.call("reindex", agent=agent))

    def entries(
        self,
        agent: str | None,
        scope: str = "archival",
        offset: int = 0,
        limit: int = 100,
        order: str = "newest",
    ) -> dict[str, Any]:
        """A page of one section (newest first by default), and the section's total."""
        page = self.call(
            "entries", agent=agent, scope=scope, offset=offset, limit=limit, order=order
        )
        return dict(page)

    def entry(self, agent: str | None, id: str) -> dict[str, Any]:
        """The entry ``id`` as the file has it now; refused (1022) when it is gone."""
        return dict(self.call("entry", agent=agent, id=id))

    def forget(self, agent: str | None, ids: list[str], purge: bool = False) -> dict[str, Any]:
        """Take these entries out (by id); nothing changes if any is not there any more.
        With ``purge`` history keeps that they went, not what they said."""
        return dict(self.call("forget", agent=agent, ids=ids, purge=purge))

    def edit(self, agent: str | None, id: str, content: str) -> dict[str, Any]:
        """Write entry ``id`` anew with this content, in its place; refused if it changed."""
        return dict(self.call("edit", agent=agent, id=id, content=content))

    def sessions(self, agent: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        return list(self.call("sessions", agent=agent, limit=limit))

    def memory(self, agent: str | None) -> dict[str, Any]:
        return dict(self.call("memory", agent=agent))

    def context(
        self,
        agent: str | None,
        session: str | None = None,
        turns: int | None = None,
        query: str | None = None,
    ) -> dict[str, Any]:
        """The memory block; with ``query`` (the user's message), the archival entries
        most relevant to it beside the newest; with ``session``, its messages too."""
        return dict(self.call("context", agent=agent, session=session, turns=turns, query=query))

    def prompt(
        self,
        agent: str | None,
        session: str | None = None,
        turns: int | None = None,
        query: str | None = None,
    ) -> dict[str, Any]:
        """The four-block prompt: as one text ("text") and as parts ("system", "files",
        "memory", "history", "tools")."""
        return dict(self.call("prompt", agent=agent, session=session, turns=turns, query=query))

    def search_episodes(
        self, agent: str | None, query: str, limit: int = 5, exclude: str | None = None
    ) -> dict[str, Any]:
        """The rounds of the agent's past sessions that best answer query, best first."""
        found = self.call("episodes_search", agent=agent, query=query, limit=limit, exclude=exclude)
        return dict(found)

    def history(self, agent: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """The audit log, newest first (of one agent, or all)."""
        return list(self.call("history", agent=agent, limit=limit))

    def tools(self) -> dict[str, Any]:
        """The tools' schemas: plain JSON Schema ("tools"), and "openai", "anthropic"."""
        return dict(self.call("tools"))

    def trigger(self, agent: str | None, user_message: str, reply: str) -> dict[str, Any]:
        return dict(self.call("trigger", agent=agent, user_message=user_message, reply=reply))

    def save_memory_tool(self, body: dict[str, Any], agent: str | None = None) -> dict[str, Any]:
        """The save_memory tool, called with an agent's body as it is."""
        headers = {"X-OryxOS-Agent": agent} if agent else None
        return dict(self.request("POST", BY_NAME["save_memory"].path, body, headers))

    def recall_memory_tool(self, body: dict[str, Any], agent: str | None = None) -> dict[str, Any]:
        """The recall_memory tool, called with an agent's body as it is."""
        headers = {"X-OryxOS-Agent": agent} if agent else None
        return dict(self.request("POST", BY_NAME["recall_memory"].path, body, headers))

    def create_session(self, agent: str | None) -> dict[str, Any]:
        return dict(self.call("create_session", agent=agent))

    def append_message(self, session: str, role: str, content: str) -> dict[str, Any]:
        return dict(self.call("append_message", session=session, role=role, content=content))

    def session_messages(self, session: str, turns: int | None = None) -> dict[str, Any]:
        """A session's messages, oldest first (the last ``turns``)."""
        return dict(self.call("session_messages", session=session, turns=turns))


def _sent(value: Any) -> bool:
    """Does a query argument go on the wire? Not when absent (None) or a flag left off."""
    return value is not None and value is not False


def _query_text(value: Any) -> str:
    return "1" if value is True else str(value)


__all__ = ["Client", "OryxError"]
