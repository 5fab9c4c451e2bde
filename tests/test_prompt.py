"""Issue 12: the memory block with a query, and the prompt around it."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from daemonhelp import daemon

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
    long = entries(["y" * 3000, "short and relevant"])
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
