"""Issue 12: the memory block with a query, and the prompt around it."""

from __future__ import annotations

import json

import pytest
from support.daemon import daemon
from support.processes import run_cli

from oryxmem.client import Client
from oryxmem.config import Config
from oryxmem.prompt import NEWEST_NOTE, RELEVANT_NOTE, archival_for_query
from oryxmem.service import MemoryService
from oryxmem.store.format import ARCHIVAL, EntryIds
from oryxmem.workspace import Workspace

TOPICS = [f"routine note number {n} about the weekly status meeting" for n in range(300)]


def entries(texts: list[str]):  # type: ignore[no-untyped-def]
    ids = EntryIds()
    return [
        ids.entry(ARCHIVAL, f"2026-07-{1 + n % 28:02d} 10:00:00", t) for n, t in enumerate(texts)
    ]


def fill(service: MemoryService, agent: str = "a") -> None:
    service.save(agent, "The user's cat is called Miso and is afraid of the vacuum cleaner.")
    for text in TOPICS:
        service.save(agent, text)


def test_without_a_query_the_block_is_exactly_the_newest_cut(service: MemoryService) -> None:
    fill(service)
    assert service.build_context("a", query=None) == service.build_context("a")
    assert service.build_context("a", query="  ") == service.build_context("a")
    block = service.build_context("a")
    assert RELEVANT_NOTE not in block and "Miso" not in block


def test_a_query_brings_an_old_relevant_entry_into_the_block_beside_the_newest(
    service: MemoryService,
) -> None:
    fill(service)
    service.save("a", "Prefers tabs to spaces", "core")
    block = service.build_context("a", query="what is the name of the user's cat?")
    core, archival = block.split("## 归档记忆\n")
    assert "Prefers tabs to spaces" in core  # core whole
    lines = archival.splitlines()
    assert lines[0].startswith("(") and "earlier archival entries not shown" in lines[0]
    relevant = lines[lines.index(RELEVANT_NOTE) + 1 : lines.index(NEWEST_NOTE)]
    newest = lines[lines.index(NEWEST_NOTE) + 1 :]
    assert any("Miso" in line for line in relevant)
    assert newest[-1].endswith(TOPICS[-1])  # the newest are still there
    assert sum(len(line) + 1 for line in lines[1:]) <= service.config.archival_limit_chars
    assert len(set(lines)) == len(lines)  # no entry twice


def test_the_relevant_part_keeps_its_share_and_the_newest_get_the_rest() -> None:
    archival = entries([f"entry {n} " + "x" * 80 for n in range(200)])
    ranked = list(reversed(archival[:100]))  # the oldest hundred, best first
    part = archival_for_query(archival, ranked, 4000, share=0.5)
    used_relevant = sum(len(e.render()) + 1 for e in part.relevant) + len(RELEVANT_NOTE) + 1
    assert used_relevant <= 2000 and part.relevant and part.newest
    assert part.relevant == sorted(part.relevant, key=archival.index)  # in the file's order
    assert part.newest[-1] == archival[-1]
    total = sum(len(line) + 1 for line in part.lines[1:])
    assert total <= 4000
    assert part.omitted == 200 - len(part.relevant) - len(part.newest)
    # an entry longer than the share is skipped, a shorter one after it still taken
    long = entries(["y" * 5000, "short and relevant"])
    part = archival_for_query(long, long, 4000, share=0.5)
    assert [e.content for e in part.relevant] == ["short and relevant"]


def test_a_query_over_the_socket_and_the_cli(workspace: Workspace, tmp_path) -> None:  # type: ignore[no-untyped-def]
    service = MemoryService(workspace, Config.load(workspace.config_path))
    fill(service)
    service.close()
    with daemon(workspace, tmp_path / "daemon.log") as running:
        query = "cat name"
        status, reply = running.curl(
            "--get", "--data-urlencode", f"query={query}", "http://x/api/v1/agents/a/context"
        )
        assert status == 200, reply
        assert RELEVANT_NOTE in reply["data"]["context"] and "Miso" in reply["data"]["context"]
        out = run_cli("context", "--agent", "a", "--query", query, "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["context"] == reply["data"]["context"]
    alone = run_cli("context", "--agent", "a", "--query", query)
    assert "Miso" in alone.stdout and RELEVANT_NOTE in alone.stdout


@pytest.mark.parametrize("query", ["?!", "the"])
def test_a_query_with_nothing_to_search_by_still_builds_the_block(
    service: MemoryService, query: str
) -> None:
    fill(service)
    block = service.build_context("a", query=query)
    assert block.startswith("## 核心记忆\n") and "## 归档记忆\n" in block


# --- the whole prompt ------------------------------------------------------------


def write_bootstrap(workspace: Workspace) -> None:
    agent_dir = workspace.agents_dir / "a"
    agent_dir.mkdir(parents=True, exist_ok=True)
    (agent_dir / "AGENT.md").write_text(
        "---\nname: a\nmodel: any\n---\n\nYou are the build assistant of this repository.\n"
    )
    (workspace.os_dir / "USER.md").write_text("The user is Ana; she prefers short answers.\n")


def test_the_prompt_has_its_four_blocks_in_order(service: MemoryService) -> None:
    write_bootstrap(service.workspace)
    fill(service)
    session = service.create_session("a")
    service.append_message(session.id, "user", "Where did we leave the release?")
    service.append_message(session.id, "assistant", "At the changelog.")
    built = service.build_prompt("a", session.id, query="what is my cat called?")
    text = built.text
    at = [
        text.index(mark)
        for mark in (
            "You are the build assistant",
            "The user is Ana",
            "## 核心记忆",
            "user: Where did we leave the release?",
            '"name": "save_memory"',
        )
    ]
    assert at == sorted(at), text[:400]
    assert "model: any" not in text  # the front matter is stripped
    assert [f.name for f in built.files] == ["AGENT.md", "USER.md"]
    assert "Miso" in built.memory and RELEVANT_NOTE in built.memory
    assert built.system.endswith(built.memory.rstrip() + "\n")
    assert [m["role"] for m in built.history] == ["user", "assistant"]
    assert {t["name"] for t in built.tools} >= {"save_memory", "recall_memory"}
    assert built.notes == []


def test_a_missing_agent_md_or_user_md_is_left_out_and_nothing_is_written(
    service: MemoryService,
) -> None:
    built = service.build_prompt("nobody")
    assert built.files == [] and built.history == []
    assert built.text.startswith("# Memory\n\n## 核心记忆\n## 归档记忆\n\n# Tools\n")
    assert not (service.workspace.os_dir / "USER.md").exists()
    assert not (service.workspace.agents_dir / "nobody" / "AGENT.md").exists()


def test_a_linked_or_binary_bootstrap_file_is_left_out_with_a_note(
    service: MemoryService, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "secret"
    secret.write_text("ssh key")
    (service.workspace.os_dir / "USER.md").symlink_to(secret)
    agent_dir = service.workspace.agents_dir / "a"
    agent_dir.mkdir(parents=True)
    (agent_dir / "AGENT.md").write_bytes(b"\xff\xfe not text")
    built = service.build_prompt("a")
    assert built.files == [] and "ssh key" not in built.text
    assert len(built.notes) == 2 and any("not UTF-8" in n for n in built.notes)


def test_the_prompt_and_the_tools_over_the_socket_and_the_cli(
    workspace: Workspace, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    write_bootstrap(workspace)
    with daemon(workspace, tmp_path / "daemon.log") as running:
        status, reply = running.curl(
            "-d",
            json.dumps({"content": "Ana's cat is called Miso"}),
            "http://x/api/v1/agents/a/memory",
        )
        assert status == 200, reply
        status, reply = running.curl("-XPOST", "-d", '{"agent": "a"}', "http://x/api/v1/sessions")
        session = reply["data"]["id"]
        running.curl(
            "-d",
            json.dumps({"role": "user", "content": "hello"}),
            f"http://x/api/v1/sessions/{session}/messages",
        )
        status, reply = running.curl(
            "--get",
            "--data-urlencode",
            "query=the cat",
            "--data-urlencode",
            f"session={session}",
            "http://x/api/v1/agents/a/prompt",
        )
        assert status == 200, reply
        data = reply["data"]
        assert data["text"].index("Ana; she prefers") < data["text"].index("Miso")
        assert data["history"][0]["content"] == "hello"
        assert data["text"].index("user: hello") < data["text"].index('"name": "save_memory"')
        status, tools = running.curl("http://x/api/v1/tools")
        assert status == 200
        shapes = tools["data"]
        assert [t["name"] for t in shapes["tools"]] == ["save_memory", "recall_memory"]
        openai = shapes["openai"][0]
        assert openai["type"] == "function" and openai["function"]["parameters"]["type"] == "object"
        assert shapes["anthropic"][0]["input_schema"]["required"] == ["content"]
        with Client(running.socket) as client:  # the Python client: the same
            built = client.prompt("a", session=session, query="the cat")
            assert built["text"] == data["text"] and built["system"] in built["text"]
            assert client.tools() == shapes
            assert "Miso" in client.context("a", query="the cat")["context"]
        out = run_cli("prompt", "--agent", "a", "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["files"][0]["name"] == "AGENT.md"
    alone = run_cli("prompt", "--agent", "a", "--part", "system")
    assert alone.returncode == 0 and "You are the build assistant" in alone.stdout
    assert "# Tools" not in alone.stdout
