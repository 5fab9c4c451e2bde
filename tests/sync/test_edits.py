"""Forgetting and rewriting entries by id (sync/edits.py) on a real MEMORY.md and a real
SQLite file: the file, the rows, the indexes and history follow, and an edit planned on
what is not there any more changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.daemon import daemon
from support.sync import disagreements, sql

from oryxmem.errors import (
    ContentTooLongError,
    EmptyContentError,
    EntryNotFoundError,
    MemoryFileConflictedError,
)
from oryxmem.service import MemoryService
from oryxmem.workspace import Workspace


def saved(service: MemoryService, *contents: str, scope: str = "core") -> list[str]:
    return [service.save("coder", text, scope).entry.entry_id for text in contents]


def file_text(workspace: Workspace) -> str:
    return workspace.memory_path("coder").read_text(encoding="utf-8")


def test_a_forgotten_entry_leaves_the_file_the_rows_the_index_and_history_says_who(
    service: MemoryService, workspace: Workspace
) -> None:
    _tea, coffee = saved(service, "Drinks green tea.", "Drinks black coffee.")
    service.catch_up_indexes()
    edited = service.edit("coder", [coffee], source="console")
    assert [entry.content for entry in edited.removed] == ["Drinks black coffee."]
    assert "coffee" not in file_text(workspace) and "green tea" in file_text(workspace)
    assert sql(workspace, "SELECT content FROM memory_entries WHERE agent = 'coder'").split(
        "\n"
    ) == ["Drinks green tea.", ""]
    service.catch_up_indexes()
    assert not service.search("coder", "coffee", mode="keyword").hits
    last = service.audit_log("coder", 1)[0]
    assert (last["op"], last["source"], last["content"]) == (
        "remove",
        "console",
        "Drinks black coffee.",
    )
    assert disagreements(workspace) == []
    service.sync()  # the reconcile after it finds nothing to do: no second removal
    assert [e["op"] for e in service.audit_log("coder", 10)].count("remove") == 1


def test_an_edit_writes_the_entry_in_its_place_with_its_time(
    service: MemoryService, workspace: Workspace
) -> None:
    _, middle, _ = saved(service, "Name is Ada.", "Lives in Oslo.", "Uses vim.")
    before = file_text(workspace).splitlines()
    edited = service.edit("coder", (), {middle: "  Lives in Bergen.  "}, source="console")
    (was,), (now,) = edited.replaced, edited.written
    assert (was.content, now.content, now.ts) == ("Lives in Oslo.", "Lives in Bergen.", was.ts)
    after = file_text(workspace).splitlines()
    assert len(after) == len(before)
    changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(changed) == 1 and after[changed[0]].endswith("Lives in Bergen.")
    core, _ = service.reader(service.resolve("coder")).entries()
    assert [e.content for e in core] == ["Name is Ada.", "Lives in Bergen.", "Uses vim."]
    assert now.entry_id in {e.entry_id for e in core} and middle not in {e.entry_id for e in core}
    assert disagreements(workspace) == []
    ops = [(e["op"], e["detail"]) for e in service.audit_log("coder", 2)]
    assert sorted(ops) == [("add", "edited"), ("remove", "edited")]


def test_an_edit_and_a_forget_together_keep_each_line_where_it_was(
    service: MemoryService, workspace: Workspace
) -> None:
    a, b, _, d = saved(service, "one", "two", "three", "four")
    edited = service.edit("coder", [a, b], {d: "four, rewritten"})
    assert [e.content for e in edited.written] == ["four, rewritten"]
    core, _ = service.reader(service.resolve("coder")).entries()
    assert [e.content for e in core] == ["three", "four, rewritten"]
    assert disagreements(workspace) == []


def test_an_id_that_is_gone_refuses_the_whole_edit_and_changes_nothing(
    service: MemoryService, workspace: Workspace
) -> None:
    path = workspace.memory_path("coder")
    path.parent.mkdir(parents=True)
    lines = ["- 2026-11-01 09:00:00 Keeps this.\n", "- 2026-11-02 09:00:00 Goes by hand.\n"]
    path.write_text("## 核心记忆\n" + "".join(lines) + "\n## 归档记忆\n", encoding="utf-8")
    service.sync()
    core, _ = service.reader(service.resolve("coder")).entries()
    keep, gone = (entry.entry_id for entry in core)
    # An editor takes a line out after the page was read; the page then asks to forget
    # both the entry it saw and the one that is gone.
    path.write_text(path.read_text(encoding="utf-8").replace(lines[1], ""), encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(EntryNotFoundError) as refused:
        service.edit("coder", [keep, gone])
    assert refused.value.data == {"missing": [gone]}
    assert path.read_bytes() == before
    assert "Keeps this." in sql(workspace, "SELECT content FROM memory_entries")
    assert disagreements(workspace) == []  # the hand edit itself was taken in


def test_a_hand_edit_made_before_the_edit_is_kept(
    service: MemoryService, workspace: Workspace
) -> None:
    (old,) = saved(service, "Old fact.")
    path = workspace.memory_path("coder")
    with path.open("a", encoding="utf-8") as out:
        out.write("- 2026-11-30 10:00:00 Typed in by hand.\n")
    service.edit("coder", [old])
    text = file_text(workspace)
    assert "Typed in by hand." in text and "Old fact." not in text
    assert "Typed in by hand." in sql(workspace, "SELECT content FROM memory_entries")


@pytest.mark.parametrize(
    ("content", "error"), [("   ", EmptyContentError), ("x" * 40000, ContentTooLongError)]
)
def test_bad_new_content_is_refused_and_changes_nothing(
    service: MemoryService, workspace: Workspace, content: str, error: type[Exception]
) -> None:
    (entry,) = saved(service, "A fact.")
    before = workspace.memory_path("coder").read_bytes()
    with pytest.raises(error):
        service.edit("coder", (), {entry: content})
    assert workspace.memory_path("coder").read_bytes() == before


def test_a_file_with_conflict_markers_is_not_edited(
    service: MemoryService, workspace: Workspace
) -> None:
    (entry,) = saved(service, "A fact.")
    path = workspace.memory_path("coder")
    path.write_text(file_text(workspace) + "<<<<<<< HEAD\n- x\n=======\n- y\n>>>>>>> b\n")
    before = path.read_bytes()
    with pytest.raises(MemoryFileConflictedError):
        service.edit("coder", [entry])
    assert path.read_bytes() == before


def test_a_page_counts_from_the_newest_or_the_oldest_and_names_each_entrys_source(
    service: MemoryService,
) -> None:
    for number in range(1, 8):
        service.save("coder", f"note {number}", source="cli")
    newest = service.page("coder", "archival", 2, 3, newest=True)
    assert newest.total == 7
    assert [(at, e.content) for at, e, _ in newest.entries] == [
        (5, "note 5"),
        (4, "note 4"),
        (3, "note 3"),
    ]
    oldest = service.page("coder", "archival", 5, 3, newest=False)
    assert [(at, e.content, source) for at, e, source in oldest.entries] == [
        (6, "note 6", "cli"),
        (7, "note 7", "cli"),
    ]
    assert service.page("coder", "archival", 50, 3, newest=True).entries == []
    _, (at, entry, source) = service.find("coder", oldest.entries[0][1].entry_id)
    assert (at, entry.content, source) == (6, "note 6", "cli")
    (summary,) = [a for a in service.agents() if a.name == "coder"]
    assert (
        summary.last_saved == service.page("coder", "archival", 0, 1, newest=True).entries[0][1].ts
    )
    before = service.page("coder", "core", 0, 1, newest=True).version
    service.save("coder", "a fact", "core")
    assert service.page("coder", "core", 0, 1, newest=True).version != before


def test_forget_and_edit_over_the_socket_answer_a_stale_id_with_409_and_change_nothing(
    workspace: Workspace, tmp_path: Path
) -> None:
    with daemon(workspace, tmp_path / "daemon.log") as running:
        url = "http://x/api/v1/agents/coder/memory"
        status, saved = running.curl("-d", '{"content": "Lives in Oslo.", "scope": "core"}', url)
        entry = saved["data"]["entry"]["id"]
        body = json.dumps({"id": entry, "content": "Lives in Bergen."})
        status, edited = running.curl("-H", "X-OryxOS-Source: console", "-d", body, url + "/edit")
        assert status == 200 and edited["data"]["was"]["content"] == "Lives in Oslo."
        status, found = running.curl(f"{url}/entries/{edited['data']['entry']['id']}")
        assert status == 200 and found["data"]["entry"]["content"] == "Lives in Bergen."
        status, gone_entry = running.curl(f"{url}/entries/{entry}")
        assert (status, gone_entry["code"]) == (409, 1022)
        before = workspace.memory_path("coder").read_bytes()
        for path, stale in (("/edit", body), ("/forget", json.dumps({"ids": [entry]}))):
            status, refused = running.curl("-d", stale, url + path)
            assert (status, refused["code"]) == (409, 1022), refused
            assert refused["data"] == {"missing": [entry]}
        assert workspace.memory_path("coder").read_bytes() == before
        status, bad = running.curl("-d", '{"ids": "not a list"}', url + "/forget")
        assert (status, bad["code"]) == (400, 1002)
        now = edited["data"]["entry"]["id"]
        status, gone = running.curl("-d", json.dumps({"ids": [now]}), url + "/forget")
        assert status == 200 and gone["data"]["forgotten"][0]["content"] == "Lives in Bergen."
        status, page = running.curl(url + "/entries?scope=core")
        assert page["data"]["total"] == 0
        sources = sql(workspace, "SELECT op, source FROM memory_history ORDER BY id").split()
        assert sources == ["add|socket", "remove|console", "add|console", "remove|socket"]


def test_forgetting_the_first_of_two_alike_entries_leaves_the_second(
    service: MemoryService, workspace: Workspace
) -> None:
    """Alike entries are numbered in file order (X, X-1): when the first goes, the second
    is X now, and X-1 is the id that went from the file. The clock stands still: an id
    is the key of (scope, time, content), and saves a second apart are not alike."""
    service.files.clock = lambda: "2026-12-01 09:00:00"
    first, _, second = saved(service, "Uses vim.", "Drinks tea.", "Uses vim.")
    assert second == f"{first}-1"
    edited = service.forget("coder", [first])
    assert [entry.content for entry in edited.removed] == ["Uses vim."]
    core, _ = service.reader(service.resolve("coder")).entries()
    assert [(e.content, e.entry_id) for e in core] == [
        ("Drinks tea.", core[0].entry_id),
        ("Uses vim.", first),
    ]
    assert file_text(workspace).count("Uses vim.") == 1
    assert disagreements(workspace) == []
