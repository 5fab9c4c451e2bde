"""Issue 12: the digest of the older entries a block built for a query cannot show whole."""

from __future__ import annotations

import pytest
from support.chat_server import chat_server

from oryxmem import intmap, summarize
from oryxmem.config import Config, set_value
from oryxmem.digest import Folds, fold_key
from oryxmem.service import MemoryService, footprint_line
from oryxmem.store.format import ARCHIVAL, EntryIds
from oryxmem.workspace import Workspace

QUESTION = "what did we decide about the billing module?"


def footprint(request: str, n: int) -> str:
    return footprint_line(request, f"done: {n} items in {n % 7} s (run {n * 7919:08x})", 200)


def busy_agent(service: MemoryService, repeats: int = 60) -> list[str]:
    """Repeated footprints of three requests, notes that are all different, then enough
    newer lines to push them out of the newest part."""
    notes = [
        f"decided: the {word} module keeps its own schema" for word in ("auth", "export", "sync")
    ]
    for n in range(repeats):
        service.save("a", footprint(("run the tests", "deploy staging", "lint")[n % 3], n))
        if n % 20 == 0:
            service.save("a", notes[n // 20])
    for n in range(40):
        service.save("a", f"recent work item {n}: " + "x" * 80)
    return notes


def test_footprints_of_one_request_and_lines_that_differ_only_in_numbers_fold() -> None:
    assert fold_key(footprint("run the tests", 1)) == fold_key(footprint("Run the  tests!", 99))
    assert fold_key(footprint("run the tests", 1)) != fold_key(footprint("deploy staging", 1))
    assert fold_key("build 4412 took 31 s (a3f9c2e81)") == fold_key("build 17 took 5 s (0bc41d99e)")
    assert fold_key("likes tea") != fold_key("likes coffee")


def test_the_digest_stands_for_every_older_entry_when_its_share_holds_them(
    service: MemoryService,
) -> None:
    notes = busy_agent(service)
    before = service.workspace.memory_path("a").read_bytes()
    part = service.archival_part(service.resolve("a"), QUESTION)
    assert part.digest is not None
    shown = len(part.relevant) + len(part.newest)
    assert part.omitted == 103 - shown and part.digest.covered >= part.omitted - len(part.relevant)
    # every distinct older entry is in the block: whole, folded, or sampled
    assert part.digest.represented + len(part.relevant) >= part.digest.covered
    text = "\n".join(part.lines)
    assert all(note in text for note in notes)
    assert "- ×20 [" in text  # twenty footprints of one request, one line, a date range
    block = service.build_context("a", query=QUESTION)
    assert sum(len(line) + 1 for line in block.split("## 归档记忆\n")[1].splitlines()[1:]) <= 4000
    assert service.workspace.memory_path("a").read_bytes() == before  # never rewritten
    assert service.recall("a", "decided: the sync module").lines  # recall: every entry


def test_the_folds_follow_new_entries_and_a_changed_file_is_folded_again() -> None:
    ids = EntryIds()
    entries = [
        ids.entry(ARCHIVAL, f"2026-10-01 10:00:{n:02d}", footprint("lint", n)) for n in range(30)
    ]
    grown, fresh = Folds(), Folds()
    assert grown.extend(entries, 10) and grown.extend(entries, 30)
    fresh.extend(entries, 30)
    assert {k: f.count for k, f in grown.folds.items()} == {
        k: f.count for k, f in fresh.folds.items()
    }
    assert grown.single.items() == fresh.single.items()
    shorter = grown.upto(entries, 12)  # a shorter span, without folding again
    short = Folds()
    short.extend(entries, 12)
    assert [(f.count, f.last) for f in shorter.repeated()] == [(12, entries[11])]
    assert [(f.count, f.last) for f in short.upto(entries, 12).repeated()] == [(12, entries[11])]
    changed = entries[:5] + entries[6:]  # a line removed in the older span
    assert not grown.extend(changed, 29)


def test_kinds_of_one_entry_sorted_into_arrays_fold_as_a_dict_of_them_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kinds seen once move from a dict into sorted arrays as they pile up; a kind
    seen again, wherever it is kept, becomes a fold with its first entry, in every
    order of extends."""
    monkeypatch.setattr(intmap, "MERGE_AT", 4)
    ids = EntryIds()
    topics = [f"note about topic {word}" for word in "abcdefghijklmnopqrstuvwxyz"]
    said = [*topics, topics[2], *topics[10:14], topics[0], topics[25], topics[2]]
    entries = [ids.entry(ARCHIVAL, None, text) for text in said]
    expected: dict[str, list[int]] = {}
    for place, text in enumerate(said):
        expected.setdefault(text, []).append(place)
    singles = sorted(places[0] for places in expected.values() if len(places) == 1)
    repeats = sorted((len(p), p[0], p[-1]) for p in expected.values() if len(p) > 1)
    for steps in ([len(said)], [3, 7, 8, 26, 27, 33, len(said)], list(range(1, len(said) + 1))):
        folds = Folds()
        for upto in steps:
            assert folds.extend(entries, upto)
        assert sorted(folds.single.items().values()) == singles, steps
        found = sorted((f.count, entries.index(f.first), f.last_at) for f in folds.folds.values())
        assert found == repeats, steps
        assert folds.single.sorted_count > 0  # some were sorted into the arrays


def test_a_kind_of_one_entry_is_kept_as_its_place_alone() -> None:
    """A large memory holds mostly entries of a kind of their own: each costs a number,
    not a fold (a fold of one entry per entry made the first block of 100,000 entries
    keep 36 MB; it keeps 12)."""
    ids = EntryIds()
    notes = [ids.entry(ARCHIVAL, None, f"note about topic {word}") for word in ("a", "b", "c")]
    lint = [ids.entry(ARCHIVAL, None, footprint("lint", n)) for n in range(3)]
    entries = [notes[0], lint[0], notes[1], lint[1], notes[2], lint[2]]
    folds = Folds()
    folds.extend(entries, len(entries))
    assert sorted(folds.single.items().values()) == [0, 2, 4]  # the notes: their places
    assert [(f.count, f.first, f.last) for f in folds.folds.values()] == [(3, lint[0], lint[2])]
    # a span that ends before the second footprint holds no fold at all
    assert folds.upto(entries, 3).repeated() == []
    assert [f.count for f in folds.upto(entries, 4).repeated()] == [2]


@pytest.fixture
def chat_config(workspace: Workspace):  # type: ignore[no-untyped-def]
    summarize._WRITTEN.clear()
    summarize._FAILED.clear()
    with chat_server() as (url, chat):
        set_value(workspace.config_path, "summarize.llm_url", url)
        set_value(workspace.config_path, "summarize.llm_model", "tiny")
        set_value(workspace.config_path, "summarize.llm_timeout_seconds", "1")
        yield MemoryService(workspace, Config.load(workspace.config_path)), chat


def test_a_model_writes_the_digest_once_indented_and_within_its_budget(chat_config) -> None:  # type: ignore[no-untyped-def]
    service, chat = chat_config
    busy_agent(service)
    block = service.build_context("a", query=QUESTION)
    assert "written by tiny" in block and "  Model digest:" in block
    assert "\n## forged" not in block and "  ## forged" in block  # cannot pass for a heading
    assert len(chat.requests) == 1
    service.build_context("a", query=QUESTION)
    assert len(chat.requests) == 1  # the same digest: asked once
    assert chat.requests[0]["model"] == "tiny"
    service.close()


@pytest.mark.parametrize("mode", ["slow", "fail", "not-json", "no-choices", "not-text", "empty"])
def test_a_slow_failing_or_garbage_model_leaves_the_offline_digest_in_time(
    chat_config,
    mode: str,  # type: ignore[no-untyped-def]
) -> None:
    service, chat = chat_config
    busy_agent(service)
    service.search("a", "the model is loaded before the clock starts")
    chat.mode = mode
    block = service.build_context("a", query=QUESTION)
    if mode == "slow":  # it gave up on the model (1 s) before the model answered (5 s)
        assert chat.answered < len(chat.requests)
    assert "repeats folded" in block and "Model digest" not in block
    asked = len(chat.requests)
    service.build_context("a", query=QUESTION)
    assert len(chat.requests) == asked  # not asked again at once
    service.close()


def test_control_characters_from_the_model_never_reach_the_block(chat_config) -> None:  # type: ignore[no-untyped-def]
    service, chat = chat_config
    busy_agent(service)
    chat.mode = "controls"
    block = service.build_context("a", query=QUESTION)
    assert "\x1b" not in block and "\x07" not in block and "terminal title" in block
    service.close()
