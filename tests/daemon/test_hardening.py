"""Issue 15: what broke when the daemon was tried as an attacker and a careless user
would, each test named after what broke, with the real daemon, real files and a real
socket; the daemon answers health after each."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.daemon import RunningDaemon, daemon
from support.processes import run_cli
from support.sync import sql, write_lock_held

from oryxmem.daemon import worker as worker_module
from oryxmem.daemon.worker import MemoryWorker
from oryxmem.errors import StorageError
from oryxmem.service import MemoryService, SaveRequest
from oryxmem.store.sessions import tool_record
from oryxmem.workspace import Workspace, agent_name_problem, resolve_agent

FOUR_BYTE = "%F0%A0%80%80"  # U+20000, a CJK letter of four bytes in UTF-8


@pytest.fixture
def running(workspace: Workspace, tmp_path: Path) -> Iterator[RunningDaemon]:
    with daemon(workspace, tmp_path / "daemon.log") as proc:
        yield proc


def eventually(workspace: Workspace, statement: str, expected: str, seconds: float) -> None:
    """Until the sqlite3 shell's answer to statement is expected (fails after seconds)."""
    deadline = time.monotonic() + seconds
    while (got := sql(workspace, statement).strip()) != expected:
        assert time.monotonic() < deadline, f"{statement!r} gave {got!r}, not {expected!r}"
        time.sleep(0.1)


def healthy(running: RunningDaemon) -> dict[str, Any]:
    status, reply = running.curl("http://x/api/v1/health", timeout=10)
    assert status == 200, reply
    data: dict[str, Any] = reply["data"]
    return data


def save_to(running: RunningDaemon, agent: str, content: str = "x") -> tuple[int, dict[str, Any]]:
    body = json.dumps({"content": content})
    return running.curl("-d", body, f"http://x/api/v1/agents/{agent}/memory", timeout=10)


# --- A. Nothing wedges the daemon -----------------------------------------------------


def test_a_name_of_64_four_byte_letters_no_longer_kills_the_memory_thread(
    running: RunningDaemon,
) -> None:
    for letters in (64, 62, 33):
        status, reply = save_to(running, FOUR_BYTE * letters)
        assert (status, reply["code"]) == (400, 1008), reply
        assert "bytes" in reply["message"]
    status, reply = save_to(running, FOUR_BYTE * 32)  # 128 bytes: every derived name fits
    assert status == 200, reply
    assert healthy(running)["memory_thread_alive"] is True


def test_an_unexpected_error_in_the_memory_thread_fails_only_that_request(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an OSError from the folder check did (the thread died, every later request
    hung), for any exception: that request fails, the next one is served."""
    worker = MemoryWorker(service, on_lagging=lambda agent: None)
    worker.start()
    try:
        real = service.saving.prepare_batch

        def broken(ref: Any, requests: Any) -> Any:
            if ref.agent == "doomed":
                raise OSError(36, "File name too long")
            return real(ref, requests)

        monkeypatch.setattr(service.saving, "prepare_batch", broken)
        failed = worker.save(service.resolve("doomed"), SaveRequest("x"))
        with pytest.raises(OSError, match="File name too long"):
            failed.result(timeout=10)
        assert worker.save(service.resolve("fine"), SaveRequest("y")).result(timeout=10)
        assert worker.call(lambda s: 42).result(timeout=10) == 42
        assert worker.alive
    finally:
        worker.stop()


def test_a_memory_thread_stuck_in_a_call_stops_the_watchdog_and_health_still_answers(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_module, "STUCK_SECONDS", 0.3)
    worker = MemoryWorker(service, on_lagging=lambda agent: None)
    worker.start()
    release = threading.Event()
    try:
        held = worker.call(lambda s: release.wait(30))
        time.sleep(0.6)
        assert not worker.alive and worker.busy_seconds > 0.3  # the watchdog stops pinging
        release.set()
        held.result(timeout=10)
        assert worker.alive
    finally:
        release.set()
        worker.stop()


def test_the_indexes_take_rows_in_while_another_program_holds_the_rows_lock(
    service: MemoryService, workspace: Workspace
) -> None:
    """The indexes are written in their own file: while another program holds the rows'
    write lock (and a mirror would wait for it), the memory thread's index step still
    takes in the rows that program wrote before, and waits for nothing."""
    worker = MemoryWorker(service, on_lagging=lambda agent: None)
    _ = service.db  # made and migrated
    sql(workspace, "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'kettle note')")
    keyword = service.upkeep.indexes["keyword"]
    with write_lock_held(workspace.db_path):
        worker._index_step()
        assert service.upkeep.words_caught_up()
        assert keyword.search(service.index_db, "coder", "kettle", None) != []


def test_the_indexes_follow_a_reconcile_at_once_and_a_save_s_mirror_first(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program's write is taken in by the daemon in one burst: after the reconcile,
    the indexes' step comes at once, not once the thread has been idle a while (when that
    program may be writing again). With saves waiting, their mirror (which the indexes
    follow) comes first."""
    monkeypatch.setattr(worker_module, "INDEX_IDLE_SECONDS", 3600.0)  # no step when idle
    monkeypatch.setattr(worker_module, "INDEX_MAX_LAG_SECONDS", 3600.0)  # nor under load
    worker = MemoryWorker(service, on_lagging=lambda agent: None)
    order: list[str] = []
    real_mirror = service.saving.mirror_saves

    def mirror(**kwargs: Any) -> list[str]:
        order.append("mirror")
        return real_mirror(**kwargs)

    def follow() -> int:
        order.append("follow")
        return 0

    monkeypatch.setattr(service.saving, "mirror_saves", mirror)
    monkeypatch.setattr(service.upkeep, "follow_saves", follow)
    worker.start()
    try:
        worker.call(lambda s: None).result(timeout=30)
        order.clear()
        worker.indexes_changed()  # a reconcile changed rows
        worker.call(lambda s: None).result(timeout=30)
        worker.call(lambda s: None).result(timeout=30)  # a batch after the wake's: it is done
        assert order == ["follow"]
        order.clear()
        worker.save(service.resolve("coder"), SaveRequest("a save")).result(timeout=30)
        worker.indexes_changed()
        worker.flush()
        assert order[0] == "mirror"
    finally:
        worker.stop()


def test_a_call_mirrors_the_saves_first_but_not_tool_records_alone(
    service: MemoryService,
) -> None:
    """A reader must see every acknowledged save, so a call mirrors them first; a tool
    call's record alone is read by no call and waits for its mirror's own time (every
    recall tool call committed the previous call's record before it searched)."""
    worker = MemoryWorker(service, on_lagging=lambda agent: None)
    worker.start()
    calls = "SELECT tool FROM tool_invocations"
    try:
        worker.record_tool(tool_record("recall_memory", "coder", None, {}, {}, True, 1.0))
        seen = worker.call(lambda s: s.db.execute(calls).fetchall()).result(timeout=30)
        assert seen == []  # the record still waits
        saved = worker.save(service.resolve("coder"), SaveRequest("a save", "archival", "test"))
        saved.result(timeout=30)  # acknowledged: durable in MEMORY.md, not yet in the rows
        seen = worker.call(lambda s: s.db.execute(calls).fetchall()).result(timeout=30)
        assert seen == [("recall_memory",)]  # mirrored with the save, before the call
        entries = "SELECT content FROM memory_entries"
        rows = worker.call(lambda s: s.db.execute(entries).fetchall()).result(timeout=30)
        assert ("a save",) in rows
    finally:
        worker.stop()


def test_health_answers_while_another_program_holds_the_database_locked(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """A3: a database locked by another program may delay the rows, never health."""
    with write_lock_held(workspace.db_path):
        started = time.monotonic()
        data = healthy(running)
        assert time.monotonic() - started < 5, data
    assert healthy(running)["memory_thread_alive"] is True


def test_a_tool_call_is_answered_before_its_record_and_the_record_waits_out_a_lock(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """The record of a tool call is not between the call and its answer: with another
    program holding the write lock the save is answered and its record waits, queued,
    then lands once the lock goes (it is not dropped after a busy timeout)."""
    calls = "SELECT tool, agent, ok FROM tool_invocations"
    with write_lock_held(workspace.db_path) as holder:
        body = json.dumps({"content": "answered under a lock", "agent": "coder"})
        status, reply = running.curl("-d", body, "http://x/api/v1/tools/save_memory", timeout=30)
        assert status == 200, reply
        assert holder.poll() is None  # answered while the lock is held
        assert sql(workspace, calls) == ""  # (readers read on: WAL) the record waits
        time.sleep(1.5)  # longer than the mirror's most: it tried, met the lock, kept it
    eventually(workspace, calls, "save_memory|coder|1", 30)
    assert "answered under a lock" in workspace.memory_path("coder").read_text()
    assert healthy(running)["memory_thread_alive"] is True


def test_saves_under_another_program_s_lock_are_answered_and_their_rows_follow_it(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """Every save is answered while another program holds the write lock; the mirror
    meets that lock (said once, as another program's), never the daemon's own threads'
    (an expected wait, said nothing of), and the rows come once it goes."""
    with write_lock_held(workspace.db_path) as holder:
        for n in range(20):
            body = json.dumps({"content": f"saved under a lock {n}"})
            status, reply = running.curl("-d", body, "http://x/api/v1/agents/coder/memory")
            assert status == 200, reply
        time.sleep(1.5)  # the mirror came due and met the lock
        assert holder.poll() is None
    eventually(
        workspace,
        "SELECT count(*) FROM memory_entries WHERE content LIKE 'saved under a lock %'",
        "20",
        30,
    )
    log = running.text()
    assert log.count("the database is locked by another program; the rows wait") == 1, log
    assert "another thread of this process" not in log and "Traceback" not in log


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket"])
def test_a_fifo_directory_or_socket_where_memory_md_should_be_is_a_409_not_a_hang(
    running: RunningDaemon, workspace: Workspace, kind: str, tmp_path: Path
) -> None:
    folder = workspace.agents_dir / f"odd-{kind}"
    folder.mkdir()
    target = folder / "MEMORY.md"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    else:  # a socket's inode, as bind() leaves one (the path is too long to bind here)
        os.mknod(target, 0o600 | stat.S_IFSOCK)
    for args in (
        ["-d", '{"content": "x"}', f"http://x/api/v1/agents/odd-{kind}/memory"],
        [f"http://x/api/v1/agents/odd-{kind}/memory"],
        [f"http://x/api/v1/agents/odd-{kind}/context"],
    ):
        status, reply = running.curl(*args, timeout=10)
        assert (status, reply["code"]) == (409, 2002), reply
        assert "not a regular file" in reply["message"]
    assert healthy(running)["memory_thread_alive"] is True
    assert save_to(running, "neighbour")[0] == 200  # the others are served
    deadline = time.monotonic() + 30
    while "not a regular file" not in (status := run_cli("status").stdout):
        assert time.monotonic() < deadline, status  # status lists it, as it lists garbage
        time.sleep(0.2)
    assert f"odd-{kind}: unreadable" in status


def test_rounds_of_several_agents_are_written_the_way_that_cost_less_per_save_lately() -> None:
    pace = worker_module._Pace()
    assert pace.side_by_side(now=100.0) is True  # each way is measured once first
    pace.took(True, 0.004, 4)
    assert pace.side_by_side(now=100.1) is False
    pace.took(False, 0.002, 4)
    # The dearer way is tried once every PACE_TRY_SECONDS (counted from when both were
    # first measured), to notice a change of the disk.
    every = worker_module.PACE_TRY_SECONDS
    clock = [100.125 + n * every / 8 for n in range(20)]
    chosen = [pace.side_by_side(now) for now in clock]
    assert [n for n, way in enumerate(chosen) if way] == [8, 16]
    pace.took(True, 0.004, 4)
    pace.took(True, 0.400, 4)  # one round the scheduler held up does not turn it
    pace.took(False, 0.002, 4)
    assert pace.side_by_side(now=clock[-1]) is False
    for _ in range(worker_module.PACE_SAMPLES):  # the disk slows down: one after another
        pace.took(False, 0.040, 4)  # now costs far more
    assert [pace.side_by_side(now=clock[-1]) for _ in range(3)] == [True, True, True]
    pace.took(True, 0.0, 0)  # a round whose saves were all refused teaches nothing
    assert pace.per_save(True) == pytest.approx(0.001)


def test_a_round_of_several_agents_written_either_way_answers_each_once_it_is_durable(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways write the same, each agent's group answered as soon as its own append
    is durable: one after another, an agent is answered before the next is written.
    With a slow sync, side by side wins and is kept."""
    from oryxmem.store import answered

    real_sync = answered.os.fdatasync
    events: list[str] = []  # appended to by the writing threads

    def slow_sync(fd: int) -> None:
        time.sleep(0.03)  # a slow disk: each record's sync takes 30 ms
        real_sync(fd)

    real_write = service.saving.write_batch

    def write(batch: Any) -> None:
        events.append(f"write {batch.ref.agent}")
        real_write(batch)

    monkeypatch.setattr(answered.os, "fdatasync", slow_sync)
    monkeypatch.setattr(service.saving, "write_batch", write)
    agents = ["ann", "bob", "cat", "dan"]
    worker = MemoryWorker(service, on_lagging=lambda agent: None)
    worker.start()
    try:
        for round_ in range(6):
            gate, held = threading.Event(), threading.Event()

            def hold(
                _: MemoryService, gate: threading.Event = gate, held: threading.Event = held
            ) -> None:
                held.set()
                gate.wait(30)

            worker.call(hold)
            # The thread is in the call before any save is queued: the round's saves come
            # in one batch after it (not some of them in the call's own batch).
            assert held.wait(30)
            futures = []
            for agent in agents:
                future = worker.save(service.resolve(agent), SaveRequest(f"round {round_}"))
                future.add_done_callback(lambda _, agent=agent: events.append(f"answered {agent}"))
                futures.append(future)
            events.clear()
            gate.set()
            for future in futures:
                assert future.result(timeout=30).entry.content == f"round {round_}"
            if round_ == 1:  # the second round is written one after another
                assert events == [f"{step} {a}" for a in agents for step in ("write", "answered")]
        side, in_turn = worker._pace.per_save(True), worker._pace.per_save(False)
        assert side is not None and in_turn is not None and side < in_turn
    finally:
        worker.stop()
    for agent in agents:
        text = service.workspace.memory_path(agent).read_text()
        assert [f"round {n}" in text for n in range(6)] == [True] * 6


# --- B. Nothing in a workspace reaches outside it ---------------------------------------


def test_a_symlinked_daemon_lock_does_not_overwrite_its_target(
    workspace: Workspace, tmp_path: Path
) -> None:
    target = tmp_path / "bashrc"
    target.write_text("export PS1='$ '\n")
    workspace.run_dir.mkdir(parents=True, exist_ok=True)
    (workspace.run_dir / "daemon.lock").symlink_to(target)
    done = subprocess.run(
        [sys.executable, "-m", "oryxmem", "daemon"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ORYXMEM_ROOT": str(workspace.root)},
    )
    assert done.returncode != 0 and "symbolic link" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert target.read_text() == "export PS1='$ '\n"


def test_a_symlinked_agent_lock_does_not_get_the_journal_written_over_its_target(
    running: RunningDaemon, workspace: Workspace, tmp_path: Path
) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    workspace.locks_dir.mkdir(parents=True, exist_ok=True)
    workspace.lock_path("linked").symlink_to(target)
    status, reply = save_to(running, "linked")
    assert status == StorageError.http_status and reply["code"] == StorageError.code, reply
    assert target.read_text() == "keep me\n"
    assert healthy(running)["memory_thread_alive"] is True


def test_a_global_memory_md_symlinked_to_a_secret_is_neither_shown_nor_copied(
    running: RunningDaemon, workspace: Workspace, tmp_path: Path
) -> None:
    secret = tmp_path / "id_ed25519"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    path = workspace.global_memory_dir / "MEMORY.md"
    path.unlink(missing_ok=True)
    path.symlink_to(secret)
    status, reply = running.curl("http://x/api/v1/memory", timeout=10)
    assert status == 409 and "symbolic link" in reply["message"] and "secret" not in str(reply)
    status, reply = running.curl("-d", '{"content": "x"}', "http://x/api/v1/memory", timeout=10)
    assert status == 409, reply
    assert path.is_symlink() and "BEGIN OPENSSH" in secret.read_text()
    assert healthy(running)["memory_thread_alive"] is True


def test_a_hard_linked_memory_md_is_refused_for_writing(
    running: RunningDaemon, workspace: Workspace, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("## 核心记忆\n\n## 归档记忆\n")
    folder = workspace.agents_dir / "linked"
    folder.mkdir()
    os.link(outside, folder / "MEMORY.md")
    status, reply = save_to(running, "linked")
    assert (status, reply["code"]) == (409, 2002) and "hard links" in reply["message"], reply
    assert outside.read_text() == "## 核心记忆\n\n## 归档记忆\n"


# --- E. Names --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "usual, other",
    [
        ("한국", unicodedata.normalize("NFD", "한국")),
        ("\u00c5", "\u212b"),  # Å and the Angstrom sign
        ("K", "\u212a"),  # and the Kelvin sign
        ("fi", "\ufb01"),  # and the ligature
        ("café", unicodedata.normalize("NFD", "café")),
    ],
)
def test_two_names_that_look_the_same_never_become_two_agents(
    workspace: Workspace, usual: str, other: str
) -> None:
    assert agent_name_problem(usual) is None
    assert "NFKC" in (agent_name_problem(other) or "")
    done = run_cli("save", "--agent", other, "hello")
    assert done.returncode == 0 and "using the global memory file" in done.stderr
    assert not (workspace.agents_dir / other).exists()
    assert resolve_agent(workspace, other).fell_back


@pytest.mark.parametrize("name", ["\u3164", "\uffa0", "\u115f", "a\u3164b"])
def test_an_invisible_name_is_unsafe(name: str) -> None:
    assert "shows nothing" in (agent_name_problem(name) or "")


def test_a_save_is_acknowledged_at_once_while_another_program_holds_the_database(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """A3: the rows may wait for the lock; the acknowledgement never does."""
    assert save_to(running, "busy", "before")[0] == 200
    holder = subprocess.Popen(["sqlite3", str(workspace.db_path)], stdin=subprocess.PIPE, text=True)
    assert holder.stdin is not None
    holder.stdin.write("BEGIN EXCLUSIVE;\nSELECT 1;\n")
    holder.stdin.flush()
    time.sleep(0.5)
    try:
        for n in range(5):
            status, reply = save_to(running, "busy", f"during {n}")
            assert status == 200, reply
            # answered and in the file while its row cannot be committed yet
            assert f"] during {n}\n" in workspace.memory_path("busy").read_text()
            time.sleep(0.3)  # the mirror runs (and finds the lock) between saves
        healthy(running)
    finally:
        holder.stdin.write("COMMIT;\n.quit\n")
        holder.stdin.flush()
        holder.wait(timeout=30)
    # the rows catch up once the lock is gone
    eventually(workspace, "SELECT count(*) FROM memory_entries WHERE agent = 'busy'", "6", 30)


def test_a_socket_of_another_workspace_is_refused_not_written_to(
    running: RunningDaemon, workspace: Workspace, tmp_path: Path
) -> None:
    """B6: ORYXMEM_SOCKET naming workspace A's daemon, and --root B: nothing lands in A."""
    other = tmp_path / "other"
    other.mkdir()
    assert run_cli("--root", str(other), "init").returncode == 0
    done = run_cli("--root", str(other), "save", "--agent", "x", "hi")
    assert done.returncode == 1 and "serves" in done.stderr and str(workspace.root) in done.stderr
    assert not workspace.memory_path("x").exists()
    assert not (other / ".oryxos" / "agents" / "x").exists()
    assert run_cli("save", "--agent", "x", "hi").returncode == 0  # its own workspace: fine
    assert healthy(running)["memory_thread_alive"] is True


# --- D. Bad input is a 4xx in the envelope, never a 500 ---------------------------------


@pytest.mark.parametrize(
    "body, code",
    [
        ("[" * 100_000, 1001),  # was a RecursionError
        ('{"content": "x", "ignored": ' + "9" * 10_000 + "}", 1001),  # was a ValueError
        ('{"content": "x\\ud800y"}', 1005),
        ('{"content": "x\\u009b31m"}', 1005),  # a C1 control: a terminal's CSI
        ('{"content": "x\\u007f"}', 1005),
    ],
)
def test_a_body_that_raised_a_500_is_a_4xx_in_the_envelope_and_stores_nothing(
    running: RunningDaemon, workspace: Workspace, tmp_path: Path, body: str, code: int
) -> None:
    payload = tmp_path / "body.json"
    payload.write_text(body)
    status, reply = running.curl("-d", f"@{payload}", "http://x/api/v1/agents/bad/memory")
    assert 400 <= status < 500 and reply["code"] == code, reply
    assert not workspace.memory_path("bad").exists()
    assert "Traceback" not in running.text()
    assert healthy(running)["memory_thread_alive"] is True


def test_a_tool_call_with_a_lone_surrogate_agent_is_refused_and_stores_nothing(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """It answered 500 with "x" stored in the global file: a retry stored it twice."""
    body = '{"agent": "\\ud800", "content": "x"}'
    status, reply = running.curl("-d", body, "http://x/api/v1/tools/save_memory")
    assert (status, reply["code"]) == (400, 1005), reply
    global_file = workspace.global_memory_dir / "MEMORY.md"
    assert not global_file.exists() or "] x" not in global_file.read_text()
    assert "Traceback" not in running.text()


def test_a_lone_surrogate_sent_as_utf_8_bytes_is_refused_like_an_escaped_one(
    running: RunningDaemon, workspace: Workspace, tmp_path: Path
) -> None:
    """JSON read from bytes lets a UTF-8 encoded surrogate through (surrogatepass), here
    in a field no check of its own reads (the call is recorded as sent, and the record
    could never be written): a body that is not ASCII is looked through whole, as one
    with a \\u escape is."""
    payload = tmp_path / "body.json"
    payload.write_bytes(b'{"content": "x", "why": "\xed\xa0\x80"}')
    status, reply = running.curl(
        "--data-binary", f"@{payload}", "http://x/api/v1/tools/save_memory"
    )
    assert (status, reply["code"]) == (400, 1005), reply
    global_file = workspace.global_memory_dir / "MEMORY.md"
    assert not global_file.exists() or "] x" not in global_file.read_text()
    assert "Traceback" not in running.text()


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /api/v1/memory HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        b"GET /api/v1/health HTTP/1.1\r\nX-Secret: " + b"s3cret" * 11_000 + b"\r\n\r\n",
        b"\x16\x03\x01\x02\x00 my-private-memory \r\n\r\n",
    ],
    ids=["two-content-lengths", "64k-header", "garbage"],
)
def test_an_http_parser_error_gets_the_envelope_and_one_log_line_without_its_bytes(
    running: RunningDaemon, request_bytes: bytes
) -> None:
    reply = running.until_closed(request_bytes)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.split(b" ")[1].startswith(b"4"), head
    assert b"application/json" in head
    envelope = json.loads(body)
    assert envelope["code"] == 1019 and envelope["message"].startswith("malformed HTTP request")
    log = running.text()
    assert "Traceback" not in log and "s3cret" not in log and "my-private-memory" not in log
    assert log.count("refused a malformed request") >= 1
    assert healthy(running)["memory_thread_alive"] is True


def test_three_hundred_clients_connecting_at_once_are_all_served(running: RunningDaemon) -> None:
    """aiohttp's listen(128) replaced the socket's 512: 66 to 171 of 300 got EAGAIN."""
    script = f"""
import threading
from oryxmem.client import Client
ok, failed = [], []
start = threading.Barrier(300)
def one(n):
    start.wait()
    try:
        with Client({str(running.socket)!r}, timeout=60) as client:
            client.health()
        ok.append(n)
    except Exception as error:
        failed.append(repr(error))
threads = [threading.Thread(target=one, args=(n,)) for n in range(300)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len(ok), failed[:3])
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.startswith("300 []"), done.stdout + done.stderr


# --- E. Privacy and terminals -----------------------------------------------------------


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_memory_md_follows_the_umask_and_the_database_is_private_whatever_it_is(
    workspace: Workspace, tmp_path: Path, umask: int, expected: int
) -> None:
    """New MEMORY.md files were 0644 even under umask 077; under 022 the database, WAL
    and shm were 0644, and another uid read session messages from the WAL."""
    log = tmp_path / "d.log"
    with daemon(workspace, log, preexec_fn=lambda: os.umask(umask)) as running:
        assert save_to(running, "modes")[0] == 200
        assert running.curl("-d", '{"agent": "modes"}', "http://x/api/v1/sessions")[0] == 200
        for name in ("oryxos.db", "oryxos.db-wal", "oryxos.db-shm"):
            mode = stat.S_IMODE(os.stat(workspace.os_dir / name).st_mode)
            assert mode == 0o600, (name, oct(mode))
    assert stat.S_IMODE(os.stat(workspace.memory_path("modes")).st_mode) == expected


def test_an_existing_world_readable_database_is_made_private(workspace: Workspace) -> None:
    run_cli("save", "--agent", "a", "x")
    os.chmod(workspace.db_path, 0o644)
    run_cli("save", "--agent", "a", "y")
    assert stat.S_IMODE(os.stat(workspace.db_path).st_mode) == 0o600


TERMINAL_TRAPS = "\x1b]0;owned\x07 \x1b[2J \x7f \u009b31m \u009d0;t\u009c \u202etxt.exe"


def test_show_recall_and_context_never_print_terminal_controls_from_a_cloned_file(
    workspace: Workspace, tmp_path: Path
) -> None:
    path = workspace.memory_path("cloned")
    path.parent.mkdir(parents=True)
    path.write_text(
        "## 核心记忆\n- [2026-07-22 09:30:00] core " + TERMINAL_TRAPS + "\n\n"
        "## 归档记忆\n- [2026-07-22 09:30:00] note " + TERMINAL_TRAPS + "\n",
        encoding="utf-8",
    )
    raw = set("\x1b\x07\x7f\u009b\u009d\u009c\u202e")
    for command in (["show"], ["recall", "note"], ["context"]):
        for env in ({"ORYXMEM_NO_DAEMON": "1"},):
            done = run_cli(*command, "--agent", "cloned", env=env)
            assert done.returncode == 0, done.stderr
            assert not raw & set(done.stdout), (command, done.stdout)
            assert "\\x1b" in done.stdout and "\\u202e" in done.stdout
    with daemon(workspace, tmp_path / "d.log"):
        for command in (["show"], ["recall", "note"], ["context"]):
            done = run_cli(*command, "--agent", "cloned")
            assert done.returncode == 0 and not raw & set(done.stdout), done.stdout


# --- C. No edit silently lost, no deletion silently ignored -----------------------------


def test_a_row_with_agent_dot_dot_slash_x_is_quarantined_within_seconds(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """It stayed a plain row for 39 s (until a rescan); other bad rows took 3 s. The
    bound is under the rescan's (24 s at the soonest), so only the database check passes."""
    sql(
        workspace,
        "INSERT INTO memory_entries(agent, content) VALUES ('../x', 'escape'), ('ok', 'fine')",
    )
    eventually(workspace, "SELECT count(*) FROM memory_entries WHERE agent = '../x'", "0", 20)
    kept = sql(workspace, "SELECT count(*) FROM memory_quarantine").strip()
    assert kept == "1"
    assert not (workspace.root / ".oryxos" / "x").exists()
    assert healthy(running)["memory_thread_alive"] is True


def test_the_readme_sqlite3_insert_never_fails_while_agents_save(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """E19: without a busy timeout, 4 to 10 of 40 runs failed with `database is locked`."""
    stop = threading.Event()

    def saving() -> None:
        from oryxmem.client import Client

        with Client(running.socket) as client:
            n = 0
            while not stop.is_set():
                client.save("busy", f"save {n}")
                n += 1

    savers = [threading.Thread(target=saving) for _ in range(3)]
    for saver in savers:
        saver.start()
    try:
        failures = []
        for n in range(40):
            done = subprocess.run(
                [
                    "sqlite3",
                    "-cmd",
                    ".timeout 5000",
                    str(workspace.db_path),
                    f"INSERT INTO memory_entries(agent, scope, content) VALUES ('coder', 'archival', 'x{n}')",
                ],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                failures.append(done.stderr)
    finally:
        stop.set()
        for saver in savers:
            saver.join()
    assert failures == []


def test_a_replaced_agents_folder_is_watched_again(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """After mv agents a.old && cp -a a.old agents && rm -rf a.old, edits reached the rows
    only through the 30 s rescan, while health said watcher_alive."""
    assert save_to(running, "moved", "before the move")[0] == 200
    os_dir = workspace.os_dir
    subprocess.run(
        "mv agents a.old && cp -a a.old agents && rm -rf a.old",
        shell=True,
        check=True,
        cwd=os_dir,
    )
    time.sleep(1.5)  # the daemon notices the new folder
    path = workspace.memory_path("moved")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("- [2026-07-22 09:30:00] typed after the move\n")
    eventually(
        workspace,
        "SELECT count(*) FROM memory_entries WHERE content = 'typed after the move'",
        "1",
        10,
    )
    assert healthy(running)["watcher_alive"] is True


def wait_for_rows(workspace: Workspace, agent: str, expected: list[str]) -> None:
    statement = f"SELECT group_concat(content, ' ') FROM (SELECT content FROM memory_entries WHERE agent = '{agent}' ORDER BY content)"
    eventually(workspace, statement, " ".join(expected), 15)


@pytest.mark.parametrize("how", ["rm MEMORY.md", "rm -r the folder"])
def test_a_memory_md_that_stays_deleted_takes_its_entries_out_of_the_rows(
    running: RunningDaemon, workspace: Workspace, how: str
) -> None:
    """Its rows stayed in memory_entries forever, and `oryxmem sync` said everything in
    sync. Now they go (each kept in memory_history), and restoring the file brings
    them back."""
    for word in ("alpha", "beta"):
        assert save_to(running, "gone", word)[0] == 200
    path = workspace.memory_path("gone")
    kept = path.read_text()
    wait_for_rows(workspace, "gone", ["alpha", "beta"])
    if how == "rm MEMORY.md":
        path.unlink()
    else:
        subprocess.run(["rm", "-r", str(path.parent)], check=True)
    wait_for_rows(workspace, "gone", [])
    history = run_cli("history", "--agent", "gone", "--limit", "4").stdout
    assert history.count(" remove ") == 2 and " file " in history, history
    assert run_cli("sync", "--check").returncode == 0
    path.parent.mkdir(exist_ok=True)
    path.write_text(kept)
    wait_for_rows(workspace, "gone", ["alpha", "beta"])
    assert healthy(running)["memory_thread_alive"] is True


def test_an_editor_rewriting_in_place_in_small_writes_while_an_agent_saves_loses_nothing(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """C7: the daemon read the half-written file and replaced it by rename; the editor's
    later writes went to the orphaned inode: the user's new line vanished."""
    for n in range(3):
        assert save_to(running, "ed", f"before {n}")[0] == 200
    path = workspace.memory_path("ed")
    text = path.read_text() + "".join(f"- [2026-07-22 09:30:00] typed {n}\n" for n in range(20))
    text = (
        text.replace(
            "## 归档记忆\n", "## 核心记忆\n- [2026-07-22 09:30:00] typed core\n\n## 归档记忆\n", 1
        )
        if "## 核心记忆" not in text
        else text
    )
    saved: list[str] = []
    stop = threading.Event()

    def agent_saves() -> None:
        from oryxmem.client import Client

        with Client(running.socket) as client:
            n = 0
            while not stop.is_set():
                scope = "core" if n % 2 else "archival"  # a core save is not at the end
                client.save("ed", f"during {n}", scope)
                saved.append(f"during {n}")
                n += 1
                time.sleep(0.03)

    saver = threading.Thread(target=agent_saves)
    saver.start()
    try:
        data = text.encode()
        with open(path, "r+b") as editor:  # truncate, then write it again in pieces
            editor.truncate(0)
            for at in range(0, len(data), 64):
                editor.write(data[at : at + 64])
                editor.flush()
                time.sleep(0.02)
    finally:
        time.sleep(0.5)
        stop.set()
        saver.join()
    deadline = time.monotonic() + 20
    while True:
        final = path.read_text()
        missing = [f"typed {n}" for n in range(20) if f"] typed {n}\n" not in final]
        missing += [s for s in saved if f"] {s}\n" not in final]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert missing == [], final
    assert run_cli("sync", "--check").returncode == 0
    for line in final.splitlines():  # no stray fragment of a half-written line
        assert line == "" or line.startswith(("## ", "- [")), final


def test_an_editor_pausing_mid_rewrite_with_the_file_open_is_never_written_over(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """C7: an editor that stops for longer than the quiet time halfway through writing the
    file again (the machine is busy) had an append land where its next write went: a
    torn line, or bytes that were not UTF-8. While another program holds the file open
    to write in place, a save to it is put off; saves to other agents are not held up."""
    assert save_to(running, "slow", "before")[0] == 200
    path = workspace.memory_path("slow")
    data = (path.read_text() + "- [2026-07-22 09:30:00] typed é line\n").encode()

    def save(agent: str, content: str) -> None:
        assert save_to(running, agent, content)[0] == 200

    with open(path, "r+b") as editor:
        editor.truncate(0)
        editor.write(data[: len(data) - 9])  # stops mid-line, mid-character
        editor.flush()
        time.sleep(0.4)  # longer than the quiet time
        slow = threading.Thread(target=save, args=("slow", "during the pause"))
        slow.start()
        time.sleep(0.2)
        save("other", "elsewhere")
        assert slow.is_alive()  # answered before the put-off save: not held up by it
        time.sleep(0.6)
        assert slow.is_alive()  # put off while the editor holds the file
        editor.write(data[len(data) - 9 :])
    slow.join(timeout=15)
    final = path.read_text(encoding="utf-8")
    assert "] typed é line\n" in final and "] during the pause\n" in final, final
    for line in final.splitlines():
        assert line == "" or line.startswith(("## ", "- [")), final
    healthy(running)


def test_saves_to_a_file_an_editor_keeps_saving_by_rename_are_not_put_off_until_it_stops(
    running: RunningDaemon, workspace: Workspace
) -> None:
    """An editor saving the file by rename several times a second (autosave) never leaves
    it quiet for the quiet time, but writes each copy whole before it takes the name:
    saves to it are answered while it goes on, each written onto the copy it left (once
    it is done with it), not put off until it stops or the daemon's patience runs out."""
    assert save_to(running, "busy", "before")[0] == 200
    path = workspace.memory_path("busy")
    saved = threading.Event()
    gave_up = 2 * worker_module.DEFER_PATIENCE_SECONDS  # what two put-off saves would take

    def editor() -> bool:
        """Saves the file as it reads it now, every 50 ms, until the saves are answered
        (True) or it gives up (False)."""
        end = time.monotonic() + gave_up
        tmp = path.with_name(".MEMORY.md.swp")
        while not saved.wait(0.05):
            if time.monotonic() > end:
                return False
            tmp.write_bytes(path.read_bytes())
            os.replace(tmp, path)
        return True

    outcome: list[bool] = []
    typing = threading.Thread(target=lambda: outcome.append(editor()))
    typing.start()
    try:
        time.sleep(0.5)  # the file is fresh from here on
        for n in range(20):
            assert save_to(running, "busy", f"during {n}")[0] == 200
    finally:
        saved.set()
        typing.join()
    assert outcome == [True], "the saves were put off until the editor stopped"
    deadline = time.monotonic() + 20
    while not all(f"] during {n}\n" in path.read_text() for n in range(20)):
        assert time.monotonic() < deadline, path.read_text()  # one a copy dropped: put back
        time.sleep(0.1)
    healthy(running)


def test_a_save_answered_just_before_a_crash_survives_a_stale_buffer_written_meanwhile(
    workspace: Workspace, tmp_path: Path
) -> None:
    """The soak found it: saves answered (durable in MEMORY.md), an old copy of the file
    written back by an editor, and the daemon killed before the saves' rows (and the
    history that protects them) were committed: they were in neither place. Answered
    saves are noted beside the lock until the rows have them; after the crash they are
    taken into the rows, and reconcile puts them back into the file."""
    from support.daemon import start_daemon

    running = start_daemon(workspace, tmp_path / "daemon.log")
    assert save_to(running, "crash", "before")[0] == 200
    path = workspace.memory_path("crash")
    eventually(workspace, "SELECT count(*) FROM memory_entries WHERE agent = 'crash'", "1", 30)
    stale = path.read_text()
    with write_lock_held(workspace.db_path):  # the rows cannot follow the saves
        for n in range(3):
            assert save_to(running, "crash", f"answered {n}")[0] == 200
        editor = path.with_name("MEMORY.md.swp")
        editor.write_text(stale)  # the editor's old buffer, by rename
        editor.replace(path)
        running.proc.kill()
        running.proc.wait()
        running.notifications.close()
    with daemon(workspace, tmp_path / "daemon2.log"):
        deadline = time.monotonic() + 20
        while not all(f"] answered {n}\n" in path.read_text() for n in range(3)):
            assert time.monotonic() < deadline, path.read_text()
            time.sleep(0.1)
    assert path.read_text().count("] answered 0\n") == 1
    assert run_cli("sync", "--check").returncode == 0
