"""The daemon as a real process on a real socket: every route, bad input, life cycle."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import RunningDaemon, daemon, daemon_on_new_workspace
from support.sync import (
    Background,
    all_done,
    disagreements,
    sql,
    storm_of_events,
    wait_until,
    watched_scratch_folder,
)

from oryxmem.client import Client
from oryxmem.config import set_value
from oryxmem.errors import (
    ContentTooLongError,
    DaemonUnavailableError,
    EmptyContentError,
    InvalidScopeError,
    UnsafeAgentNameError,
)
from oryxmem.store.db import connect
from oryxmem.workspace import Workspace

TS = "2026-07-22 09:30:00"


@pytest.fixture
def running(workspace: Workspace, tmp_path: Path) -> Iterator[RunningDaemon]:
    """A daemon of this test's own, for tests that look at the whole workspace or stop it."""
    set_value(workspace.config_path, "daemon.client_timeout_seconds", "1")
    with daemon(workspace, tmp_path / "daemon.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """One daemon for the tests that only need one running: each uses agents of its own
    (bad input is sent to 'untouched', which nothing ever creates)."""
    with daemon_on_new_workspace(tmp_path_factory.mktemp("shared"), client_timeout=1) as proc:
        yield proc


def test_every_route_with_curl_and_the_client_while_files_and_rows_change(
    workspace: Workspace, running: RunningDaemon
) -> None:
    status, health = running.curl("http://x/api/v1/health")
    assert status == 200 and health["code"] == 0 and health["data"]["watcher_alive"]
    assert set(health) == {"code", "message", "data", "timestamp"}
    status, saved = running.curl(
        "-X",
        "POST",
        "-d",
        '{"content": "User is Ada.", "scope": "core"}',
        "http://x/api/v1/agents/coder/memory",
    )
    assert status == 200 and saved["data"]["entry"]["scope"] == "core"
    # Durable in MEMORY.md when acknowledged; the rows follow right after the reply.
    assert "User is Ada." in workspace.memory_path("coder").read_text()
    wait_until(lambda: disagreements(workspace) == [])
    # A human edits the file; another program inserts a row.
    with open(workspace.memory_path("coder"), "a") as handle:
        handle.write(f"- [{TS}] typed in an editor about pytest\n")
    sql(
        workspace,
        "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'pytest row from sql')",
    )
    with Client(running.socket) as client:
        wait_until(lambda: len(client.recall("coder", "PYTEST")["lines"]) == 2)
        assert client.context("coder")["context"].startswith("## 核心记忆\n- [")
        memory = client.memory("coder")
        assert [e["content"] for e in memory["core"]] == ["User is Ada."]
        assert memory["markdown"] == workspace.memory_path("coder").read_text()
        footprint = client.trigger("coder", "fix   the CI", "pinned\npytest")
        assert footprint["entry"]["content"] == 'trigger: user="fix the CI" reply="pinned pytest"'
        assert {a["agent"] for a in client.agents()} >= {"", "coder"}
        session = client.create_session("coder")["id"]
        client.append_message(session, "user", "hello")
        client.append_message(session, "assistant", "hi")
        assert [m["content"] for m in client.session_messages(session)["messages"]] == [
            "hello",
            "hi",
        ]
        with_history = client.context("coder", session=session)
        assert len(with_history["history"]) == 2
        tool = client.save_memory_tool({"content": "tool save", "scope": "archival"}, agent="coder")
        assert tool["agent"] == "coder"
        found = client.recall_memory_tool({"keyword": "tool"}, agent="coder")
        assert found["lines"][0].endswith("tool save")
        glob = client.save(None, "for everyone")
        assert glob["agent"] == "" and "for everyone" in client.recall(None, "everyone")["lines"][0]
    status, agents = running.curl("http://x/api/v1/agents")
    assert status == 200 and {"", "coder"} <= {a["agent"] for a in agents["data"]}
    status, recall = running.curl("http://x/api/v1/memory/recall?keyword=everyone")
    assert recall["data"]["lines"]
    wait_until(lambda: disagreements(workspace) == [])
    db = connect(workspace.db_path)
    calls = "SELECT tool, agent, ok, input FROM tool_invocations ORDER BY id"
    wait_until(lambda: len(db.execute(calls).fetchall()) >= 2)  # with the next mirror
    tools = db.execute(calls).fetchall()
    assert [(t[0], t[1], t[2]) for t in tools] == [
        ("save_memory", "coder", 1),
        ("recall_memory", "coder", 1),
    ]
    assert json.loads(tools[0][3]) == {"content": "tool save", "scope": "archival"}
    sources = {row[0] for row in db.execute("SELECT source FROM memory_history WHERE op = 'add'")}
    assert "socket" in sources


@pytest.mark.parametrize(
    ("args", "status", "code"),
    [
        (["-d", "{not json", "http://x/api/v1/agents/untouched/memory"], 400, 1001),
        (["-d", "[1, 2]", "http://x/api/v1/agents/untouched/memory"], 400, 1002),
        (["-d", '{"content": 7}', "http://x/api/v1/agents/untouched/memory"], 400, 1002),
        (["-d", '{"scope": "core"}', "http://x/api/v1/agents/untouched/memory"], 400, 1002),
        (
            ["-d", '{"content": "x", "scope": "nope"}', "http://x/api/v1/agents/untouched/memory"],
            400,
            1003,
        ),
        (["-d", '{"content": "  "}', "http://x/api/v1/agents/untouched/memory"], 400, 1004),
        (["-d", '{"content": "a\\u0000b"}', "http://x/api/v1/agents/untouched/memory"], 400, 1005),
        (
            ["-d", json.dumps({"content": "x" * 40000}), "http://x/api/v1/agents/untouched/memory"],
            413,
            1006,
        ),
        (
            ["--path-as-is", "-d", '{"content": "x"}', "http://x/api/v1/agents/..hidden/memory"],
            400,
            1008,
        ),
        (["-d", '{"content": "x"}', "http://x/api/v1/agents/.hidden/memory"], 400, 1008),
        (["-d", '{"content": "x"}', "http://x/api/v1/agents/a%00b/memory"], 400, 1008),
        (["http://x/api/v1/agents/untouched/memory/recall?keyword="], 400, 1009),
        (["http://x/api/v1/nothing/here"], 404, 1011),
        (["-X", "DELETE", "http://x/api/v1/agents/untouched/memory"], 405, 1012),
        (["-X", "PUT", "http://x/api/v1/health"], 405, 1012),
        (["http://x/api/v1/sessions/nope/history"], 404, 1013),
        (
            ["-d", '{"role": "robot", "content": "x"}', "http://x/api/v1/sessions/nope/messages"],
            400,
            1014,
        ),
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(
    shared: RunningDaemon, args: list[str], status: int, code: int
) -> None:
    got_status, reply = shared.curl(*args)
    assert (got_status, reply["code"]) == (status, code), reply
    assert reply["message"] and isinstance(reply["timestamp"], int)
    assert not shared.workspace.memory_path("untouched").exists()
    assert shared.curl("http://x/api/v1/health")[0] == 200


def test_body_over_one_mebibyte_is_refused(shared: RunningDaemon, tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"content": "y" * (1024 * 1024 + 10)}))
    status, reply = shared.curl("-d", f"@{big}", "http://x/api/v1/agents/untouched/memory")
    assert (status, reply["code"]) == (413, 1007)
    assert not shared.workspace.memory_path("untouched").exists()


@pytest.mark.parametrize("link", ["folder", "memory-file"])
def test_an_agent_whose_folder_or_file_is_a_symbolic_link_is_refused_on_every_route(
    shared: RunningDaemon, tmp_path: Path, link: str
) -> None:
    """The name is fine; the filesystem check runs on the memory thread, for each route."""
    workspace, running, sneaky = shared.workspace, shared, f"sneaky-{link}"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "MEMORY.md").write_text("## 核心记忆\n\n## 归档记忆\n- [2026-07-22 09:30:00] x\n")
    before = (outside / "MEMORY.md").read_bytes()
    if link == "folder":
        (workspace.agents_dir / sneaky).symlink_to(outside, target_is_directory=True)
    else:
        (workspace.agents_dir / sneaky).mkdir()
        (workspace.agents_dir / sneaky / "MEMORY.md").symlink_to(outside / "MEMORY.md")
    base = f"http://x/api/v1/agents/{sneaky}"
    try:
        refused_on_every_route(running, base, sneaky, link)
    finally:  # the shared workspace goes on without it
        link_path = workspace.agents_dir / sneaky
        link_path.unlink() if link == "folder" else shutil.rmtree(link_path)
    assert (outside / "MEMORY.md").read_bytes() == before


def refused_on_every_route(running: RunningDaemon, base: str, sneaky: str, link: str) -> None:
    for args in (
        ["-d", '{"content": "through the link"}', f"{base}/memory"],
        ["-d", '{"user_message": "a", "reply": "b"}', f"{base}/triggers"],
        [f"{base}/memory"],
        [f"{base}/memory/recall?keyword=x"],
        [f"{base}/context"],
    ):
        status, reply = running.curl(*args)
        assert (status, reply["code"]) == (400, 1008), (args, reply)
        assert "symbolic link" in reply["message"]
    with Client(running.socket) as client:
        with pytest.raises(UnsafeAgentNameError, match="symbolic link"):
            client.save(sneaky, "through the client")
        client.save(f"after-{link}", "still serving")


def test_client_raises_the_library_errors(shared: RunningDaemon) -> None:
    with Client(shared.socket) as client:
        with pytest.raises(EmptyContentError):
            client.save("untouched", "")
        with pytest.raises(InvalidScopeError):
            client.save("untouched", "x", scope="nope")
        with pytest.raises(ContentTooLongError):
            client.save("untouched", "z" * 40000)
        with pytest.raises(UnsafeAgentNameError):
            client.save(".x", "y")
        assert client.health()["status"] == "ok"


@pytest.mark.parametrize(
    "half",
    [
        b"POST /api/v1/agents/untouched/memory HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
        b"POST /api/v1/agents/untouched/memory HTTP/1.1\r\nHost: x\r\nContent-Le",
    ],
    ids=["body-stalls", "headers-stall"],
)
def test_a_stalled_half_request_is_closed_without_blocking_others(
    shared: RunningDaemon, half: bytes
) -> None:
    workspace, running = shared.workspace, shared
    stalled = socket.socket(socket.AF_UNIX)
    stalled.connect(str(running.socket))
    stalled.sendall(half)
    started = time.monotonic()
    assert running.curl("http://x/api/v1/health")[0] == 200  # others are served meanwhile
    stalled.settimeout(15)
    received = b""
    while chunk := stalled.recv(4096):  # read until the daemon closes the connection
        received += chunk
    closed_after = time.monotonic() - started
    stalled.close()
    assert closed_after < 5, "client_timeout_seconds is 1 in this test"
    if b"\r\n\r\n" in half:
        assert b" 408 " in received.split(b"\r\n")[0] and b'"code": 1016' in received
    assert not workspace.memory_path("untouched").exists()
    assert running.curl("http://x/api/v1/health")[0] == 200


def test_two_hundred_connections_at_once(shared: RunningDaemon) -> None:
    workspace, running = shared.workspace, shared
    results: list[int] = []
    lock = threading.Lock()

    def one(n: int) -> None:
        with Client(running.socket) as client:
            client.save(f"crowd{n % 4}", f"concurrent {n}")
            with lock:
                results.append(n)

    all_done([Background(one, n) for n in range(200)])
    assert sorted(results) == list(range(200))
    wait_until(lambda: disagreements(workspace) == [])
    total = sum(
        len(
            connect(workspace.db_path)
            .execute("SELECT 1 FROM memory_entries WHERE agent = ?", [f"crowd{a}"])
            .fetchall()
        )
        for a in range(4)
    )
    assert total == 200


def test_saves_under_load_are_mirrored_by_the_writer_not_by_reconciles(
    shared: RunningDaemon,
) -> None:
    """The rows follow saves without waking the sync thread: no reconcile per save
    (each would hold the file's lock and parse it), and none that feeds the next."""

    workspace, running = shared.workspace, shared
    with Client(running.socket) as client:
        before = client.health()

    def client_saves(n: int) -> None:
        with Client(running.socket) as client:
            for i in range(60):
                client.save(f"load{n % 4}", f"load {n} {i}")

    all_done([Background(client_saves, n) for n in range(16)])
    wait_until(lambda: disagreements(workspace) == [])
    with Client(running.socket) as client:
        health = client.health()
    assert health["saves"] - before["saves"] == 960
    reconciles = health["reconciles"] - before["reconciles"]
    assert reconciles <= 8, health  # not one per save, nor a chain of them


def test_socket_is_private_and_removed_on_sigterm(running: RunningDaemon) -> None:
    assert stat.S_IMODE(running.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(running.socket.parent.stat().st_mode) == 0o700
    assert running.stop() == 0
    assert not running.socket.exists()
    assert "stopped" in running.text()


def test_a_second_daemon_for_the_workspace_exits_with_a_clear_message(
    shared: RunningDaemon,
) -> None:
    env = {**os.environ, "ORYXMEM_ROOT": str(shared.workspace.root)}
    done = subprocess.run(
        [sys.executable, "-m", "oryxmem", "daemon"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 1
    assert "already serves" in done.stderr and "Traceback" not in done.stderr


def test_a_stale_socket_is_replaced(workspace: Workspace, tmp_path: Path) -> None:
    path = Path(os.environ["ORYXMEM_SOCKET"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a socket file nobody answers on, as a crash leaves it
    with daemon(workspace, tmp_path / "d.log") as running:
        assert running.curl("http://x/api/v1/health")[0] == 200


def test_a_live_socket_of_another_process_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    path = Path(os.environ["ORYXMEM_SOCKET"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    other = socket.socket(socket.AF_UNIX)
    other.bind(str(path))
    other.listen(1)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "oryxmem", "daemon"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 1 and "already answers on" in done.stderr
    finally:
        other.close()


def test_a_socket_path_over_108_bytes_is_a_clear_error(workspace: Workspace) -> None:
    long_path = "/tmp/" + "x" * 110 + ".sock"
    done = subprocess.run(
        [sys.executable, "-m", "oryxmem", "daemon"],
        capture_output=True,
        text=True,
        env={**os.environ, "ORYXMEM_SOCKET": long_path},
        timeout=60,
    )
    assert done.returncode == 1 and "Unix sockets allow 107" in done.stderr


def _as_nobody() -> None:
    os.setgid(65534)
    os.setuid(65534)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as nobody")
def test_a_peer_of_another_uid_is_refused(running: RunningDaemon) -> None:
    # The 0700 directory and the 0600 socket keep it out...
    done = subprocess.run(
        ["curl", "-s", "--unix-socket", str(running.socket), "http://x/api/v1/health"],
        preexec_fn=_as_nobody,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0 and '"code": 0' not in done.stdout
    # ...and with the permissions opened, SO_PEERCRED still does.
    os.chmod(running.socket.parent, 0o711)
    os.chmod(running.socket, 0o666)
    done = subprocess.run(
        [
            "curl",
            "-s",
            "-w",
            "\n%{http_code}",
            "--unix-socket",
            str(running.socket),
            "http://x/api/v1/health",
        ],
        preexec_fn=_as_nobody,
        capture_output=True,
        text=True,
        timeout=30,
    )
    body, _, status = done.stdout.rpartition("\n")
    assert status == "403" and json.loads(body)["code"] == 1015
    assert running.curl("http://x/api/v1/health")[0] == 200


def test_systemd_notify_and_socket_activation(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notify_path = tmp_path / "notify.sock"
    notifications = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notifications.bind(str(notify_path))
    notifications.settimeout(30)
    listener = socket.socket(socket.AF_UNIX)
    activated_path = Path(os.environ["ORYXMEM_SOCKET"]).with_name("activated.sock")
    listener.bind(str(activated_path))
    listener.listen(16)
    fd = listener.fileno()

    def hand_over() -> None:  # what systemd does: the socket is fd 3, LISTEN_PID is us
        if fd != 3:
            os.dup2(fd, 3)
        os.set_inheritable(3, True)
        os.putenv("LISTEN_PID", str(os.getpid()))

    for name, value in {
        "ORYXMEM_ROOT": str(workspace.root),
        "NOTIFY_SOCKET": str(notify_path),
        "WATCHDOG_USEC": "400000",
        "LISTEN_FDS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    log = tmp_path / "activated.log"

    def next_with(word: str) -> str:
        while True:
            message = notifications.recv(4096).decode()
            if word in message:
                return message

    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "oryxmem", "daemon"],
            stdout=out,
            stderr=subprocess.STDOUT,
            close_fds=False,  # subprocess would close our fd 3 after preexec_fn
            preexec_fn=hand_over,
        )
    try:
        status = next_with("STATUS=")
        ready = next_with("READY=1")
        assert "catching up" in status and f"serving on {activated_path}" in ready
        with Client(activated_path) as client:
            assert client.health()["socket"] == str(activated_path)
        next_with("WATCHDOG=1")
        proc.send_signal(15)
        next_with("STOPPING=1")
        assert proc.wait(timeout=30) == 0, log.read_text()
        assert activated_path.exists(), "an activated socket belongs to systemd; it stays"
    finally:
        if proc.poll() is None:
            proc.kill()
        listener.close()
        notifications.close()


def test_cli_falls_back_to_the_stores_when_no_daemon_answers(workspace: Workspace) -> None:
    from support.processes import run_cli

    path = Path(os.environ["ORYXMEM_SOCKET"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()
    done = run_cli("save", "-a", "coder", "no daemon here")
    assert done.returncode == 0, done.stderr
    assert "no daemon here" in workspace.memory_path("coder").read_text()
    status = run_cli("status")
    assert "not running" in status.stdout
    with pytest.raises(DaemonUnavailableError):
        Client(path).health()


def test_a_socket_in_a_shared_directory_leaves_its_mode_alone(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Regression: the daemon once chmod'ed the existing parent of its socket to 0700,
    which turned /tmp private when the socket was put there."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    sock = shared / "s.sock"
    with daemon(workspace, tmp_path / "d.log", env={"ORYXMEM_SOCKET": str(sock)}) as running:
        assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert running.curl("http://x/api/v1/health")[0] == 200


def test_cli_through_the_daemon_falls_back_on_unsafe_names_like_without(
    shared: RunningDaemon,
) -> None:
    from support.processes import run_cli

    env = {"ORYXMEM_ROOT": str(shared.workspace.root), "ORYXMEM_SOCKET": str(shared.socket)}
    done = run_cli("save", "--agent", "../x", "where does this go?", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("saved to the global memory file")
    assert "warning: unsafe agent name '../x'" in done.stderr
    assert "where does this go?" in shared.workspace.memory_path("").read_text()
    recalled = run_cli("recall", "--agent", "../x", "where", env=env)
    assert recalled.stdout.strip().endswith("where does this go?")


def test_default_socket_path(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    from oryxmem.config import Config
    from oryxmem.workspace import socket_path

    config = Config.load(workspace.config_path)
    monkeypatch.delenv("ORYXMEM_SOCKET")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    expected = Path(f"/run/user/1000/oryxmem/{workspace.workspace_id}.sock")
    assert socket_path(workspace, config) == expected
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    expected = Path(f"/tmp/oryxmem-{os.getuid()}/{workspace.workspace_id}.sock")
    assert socket_path(workspace, config) == expected
    monkeypatch.setenv("ORYXMEM_SOCKET", "/tmp/elsewhere.sock")
    assert socket_path(workspace, config) == Path("/tmp/elsewhere.sock")


def test_hundreds_of_agents_with_a_low_open_file_limit(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Each agent it writes keeps a lock file (and its MEMORY.md) open: the daemon raises
    its soft limit on open files to the hard one, as a service that needs them should."""
    import resource

    def low_limit() -> None:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        )

    with daemon(workspace, tmp_path / "daemon.log", preexec_fn=low_limit) as running:
        with Client(running.socket) as client:
            for n in range(300):
                client.save(f"agent{n:03d}", f"fact {n}")
        wait_until(lambda: disagreements(workspace) == [], timeout=60)


def test_an_inotify_queue_overflow_is_caught_by_a_rescan_at_once(
    workspace: Workspace, running: RunningDaemon
) -> None:
    """More file events than the kernel queues, while the daemon cannot read them; the
    one that mattered (a human edit) is lost as an event, and must still arrive well
    before the periodic rescan (24 to 36 s)."""
    import signal as signals

    with Client(running.socket) as client:
        client.save("coder", "before the storm")
    wait_until(lambda: disagreements(workspace) == [])
    with Client(running.socket) as client:
        scratch = watched_scratch_folder(workspace, lambda: int(client.health()["reconciles"]))
    running.proc.send_signal(signals.SIGSTOP)
    try:
        storm_of_events(scratch)  # the queue overflows
        with open(workspace.memory_path("coder"), "a", encoding="utf-8") as handle:
            handle.write(f"- [{TS}] typed during the storm\n")  # its event is dropped
    finally:
        running.proc.send_signal(signals.SIGCONT)
    wait_until(lambda: disagreements(workspace) == [], timeout=15)
    with Client(running.socket) as client:
        assert client.health()["event_overflows"] >= 1
        assert client.recall("coder", "during the storm")["lines"][0].endswith("during the storm")


def hung_up(client: Client) -> bool:
    """Has the daemon closed the client's kept-alive connection (EOF waiting to be read)?"""
    import select

    assert client._conn is not None
    sock = client._conn.sock
    if not select.select([sock], [], [], 0)[0]:
        return False
    return sock.recv(1, socket.MSG_PEEK) == b""


def test_the_client_reconnects_when_the_daemon_closed_an_idle_connection(
    shared: RunningDaemon,
) -> None:
    workspace, running = shared.workspace, shared
    with Client(running.socket) as client:
        client.save("pause", "before the pause")
        # Idle past daemon.client_timeout_seconds (1 here): the daemon hangs up.
        wait_until(lambda: hung_up(client), timeout=10)
        client.save("pause", "after the pause")
    wait_until(lambda: disagreements(workspace) == [])
    text = workspace.memory_path("pause").read_text()
    assert text.count("before the pause") == 1 and text.count("after the pause") == 1


def test_the_client_never_sends_a_save_twice(tmp_path: Path) -> None:
    """A daemon that takes the whole request and dies before answering: the save may have
    been stored, so the client says so instead of sending it again; a GET it asks again."""
    path = str(tmp_path / "s.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen()
    requests: list[bytes] = []

    def take_and_hang_up() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(
                next(
                    (
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    b"0",
                )
            )
            while len(body) < length:
                body += conn.recv(65536)
            requests.append(head.split(b"\r\n")[0])
            conn.close()

    threading.Thread(target=take_and_hang_up, daemon=True).start()
    with Client(path, timeout=5) as client:
        with pytest.raises(DaemonUnavailableError, match="may or may not"):
            client.save("coder", "once")
        assert requests == [b"POST /api/v1/agents/coder/memory HTTP/1.1"]
        with pytest.raises(DaemonUnavailableError):
            client.recall("coder", "once")
        assert len(requests) == 3  # the GET went out twice
    server.close()


def without_file_permission_override() -> tuple[str, ...]:
    """A daemon that file modes bind: root's DAC override dropped (as any user has)."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run the daemon as root without DAC override")
    return ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")


def test_a_memory_file_the_daemon_may_not_read_is_that_agents_409_and_listed_until_fixed(
    workspace: Workspace, tmp_path: Path
) -> None:
    from support.processes import run_cli

    assert run_cli("save", "--agent", "locked", "hello").returncode == 0
    assert run_cli("save", "--agent", "open", "hello").returncode == 0
    path = workspace.memory_path("locked")
    path.chmod(0)
    prefix = without_file_permission_override()
    with daemon(workspace, tmp_path / "daemon.log", prefix=prefix) as running:
        for args in (
            ("http://x/api/v1/agents/locked/memory",),
            ("-d", '{"content": "x"}', "http://x/api/v1/agents/locked/memory"),
        ):
            status, reply = running.curl(*args)
            assert (status, reply["code"]) == (409, 2002), reply
            assert "permission denied" in reply["message"]
        assert (
            running.curl("-d", '{"content": "y"}', "http://x/api/v1/agents/open/memory")[0] == 200
        )

        def problems() -> list[dict[str, str]]:
            return list(running.curl("http://x/api/v1/health")[1]["data"]["sync"]["problems"])

        wait_until(lambda: any(p["agent"] == "locked" for p in problems()))
        assert problems()[0]["status"] == "unreadable"
        assert "locked: unreadable:" in run_cli("status").stdout
        path.chmod(0o644)
        wait_until(lambda: not problems(), timeout=60)
        assert running.curl("http://x/api/v1/agents/locked/memory")[0] == 200
