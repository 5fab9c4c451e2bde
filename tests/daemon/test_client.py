"""oryxmem.client's HTTP framing, against scripted servers and the real daemon."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.daemon import daemon

from oryxmem.client import Client
from oryxmem.config import set_value
from oryxmem.errors import DaemonUnavailableError, InternalError, InvalidFieldError
from oryxmem.workspace import Workspace

OK = b'{"code": 0, "message": "ok", "data": {"n": 1}, "timestamp": 1}'
Reply = Callable[[int], bytes]  # the reply to the n-th request on a connection


class ScriptedServer:
    """Takes whole requests on a Unix socket and answers each as the script says."""

    def __init__(self, path: Path, reply: Reply, close_after: bool = False) -> None:
        self.path = str(path)
        self.reply = reply
        self.close_after = close_after
        self.requests: list[bytes] = []
        self.connections = 0
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        data = b""
        with conn:
            for n in range(100):
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                while len(data) < length:
                    data += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + data[:length])
                data = data[length:]
                conn.sendall(self.reply(n))
                if self.close_after:
                    return

    def close(self) -> None:
        self.server.close()


Serve = Callable[..., ScriptedServer]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    servers: list[ScriptedServer] = []

    def start(reply: Reply, close_after: bool = False) -> ScriptedServer:
        server = ScriptedServer(tmp_path / f"s{len(servers)}.sock", reply, close_after)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def framed(body: bytes, *headers: bytes) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"Content-Type: application/json", *headers]
    return b"\r\n".join([*head, b"Content-Length: %d" % len(body), b"", body])


def test_a_request_goes_out_in_one_piece_and_the_connection_is_kept(serve: Serve) -> None:
    server = serve(lambda n: framed(OK))
    with Client(server.path) as client:
        assert client.save("coder", "ü ok") == {"n": 1}
        assert client.recall("coder", "a b") == {"n": 1}
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /api/v1/agents/coder/memory HTTP/1.1\r\nHost: localhost\r\n")
    assert first.endswith('{"content": "ü ok", "scope": "archival"}'.encode())
    assert server.requests[1].startswith(b"GET /api/v1/agents/coder/memory/recall?keyword=a+b ")


def test_connection_close_is_honoured(serve: Serve) -> None:
    server = serve(lambda n: framed(OK, b"Connection: close"), close_after=True)
    with Client(server.path) as client:
        for _ in range(3):
            assert client.save("coder", "x") == {"n": 1}
    assert server.connections == 3


def test_a_reply_without_length_ends_with_the_connection(serve: Serve) -> None:
    server = serve(
        lambda n: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK, True
    )
    with Client(server.path) as client:
        assert client.health() == {"n": 1}
        assert client.health() == {"n": 1}
    assert server.connections == 2


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 101 + b"\r\n",
    ],
    ids=["chunked", "not-http", "short-body", "bad-length", "too-many-headers"],
)
def test_a_broken_reply_is_a_clear_error_and_a_save_is_not_sent_twice(
    serve: Serve, reply: bytes
) -> None:
    server = serve(lambda n: reply, close_after=True)
    client = Client(server.path, timeout=5)
    with client, pytest.raises(DaemonUnavailableError, match="may or may not"):
        client.save("coder", "once")
    assert len(server.requests) == 1


def test_a_reply_that_is_not_json_is_an_internal_error(serve: Serve) -> None:
    server = serve(lambda n: framed(b"\xff\xfe not json"))
    with Client(server.path) as client, pytest.raises(InternalError, match="not JSON"):
        client.health()


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/api/v1/health\r\nX-Evil: 1", None),
        ("/api/v1/a b", None),
        ("/api/v1/health", {"X-OryxOS-Agent": "coder\r\nX-Evil: 1"}),
    ],
)
def test_a_request_that_would_forge_lines_is_refused_before_sending(
    serve: Serve,
    path: str,
    headers: dict[str, str] | None,
) -> None:
    server = serve(lambda n: framed(OK))
    with Client(server.path) as client:
        with pytest.raises(InvalidFieldError):
            client.request("GET", path, headers=headers)
        assert client.health() == {"n": 1}
    assert len(server.requests) == 1


def test_no_daemon_is_daemon_unavailable(tmp_path: Path) -> None:
    with pytest.raises(DaemonUnavailableError, match="no daemon answers"):
        Client(tmp_path / "nothing.sock").health()


def test_a_tool_call_names_a_non_ascii_agent_in_its_header(
    workspace: Workspace, tmp_path: Path
) -> None:
    with daemon(workspace, tmp_path / "daemon.log") as running, Client(running.socket) as client:
        saved = client.save_memory_tool({"content": "用中文保存"}, agent="编码员")
        assert saved["agent"] == "编码员"
        assert client.recall_memory_tool({"keyword": "中文"}, agent="编码员")["lines"]
    assert "用中文保存" in workspace.memory_path("编码员").read_text()


def test_a_connection_idle_for_half_its_keep_alive_is_not_sent_on_again(serve: Serve) -> None:
    """The daemon says how long it keeps an idle connection; past half of it the client
    opens a new one (a request sent as the daemon closes one is reset unread)."""
    server = serve(lambda n: framed(OK, b"Keep-Alive: timeout=2, max=100"))
    with Client(server.path) as client:
        assert client.health() == {"n": 1}
        assert client.health() == {"n": 1}  # at once: the same connection
        assert server.connections == 1
        time.sleep(1.1)
        assert client.save("coder", "after a pause") == {"n": 1}
    assert server.connections == 2
    assert len(server.requests) == 3


def test_a_save_after_the_daemon_was_paused_past_its_keep_alive_goes_through(
    workspace: Workspace, tmp_path: Path
) -> None:
    """A daemon stopped (SIGSTOP, a suspended laptop) past a connection's keep-alive closes
    it first thing when it wakes: a save the client had sent on it was reset unread, and
    failed as 'may or may not have been carried out'. The client opens a new connection
    instead, and the save is made once."""
    set_value(workspace.config_path, "daemon.client_timeout_seconds", 2)
    with daemon(workspace, tmp_path / "daemon.log") as running, Client(running.socket) as client:
        client.health()
        time.sleep(1.2)
        running.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(1.2)  # the connection's keep-alive ends while the daemon sleeps
            answer: list[object] = []
            sending = threading.Thread(
                target=lambda: answer.append(client.save("coder", "saved across a pause"))
            )
            sending.start()
            time.sleep(0.2)
        finally:
            running.proc.send_signal(signal.SIGCONT)
        sending.join(timeout=30)
        assert answer and isinstance(answer[0], dict), answer
        assert client.recall("coder", "across a pause")["lines"]
    text = workspace.memory_path("coder").read_text()
    assert text.count("saved across a pause") == 1
