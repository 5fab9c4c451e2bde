"""Issue 14: memory.backend = "mem0", with a real mem0 (oryxmem[mem0]), offline."""

from __future__ import annotations

import importlib.util
import json
import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import daemon
from support.processes import run_cli, run_offline
from support.sync import sql

from oryxmem.config import Config, set_value
from oryxmem.registry import backend_migrations
from oryxmem.service import MemoryService
from oryxmem.store.db import Database, connect
from oryxmem.store.format import ARCHIVAL, Entry
from oryxmem.workspace import Workspace

if importlib.util.find_spec("mem0") is None:  # not imported here: oryxmem imports it offline
    pytest.skip("oryxmem[mem0] is not installed", allow_module_level=True)

from support.mem0_server import mem0_endpoint

from oryxmem.backends.mem0_link import EmbeddedLink, Mem0Link, close_links
from oryxmem.backends.mem0_mirror import Mem0Mirror

# A real mem0 server (MEM0_SERVER_URL) is shared: each run speaks for an agent of its own.
AGENT = f"coder-{uuid.uuid4().hex[:8]}" if os.environ.get("MEM0_SERVER_URL") else "coder"


@pytest.fixture(autouse=True)
def fresh_links() -> Iterator[None]:
    yield
    close_links()  # each test's workspace has its own embedded store


def mem0_db(workspace: Workspace) -> Database:
    """The database with the mem0 backend's tables, as a workspace configured for mem0
    opens it (these tests drive the mirror of a workspace that is not)."""
    own = backend_migrations("mem0")
    assert own is not None
    return connect(workspace.db_path, [own])


def mem0_workspace(workspace: Workspace, **settings: str) -> Config:
    set_value(workspace.config_path, "memory.backend", "mem0")
    for key, value in settings.items():
        set_value(workspace.config_path, key.replace("__", "."), value)
    return Config.load(workspace.config_path)


def texts(link: Mem0Link, agent: str) -> list[str]:
    return sorted(memory.text for memory in link.memories(agent))


def test_a_save_reaches_memory_md_the_rows_and_mem0_and_reads_come_from_mem0(
    workspace: Workspace,
) -> None:
    service = MemoryService(workspace, mem0_workspace(workspace))
    service.save("coder", "User's name is Ada.", "core")
    saved = service.save("coder", "User likes green tea")
    assert "User likes green tea" in workspace.memory_path("coder").read_text()
    assert sql(workspace, "SELECT content FROM memory_entries WHERE agent = 'coder'").split() != []
    assert service.recall("coder", "GREEN").lines == [saved.entry.render()]
    block = service.build_context("coder")
    assert (
        block == "## 核心记忆\n"
        f"{service.get('coder').core[0].render()}\n## 归档记忆\n{saved.entry.render()}\n"
    )
    store = service.reader(service.resolve("coder"))
    memories = store.link.memories("coder")  # type: ignore[attr-defined]
    by_text = {m.text: m.metadata for m in memories}
    assert by_text["User likes green tea"] == {
        "oryxmem_id": saved.entry.entry_id,
        "scope": ARCHIVAL,
        "ts": saved.entry.ts,
    }
    found = store.search("what does the user drink", 1)  # type: ignore[attr-defined]
    assert found[0][0].content == "User likes green tea"
    service.close()


def test_the_mirror_finishes_what_a_crash_interrupted(workspace: Workspace) -> None:
    service = MemoryService(workspace, Config.load(workspace.config_path))
    entries = [service.save("a", f"fact number {n}").entry for n in range(3)]
    (workspace.os_dir).mkdir(exist_ok=True)
    link = EmbeddedLink(workspace, Config.defaults())
    saves: list[str] = []

    def save(agent: str, content: str, scope: str) -> Entry:
        saves.append(content)
        return service.save(agent or None, content, scope).entry

    mirror = Mem0Mirror(mem0_db(workspace), link, str(workspace.root), save)
    # the intent of an add was recorded, the add never made (0); an add made, its record
    # never written (1); the same entry added twice (2)
    mirror._record("a", entries[0].entry_id, None)
    link.add("a", entries[1].content, {"oryxmem_id": entries[1].entry_id, "scope": ARCHIVAL})
    for _ in range(2):
        link.add("a", entries[2].content, {"oryxmem_id": entries[2].entry_id, "scope": ARCHIVAL})
    # another client's memory whose import landed in MEMORY.md just before a crash
    foreign = link.add("a", "brought in before the crash", {})
    landed = service.save("a", "brought in before the crash").entry
    service.db.execute(
        "INSERT INTO mem0_imports(mem0_id, agent, content) VALUES (?, 'a', ?)",
        [foreign, landed.content],
    )
    service.db.conn.commit()
    mirror.pass_agent("a")
    assert texts(link, "a") == sorted([*(e.content for e in entries), landed.content])
    assert saves == []  # nothing saved twice
    again = mirror.pass_agent("a")
    assert not again.changed
    agreed = service.db.execute("SELECT count(*) FROM mem0_agreed WHERE mem0_id IS NOT NULL")
    assert agreed.fetchone()[0] == 4
    link.close()
    service.close()


def post(url: str, path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        answer: dict[str, object] = json.loads(reply.read())
        return answer


def until(check, seconds: float = 20) -> float:  # type: ignore[no-untyped-def]
    """Seconds until check() is true (fails after ``seconds``)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, "never happened"
        time.sleep(0.05)
    return time.monotonic() - started


def test_the_daemon_mirrors_both_ways_through_a_mem0_server(
    workspace: Workspace, tmp_path: Path
) -> None:
    with mem0_endpoint(tmp_path / "server") as (url, server):
        # a line deleted in the file is deleted (not taken for a stale buffer's loss)
        mem0_workspace(
            workspace, mem0__transport="http", mem0__url=url, sync__stale_buffer_seconds="0"
        )
        path = workspace.memory_path(AGENT)
        with daemon(workspace, tmp_path / "daemon.log") as running:
            status, reply = running.curl(
                "-d",
                json.dumps({"content": "Deploys go out on Tuesdays"}),
                f"http://x/api/v1/agents/{AGENT}/memory",
            )
            assert status == 200, reply
            until(lambda: "Deploys go out on Tuesdays" in texts(server, AGENT))
            held = {m.text: m for m in server.memories(AGENT)}
            assert held["Deploys go out on Tuesdays"].oryxmem_id == reply["data"]["entry"]["id"]
            # another mem0 client adds: it reaches MEMORY.md
            post(
                url,
                "/memories",
                {
                    "messages": [{"role": "user", "content": "Prefers tabs"}],
                    "agent_id": AGENT,
                    "infer": False,
                },
            )
            took = until(lambda: "] Prefers tabs\n" in path.read_text())
            assert took < 5, took
            until(lambda: all(m.oryxmem_id for m in server.memories(AGENT)))
            # another client deletes: the line leaves MEMORY.md (and goes to history)
            gone = held["Deploys go out on Tuesdays"].id
            req = urllib.request.Request(f"{url}/memories/{gone}", method="DELETE")
            urllib.request.urlopen(req, timeout=30).close()
            until(lambda: "Deploys go out on Tuesdays" not in path.read_text())
            # a line deleted in MEMORY.md leaves mem0
            text = path.read_text()
            kept = [line for line in text.splitlines(True) if "Prefers tabs" not in line]
            path.write_text("".join(kept))
            until(lambda: "Prefers tabs" not in texts(server, AGENT))
            status, reply = running.curl(
                "-d",
                json.dumps({"content": "kept across a restart"}),
                f"http://x/api/v1/agents/{AGENT}/memory",
            )
            until(lambda: "kept across a restart" in texts(server, AGENT))
        with daemon(workspace, tmp_path / "daemon2.log"):  # the mapping survives: no doubles
            time.sleep(2.5)
            assert texts(server, AGENT) == ["kept across a restart"]
        assert run_cli("sync", "--check").returncode == 0
        history = sql(
            workspace,
            "SELECT op || ' ' || source FROM memory_history WHERE content = 'Prefers tabs'",
        )
        assert "add socket" in history or "add mem0" in history


def test_the_embedded_mem0_backend_runs_with_no_network_at_all(workspace: Workspace) -> None:
    mem0_workspace(workspace)
    script = (
        "from oryxmem.service import MemoryService\n"
        "service = MemoryService.open()\n"
        "service.save('coder', 'User likes tea')\n"
        "assert service.recall('coder', 'tea').lines, 'recalled'\n"
        "store = service.reader(service.resolve('coder'))\n"
        "assert store.search('hot drinks', 1)[0][0].content == 'User likes tea'\n"
    )
    run_offline(script, workspace.root)
    assert not (workspace.root / ".mem0").exists(), "mem0 wrote nothing under HOME"


def test_a_soak_of_saves_edits_mem0_adds_and_deletes_and_sigkill_loses_nothing(
    workspace: Workspace, tmp_path: Path
) -> None:
    """Socket saves, lines typed into MEMORY.md, memories another client adds to and
    deletes from mem0, and SIGKILL of the daemon, in a seeded random mix: afterwards
    MEMORY.md and mem0 hold exactly what is expected, each once."""
    import random

    from support.daemon import start_daemon

    from oryxmem.store.format import parse

    rng = random.Random(int(os.environ.get("ORYXMEM_MEM0_SOAK_SEED", "14")))
    steps = int(os.environ.get("ORYXMEM_MEM0_SOAK_STEPS", "40"))
    with mem0_endpoint(tmp_path / "server") as (url, server):
        mem0_workspace(workspace, mem0__transport="http", mem0__url=url)
        path = workspace.memory_path(AGENT)
        running = start_daemon(workspace, tmp_path / "daemon.log")
        expected: list[str] = []
        try:
            for step in range(steps):
                kind = rng.choice(["save", "save", "type", "add", "delete", "kill"])
                content = f"{kind} {step}"
                if kind == "save":
                    body = json.dumps({"content": content})
                    status, _ = running.curl("-d", body, f"http://x/api/v1/agents/{AGENT}/memory")
                    assert status == 200
                    expected.append(content)
                elif kind == "type":
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if not path.exists():
                        path.write_text("## 归档记忆\n")
                    with path.open("a") as editor:
                        editor.write(f"- [2026-07-22 09:30:00] {content}\n")
                    expected.append(content)
                elif kind == "add":
                    message = {"role": "user", "content": content}
                    post(url, "/memories", {"messages": [message], "agent_id": AGENT})
                    expected.append(content)
                elif kind == "delete":
                    mapped = [m for m in server.memories(AGENT) if m.oryxmem_id]
                    if mapped:
                        victim = rng.choice(mapped)
                        req = urllib.request.Request(f"{url}/memories/{victim.id}", method="DELETE")
                        urllib.request.urlopen(req, timeout=30).close()
                        expected.remove(victim.text)
                else:
                    running.proc.kill()
                    running.proc.wait()
                    running.notifications.close()
                    running = start_daemon(workspace, tmp_path / "daemon.log")
                time.sleep(rng.choice([0.0, 0.05, 0.3]))

            def settled() -> bool:
                doc = parse(path.read_text())
                in_file = sorted(e.content for e in doc.all_entries())
                return in_file == sorted(expected) == texts(server, AGENT)

            try:
                until(settled, 30)
            except AssertionError:
                in_file = sorted(e.content for e in parse(path.read_text()).all_entries())
                raise AssertionError(
                    f"file {in_file}\nexpected {sorted(expected)}\nmem0 {texts(server, AGENT)}"
                ) from None
        finally:
            running.stop()
        assert "Traceback" not in running.text()
    assert run_cli("sync", "--check").returncode == 0


def test_a_wiped_mem0_store_is_filled_again_and_nothing_leaves_memory_md(
    workspace: Workspace,
) -> None:
    """.oryxos/mem0/ is derived: deleted, the next full pass adds every entry again. A
    store that lost all of an agent's memories at once is taken for one made again."""
    import shutil

    service = MemoryService(workspace, Config.load(workspace.config_path))
    for n in range(5):
        service.save("a", f"kept fact {n}")
    before = workspace.memory_path("a").read_text()

    def save(agent: str, content: str, scope: str) -> Entry:
        return service.save(agent, content, scope).entry

    def full_pass() -> Mem0Link:
        link = EmbeddedLink(workspace, Config.defaults())
        Mem0Mirror(mem0_db(workspace), link, str(workspace.root), save).pass_agent("a")
        return link

    full_pass().close()
    shutil.rmtree(workspace.os_dir / "mem0")
    link = full_pass()
    assert texts(link, "a") == [f"kept fact {n}" for n in range(5)]
    for memory in link.memories("a"):  # every one gone at once, the store kept
        link.delete(memory.id)
    Mem0Mirror(mem0_db(workspace), link, str(workspace.root), save).pass_agent("a")
    assert len(link.memories("a")) == 5
    assert workspace.memory_path("a").read_text() == before
    link.close()
    service.close()
