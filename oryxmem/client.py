"""A small Python client for the daemon's socket: the standard library only.

    from oryxmem.client import Client
    memory = Client.for_workspace()              # finds the workspace and its socket
    memory.save("coder", "User prefers tabs.", scope="core")
    memory.recall("coder", "tabs")               # {"lines": [...], ...}
    memory.context("coder")["context"]           # the prompt's memory block

Errors come back as the same OryxError classes the library raises.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from pathlib import Path
from typing import Any

from oryxmem.errors import DaemonUnavailableError, InternalError, OryxError, error_for_code


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class Client:
    """One keep-alive connection to the daemon; not for sharing between threads."""

    def __init__(self, socket_path: str | Path, timeout: float = 30.0) -> None:
        self.socket_path = str(socket_path)
        self.timeout = timeout
        self._conn: _UnixHTTPConnection | None = None

    @classmethod
    def for_workspace(cls, root: str | None = None, timeout: float = 30.0) -> Client:
        from oryxmem.config import Config
        from oryxmem.daemon.sockets import socket_path
        from oryxmem.workspace import open_workspace

        workspace = open_workspace(root)
        return cls(socket_path(workspace, Config.load(workspace.config_path)), timeout)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Send one request; return the envelope's data or raise its error.

        A kept-alive connection the daemon has closed fails while sending (a Unix
        socket refuses at once): then it reconnects and sends again. A request that
        went out whole and got no answer is sent again only when it is a GET: a save
        may have been carried out, and sending it twice could store it twice.
        """
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = _UnixHTTPConnection(self.socket_path, self.timeout)
            try:
                self._conn.request(method, path, body=payload, headers=all_headers)
            except (OSError, http.client.HTTPException) as error:
                self.close()
                if attempt == 2 or isinstance(error, FileNotFoundError | ConnectionRefusedError):
                    raise DaemonUnavailableError(
                        f"no daemon answers on {self.socket_path}: {error}"
                    ) from None
                continue  # not sent: a closed kept-alive connection
            try:
                response = self._conn.getresponse()
                raw = response.read()
                break
            except (OSError, http.client.HTTPException) as error:
                self.close()
                if method != "GET" or attempt == 2:
                    raise DaemonUnavailableError(
                        f"the daemon on {self.socket_path} did not answer ({error});"
                        f" the {method} {path} may or may not have been carried out"
                    ) from None
        try:
            envelope = json.loads(raw)
        except json.JSONDecodeError:
            raise InternalError(
                f"the daemon sent a reply that is not JSON: {raw[:200]!r}"
            ) from None
        if envelope.get("code") != 0:
            raise error_for_code(
                int(envelope["code"]), str(envelope.get("message")), envelope.get("data")
            )
        return envelope.get("data")

    # --- the memory calls ---------------------------------------------------------

    @staticmethod
    def _prefix(agent: str | None) -> str:
        return "/api/v1" if not agent else f"/api/v1/agents/{urllib.parse.quote(agent, safe='')}"

    def health(self) -> dict[str, Any]:
        return dict(self.request("GET", "/api/v1/health"))

    def agents(self) -> list[dict[str, Any]]:
        return list(self.request("GET", "/api/v1/agents"))

    def save(self, agent: str | None, content: str, scope: str = "archival") -> dict[str, Any]:
        body = {"content": content, "scope": scope}
        return dict(self.request("POST", f"{self._prefix(agent)}/memory", body))

    def recall(self, agent: str | None, keyword: str) -> dict[str, Any]:
        query = urllib.parse.urlencode({"keyword": keyword})
        return dict(self.request("GET", f"{self._prefix(agent)}/memory/recall?{query}"))

    def memory(self, agent: str | None) -> dict[str, Any]:
        return dict(self.request("GET", f"{self._prefix(agent)}/memory"))

    def context(self, agent: str | None, session: str | None = None) -> dict[str, Any]:
        query = f"?{urllib.parse.urlencode({'session': session})}" if session else ""
        return dict(self.request("GET", f"{self._prefix(agent)}/context{query}"))

    def trigger(self, agent: str | None, user_message: str, reply: str) -> dict[str, Any]:
        body = {"user_message": user_message, "reply": reply}
        return dict(self.request("POST", f"{self._prefix(agent)}/triggers", body))

    def save_memory_tool(self, body: dict[str, Any], agent: str | None = None) -> dict[str, Any]:
        headers = {"X-OryxOS-Agent": agent} if agent else None
        return dict(self.request("POST", "/api/v1/tools/save_memory", body, headers))

    def recall_memory_tool(self, body: dict[str, Any], agent: str | None = None) -> dict[str, Any]:
        headers = {"X-OryxOS-Agent": agent} if agent else None
        return dict(self.request("POST", "/api/v1/tools/recall_memory", body, headers))

    def create_session(self, agent: str | None) -> dict[str, Any]:
        return dict(self.request("POST", "/api/v1/sessions", {"agent": agent}))

    def append_message(self, session: str, role: str, content: str) -> dict[str, Any]:
        body = {"role": role, "content": content}
        return dict(self.request("POST", f"/api/v1/sessions/{session}/messages", body))

    def history(self, session: str, turns: int | None = None) -> dict[str, Any]:
        query = f"?turns={turns}" if turns else ""
        return dict(self.request("GET", f"/api/v1/sessions/{session}/history{query}"))


__all__ = ["Client", "OryxError"]
