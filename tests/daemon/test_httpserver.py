"""The socket's HTTP/1.1 as clients really speak it: pipelined requests, a body sent in
chunks or after 100 Continue, HTTP/1.0, methods and paths no route has; the routes
found from the operations table; a stop that answers what is in flight."""

from __future__ import annotations

import json
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import RunningDaemon, daemon, daemon_on_new_workspace

from oryxmem.client import Client
from oryxmem.daemon.api import Routes
from oryxmem.errors import MethodNotAllowedError, NotFoundError, OryxError, UnsafeAgentNameError
from oryxmem.operations import BY_NAME, OPERATIONS
from oryxmem.workspace import Workspace


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    with daemon_on_new_workspace(tmp_path_factory.mktemp("http"), client_timeout=2) as proc:
        yield proc


def exchange(running: RunningDaemon, data: bytes, replies: int) -> list[tuple[bytes, bytes]]:
    """Send these bytes on one connection; read this many replies: (head, body) each."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(running.socket))
        conn.sendall(data)
        buffer, got = b"", []
        while len(got) < replies:
            while b"\r\n\r\n" not in buffer:
                chunk = conn.recv(65536)
                assert chunk, f"closed after {len(got)} replies: {buffer!r}"
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(buffer) < length:
                chunk = conn.recv(65536)
                assert chunk, "closed mid-body"
                buffer += chunk
            got.append((head, buffer[:length]))
            buffer = buffer[length:]
        return got


def post(path: str, body: dict[str, object], extra: str = "") -> bytes:
    raw = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(raw)}\r\n\r\n"
    return head.encode() + raw


def status_of(head: bytes) -> int:
    return int(head.split(b" ")[1])


def test_pipelined_requests_are_answered_in_order_on_one_connection(
    running: RunningDaemon,
) -> None:
    data = (
        post("/api/v1/agents/piped/memory", {"content": "first of three"})
        + b"GET /api/v1/agents/piped/memory/recall?keyword=first HTTP/1.1\r\nHost: x\r\n\r\n"
        + post("/api/v1/agents/piped/memory", {"content": "third of three"})
    )
    replies = exchange(running, data, 3)
    assert [status_of(head) for head, _ in replies] == [200, 200, 200]
    first, recall, third = (json.loads(body)["data"] for _, body in replies)
    assert first["entry"]["content"] == "first of three"
    assert any("first of three" in line for line in recall["lines"])
    assert third["entry"]["content"] == "third of three"
    assert all(b"Keep-Alive: timeout=2" in head for head, _ in replies)


def test_a_body_sent_in_chunks_or_after_100_continue_is_read_whole(
    running: RunningDaemon,
) -> None:
    raw = json.dumps({"content": "sent in two chunks"}).encode()
    chunked = (
        b"POST /api/v1/agents/chunks/memory HTTP/1.1\r\nHost: x\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n" % (10, raw[:10])
        + b"%x\r\n%s\r\n" % (len(raw) - 10, raw[10:])
        + b"0\r\n\r\n"
    )
    ((head, body),) = exchange(running, chunked, 1)
    assert status_of(head) == 200
    assert json.loads(body)["data"]["entry"]["content"] == "sent in two chunks"

    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(10)
        conn.connect(str(running.socket))
        body_bytes = json.dumps({"content": "after continue"}).encode()
        conn.sendall(
            b"POST /api/v1/agents/chunks/memory HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body_bytes)
        )
        assert conn.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(body_bytes)
        reply = b""
        while b"after continue" not in reply:
            chunk = conn.recv(65536)
            assert chunk
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
    text = running.workspace.memory_path("chunks").read_text()
    assert "sent in two chunks" in text and "after continue" in text


def test_a_chunked_body_over_one_mebibyte_is_refused_and_nothing_is_saved(
    running: RunningDaemon,
) -> None:
    piece = b"y" * 65536
    data = b"POST /api/v1/agents/toolarge/memory HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    data += b'%x\r\n{"content": "\r\n' % len(b'{"content": "')
    data += b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for _ in range(17))
    ((head, body),) = exchange(running, data, 1)
    assert status_of(head) == 413 and json.loads(body)["code"] == 1007
    assert b"Connection: close" in head
    assert not running.workspace.memory_path("toolarge").exists()


def test_http_1_0_is_answered_and_closed_and_unknown_methods_and_paths_refused(
    running: RunningDaemon,
) -> None:
    reply = running.until_closed(b"GET /api/v1/health HTTP/1.0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in reply
    ((head, body),) = exchange(running, b"DELETE /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n", 1)
    assert status_of(head) == 405 and json.loads(body)["code"] == MethodNotAllowedError.code
    ((head, body),) = exchange(running, b"GET /api/v1/nothing/here HTTP/1.1\r\nHost: x\r\n\r\n", 1)
    assert status_of(head) == 404 and json.loads(body)["code"] == NotFoundError.code


def test_an_agent_named_in_percent_encoding_is_decoded_and_a_slash_in_it_refused(
    running: RunningDaemon,
) -> None:
    encoded = "/api/v1/agents/%E7%BC%96%E7%A0%81%E5%91%98/memory"
    ((head, body),) = exchange(running, post(encoded, {"content": "named in UTF-8"}), 1)
    assert status_of(head) == 200 and json.loads(body)["data"]["agent"] == "编码员"
    assert "named in UTF-8" in running.workspace.memory_path("编码员").read_text()
    slashed = "/api/v1/agents/..%2Fescape/memory"
    ((head, body),) = exchange(running, post(slashed, {"content": "x"}), 1)
    assert status_of(head) == 400 and json.loads(body)["code"] == UnsafeAgentNameError.code
    assert not (running.workspace.agents_dir.parent / "escape").exists()


def test_routes_find_every_operation_by_its_paths_and_decode_their_arguments() -> None:
    routes = Routes(OPERATIONS)
    for operation in OPERATIONS:
        for path in operation.paths():
            concrete = path.replace("{name}", "coder").replace("{id}", "e1")
            concrete = concrete.replace("{session}", "s1")
            found, values = routes.find(operation.method, concrete)
            assert found is operation, (operation.name, concrete)
    found, values = routes.find("GET", "/api/v1/agents/%E7%BC%96%E7%A0%81%E5%91%98/memory")
    assert found is BY_NAME["memory"] and values == {"name": "编码员"}
    found, values = routes.find("GET", "/api/v1/agents/a%2Fb/memory/entries/x%20y")
    assert found is BY_NAME["entry"] and values == {"name": "a/b", "id": "x y"}
    assert routes.find("GET", "/api/v1/%68ealth")[0] is BY_NAME["health"]
    assert routes.find("HEAD", "/api/v1/agents/coder/memory")[0] is BY_NAME["memory"]
    for method, path, error in [
        ("GET", "/api/v1/agents//memory", NotFoundError),
        ("GET", "/api/v1/health/", NotFoundError),
        ("PUT", "/api/v1/health", MethodNotAllowedError),
        ("DELETE", "/api/v1/agents/coder/memory", MethodNotAllowedError),
    ]:
        with pytest.raises(OryxError) as refused:
            routes.find(method, path)
        assert type(refused.value) is error, (method, path)


def test_a_stop_answers_the_saves_in_flight_and_every_answered_save_is_kept(
    workspace: Workspace, tmp_path: Path
) -> None:
    answered: list[str] = []
    lock = threading.Lock()

    def saver(socket_path: Path, n: int) -> None:
        with Client(socket_path) as client:
            for i in range(100_000):
                content = f"client {n} save {i}"
                try:
                    client.save(f"stop{n % 4}", content)
                except OryxError:
                    return  # the daemon went: this save was not answered
                with lock:
                    answered.append(content)

    with daemon(workspace, tmp_path / "daemon.log") as proc:
        threads = [threading.Thread(target=saver, args=(proc.socket, n)) for n in range(8)]
        for thread in threads:
            thread.start()
        while len(answered) < 400:
            threading.Event().wait(0.01)
        proc.proc.send_signal(signal.SIGTERM)
        assert proc.proc.wait(timeout=30) == 0, proc.text()
        for thread in threads:
            thread.join(timeout=30)
        log = proc.text()
    assert "Traceback" not in log
    text = "".join(workspace.memory_path(f"stop{agent}").read_text() for agent in range(4))
    missing = [content for content in answered if content not in text]
    assert missing == []


def test_a_connection_stalled_in_its_next_request_s_headers_is_closed(
    running: RunningDaemon,
) -> None:
    """Answered once, then half a request line and nothing more: the keep-alive timer
    (client_timeout_seconds, 2 here) closes it; a daemon that forgot it would keep it
    open for ever, and the read below would time out."""
    received = running.until_closed(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\nGET /api/v1/he")
    assert received.startswith(b"HTTP/1.1 200 OK") and received.count(b"HTTP/1.1") == 1


def test_head_is_get_s_answer_without_its_body(running: RunningDaemon) -> None:
    received = running.until_closed(
        b"HEAD /api/v1/tools HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    head, _, body = received.partition(b"\r\n\r\n")
    assert status_of(head) == 200 and body == b""
    length = next(line for line in head.split(b"\r\n") if line.startswith(b"Content-Length:"))
    assert int(length.split(b":")[1]) > 1000  # what GET would have sent
