"""Agents' terms held in memory (oryxmem/index/held.py): a search scored from them gives
what FTS5's bm25() gives, the same rows with the same doubles in the same order, after
saves, edits and forgets, and when the copy must be made again; and each row's content,
casefolded, for the search's whole-query check."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

from oryxmem.config import Config
from oryxmem.index import held as held_module
from oryxmem.index.bm25 import KEY_BITS, BM25Index
from oryxmem.index.held import HeldTerms, held_terms, settle
from oryxmem.search import _holding_whole
from oryxmem.service import MemoryService
from oryxmem.store.db import read_snapshot, write_transaction
from oryxmem.store.dbfile import database_files
from oryxmem.store.indexfile import ROWS
from oryxmem.workspace import Workspace

WORDS = [
    "deploy", "tests", "editor", "tea", "release", "notes", "user", "prefers", "dark",
    "mode", "rust", "python", "friday", "meeting", "深色", "模式", "café", "naïve",
    "pipeline", "flaky", "cache", "vim", "emacs", "green",
]  # fmt: skip
QUERIES = [
    "which editor does the user like",
    "tea",
    "deploy friday",
    "flaky tests in the pipeline",
    "深色 模式",
    "café naïve",
    "rust python rust",
    "nothing here matches",
    "user",
]
WHOLE = ["straße zum", "TEA DEPLOY", "Café Naïve", "zebra crossing", "ea", "s t", "tea rust"]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9)))


def saved(service: MemoryService, agent: str, texts: list[str]) -> list[str]:
    ids = [service.save(agent, text).entry.entry_id for text in texts]
    service.mirror_saves()
    service.catch_up_indexes()
    return ids


def copies(service: MemoryService) -> HeldTerms:
    db = service.index_db
    (epoch,) = db.execute("SELECT epoch FROM memory_terms_count").fetchone()
    files = database_files(db)
    return held_terms(files["main"], int(epoch), files[ROWS])


def slot_of(service: MemoryService, agent: str) -> int:
    (slot,) = service.index_db.execute(
        "SELECT slot FROM memory_terms_agents WHERE agent = ?", [agent]
    ).fetchone()
    return int(slot)


def held_in(service: MemoryService, agent: str) -> None:
    """Search the agent until its copy is made, and wait for it."""
    bm25 = BM25Index(service.config)
    for _ in range(held_module.WANTED):
        with read_snapshot(service.index_db) as db:
            bm25.ranked(db, agent, "tea", 10)
    settle()


def texts_as_rows(service: MemoryService, agent: str) -> None:
    """The copy holds each of the agent's rows' content casefolded, and the whole-query
    check from it finds what reading the rows finds, for every query and row: from the
    whole copy, and from half of it with the other half read (rows a copy lacks)."""
    held = copies(service).copies[slot_of(service, agent)].texts
    rows = dict(
        service.db.execute("SELECT id, content FROM memory_entries WHERE agent = ?", [agent])
    )
    assert held == {row_id: content.casefold() for row_id, content in rows.items()}
    half = dict(list(held.items())[::2])
    for query in [*QUERIES, *WHOLE]:
        with read_snapshot(service.index_db) as db:
            read = _holding_whole(db, query, list(rows), None)
            assert _holding_whole(db, query, list(rows), held) == read, query
            assert _holding_whole(db, query, list(rows), half) == read, query


def same_both_ways(service: MemoryService, agent: str, queries: list[str]) -> int:
    """Every query ranked from the copy and by FTS5 alike; how many the copy answered."""
    bm25, answered = BM25Index(service.config), 0
    real = HeldTerms.scores

    def counting(self: HeldTerms, *args: object, **kwargs: object) -> object:
        nonlocal answered
        found = real(self, *args, **kwargs)  # type: ignore[arg-type]
        answered += found is not None
        return found

    for query in queries:
        for limit in (None, 3, 200):
            with read_snapshot(service.index_db) as db:
                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(HeldTerms, "scores", counting)
                    held = bm25.ranked(db, agent, query, limit)
                fts5 = bm25.ranked(db, agent, query, limit, held=False)
            assert held.row_ids.tolist() == fts5.row_ids.tolist(), query
            assert held.scores.tolist() == fts5.scores.tolist(), query  # the same doubles
            assert held.own.tolist() == fts5.own.tolist(), query
    return answered


@pytest.fixture
def service(workspace: Workspace) -> Iterator[MemoryService]:
    svc = MemoryService(workspace, Config.load(workspace.config_path))
    rng = random.Random(7)
    for agent in ("coder", "writer"):
        texts = [sentence(rng) for _ in range(150)]
        texts += texts[:20]  # the same texts again: scores tie, order by key
        saved(svc, agent, texts)
    yield svc
    svc.close()


def test_searches_from_the_copy_rank_as_fts5_does_through_every_change(
    service: MemoryService,
) -> None:
    rng = random.Random(11)
    same_both_ways(service, "coder", QUERIES)  # FTS5 answers until the copy is made
    held_in(service, "coder")
    copy = copies(service).copies[slot_of(service, "coder")]
    assert len(copy.terms) == 170
    assert same_both_ways(service, "coder", QUERIES) == 3 * len(QUERIES)
    assert slot_of(service, "writer") not in copies(service).copies  # never searched
    texts_as_rows(service, "coder")

    mixed = "Die STRASSE zum Café: Tea"  # casefolded as the check does: "straße" holds
    ids = saved(service, "coder", [*(sentence(rng) for _ in range(11)), mixed])  # saves
    saved(service, "writer", [sentence(rng) for _ in range(5)])  # another agent's
    assert same_both_ways(service, "coder", QUERIES) == 3 * len(QUERIES)
    assert len(copy.terms) == 170 + 12
    texts_as_rows(service, "coder")
    held_before = [  # entries the copy held from its making
        entry_id
        for (entry_id,) in service.db.execute(
            "SELECT entry_id FROM memory_entries WHERE agent = 'coder' ORDER BY seq LIMIT 4"
        )
    ]
    service.edit(
        "coder",
        removals=[ids[0], held_before[0]],
        replacements={ids[5]: "zebra crossing tea", held_before[1]: "zebra tea"},
    )
    service.forget("coder", [ids[6], held_before[2]])
    service.catch_up_indexes()
    assert same_both_ways(service, "coder", [*QUERIES, "zebra"]) == 3 * (len(QUERIES) + 1)
    # brought up in place, step by step, not made again
    assert copies(service).copies[slot_of(service, "coder")] is copy
    assert len(copy.terms) == 170 + 12 - 2 - 2
    entries = service.index_db.execute(  # the agent's count, kept by each step
        "SELECT entries FROM memory_terms_agents WHERE agent = 'coder'"
    ).fetchone()[0]
    assert entries == len(copy.terms)
    texts_as_rows(service, "coder")
    hits = service.search("coder", "zebra", limit=3, mode="keyword").hits
    assert {hit.entry.content for hit in hits[:2]} == {"zebra crossing tea", "zebra tea"}
    hits = service.search("coder", "Zebra Crossing", limit=3, mode="keyword").hits
    assert [(hit.entry.content, hit.arms[0]) for hit in hits[:1]] == [
        ("zebra crossing tea", "exact")
    ]


def test_a_copy_behind_the_dropped_keys_still_logged_is_made_again(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("oryxmem.index.bm25.GONE_KEPT_STEPS", 2)
    held_in(service, "coder")
    first = copies(service).copies[slot_of(service, "coder")]
    ids = saved(service, "coder", [f"tea note {n}" for n in range(8)])
    for entry_id in ids:  # a step each: the first ones' dropped keys are no longer logged
        service.forget("coder", [entry_id])
        service.catch_up_indexes()
    forgot = service.index_db.execute("SELECT forgot FROM memory_terms_count").fetchone()[0]
    assert forgot > 0
    same_both_ways(service, "coder", QUERIES)  # let go, made again meanwhile
    settle()
    again = copies(service).copies[slot_of(service, "coder")]
    assert again is not first and len(again.terms) == 170
    assert same_both_ways(service, "coder", QUERIES) == 3 * len(QUERIES)
    texts_as_rows(service, "coder")


def test_a_copy_is_not_used_by_a_snapshot_older_than_it(service: MemoryService) -> None:
    held_in(service, "coder")
    bm25 = BM25Index(service.config)
    other = MemoryService(service.workspace, service.config)
    try:
        with read_snapshot(other.index_db) as old:
            old.execute("SELECT 1 FROM memory_terms_count").fetchone()  # the snapshot starts
            before = bm25.ranked(old, "coder", "tea", None)
            saved(service, "coder", ["tea tea tea"])
            same_both_ways(service, "coder", ["tea"])  # the copy moves on past `old`
            assert copies(service).copies[slot_of(service, "coder")].step > 0
            fts5_then = bm25.ranked(old, "coder", "tea", None, held=False)
            then = bm25.ranked(old, "coder", "tea", None)
    finally:
        other.close()
    assert then.row_ids.tolist() == fts5_then.row_ids.tolist() == before.row_ids.tolist()
    assert then.scores.tolist() == fts5_then.scores.tolist()


def test_room_is_made_only_from_cold_copies_and_big_agents_are_left_to_fts5(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(held_module, "HELD_ROWS", 200)  # room for one agent of 170
    held_in(service, "coder")
    held_in(service, "writer")  # no room: coder was searched just now
    held = copies(service)
    assert set(held.copies) == {slot_of(service, "coder")}
    assert same_both_ways(service, "writer", QUERIES[:3]) == 0
    monkeypatch.setattr(held_module, "COLD_SECONDS", 0.0)  # coder went cold
    held_in(service, "writer")
    assert set(held.copies) == {slot_of(service, "writer")}
    assert same_both_ways(service, "writer", QUERIES) == 3 * len(QUERIES)

    monkeypatch.setattr(held_module, "AGENT_ROWS", 100)
    held_in(service, "coder")
    assert slot_of(service, "coder") not in held.copies
    assert same_both_ways(service, "coder", QUERIES) == 0


def test_an_index_made_again_is_a_new_epoch_whose_copies_start_empty(
    workspace: Workspace, service: MemoryService
) -> None:
    held_in(service, "coder")
    old = copies(service)
    with write_transaction(service.index_db):  # made for another version: made again
        service.index_db.execute("UPDATE index_state SET version = 3 WHERE name = 'bm25'")
    service.close()
    service = MemoryService(workspace, Config.load(workspace.config_path))
    service.catch_up_indexes()
    assert copies(service) is not old and not copies(service).copies
    held_in(service, "coder")
    assert same_both_ways(service, "coder", QUERIES) == 3 * len(QUERIES)
    keys = np.array(
        [k for (k,) in service.index_db.execute("SELECT key FROM memory_terms_keys")], np.int64
    )
    assert set((keys >> KEY_BITS).tolist()) == {slot_of(service, a) for a in ("coder", "writer")}
