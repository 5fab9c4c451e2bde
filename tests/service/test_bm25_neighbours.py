"""The BM25 arm reads the neighbours of a step's rows for each agent at once (their
contexts, and the rows whose context they are): what it takes in is what a query per row
finds, whatever the places and times of the entries around them."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from oryxmem.index import IndexRow
from oryxmem.index.bm25 import CONTEXT_ENTRIES, CONTEXT_PLACES, CONTEXT_SECONDS, BM25Index
from oryxmem.index.terms import index_text
from oryxmem.service import MemoryService
from oryxmem.store.db import Executes, write_transaction
from oryxmem.store.format import ARCHIVAL, CORE

AGENTS = ("ada", "bo", "cy")
START = datetime(2026, 11, 30, 9, 0, 0)


def a_time(rng: random.Random, clock: datetime) -> str | None:
    """Mostly a little after the last, as saves come; now and then none, one SQLite does
    not read, one written otherwise, one from long before, or the very same."""
    roll = rng.random()
    if roll < 0.04:
        return None
    if roll < 0.07:
        return "yesterday, roughly"
    if roll < 0.10:
        return (clock - timedelta(seconds=rng.randint(0, 3 * CONTEXT_SECONDS))).isoformat()
    if roll < 0.15:
        return (clock - timedelta(hours=rng.randint(1, 48))).strftime("%Y-%m-%d %H:%M:%S")
    return clock.strftime("%Y-%m-%d %H:%M:%S")


def fill(service: MemoryService, rng: random.Random) -> None:
    """Entries with gaps in their places, places shared, core entries among them, and
    times that jump back and forth across the context's time span."""
    with write_transaction(service.db):
        for agent in AGENTS:
            seq, clock = 0, START
            # The last agent's places lie too far apart to be read at once.
            gaps = [0, 1, 1, 1, 1, 1, 2, 3, 9] + ([200] if agent == AGENTS[-1] else [])
            for n in range(600):
                seq += rng.choice(gaps)
                clock += timedelta(seconds=rng.choice([0, 5, 5, 60, 60, 300, 900, 2000, 7200]))
                scope = CORE if rng.random() < 0.05 else ARCHIVAL
                service.db.execute(
                    "INSERT INTO memory_entries(agent, scope, ts, content, entry_id, seq, source)"
                    " VALUES (?, ?, ?, ?, ?, ?, 'db')",
                    [agent, scope, a_time(rng, clock), f"{agent} said thing {n}", None, seq],
                )


def context_by_query(db: Executes, agent: str, scope: str, ts: str | None, seq: int) -> str:
    """What a query for this one row finds: its CONTEXT_ENTRIES archival neighbours among
    the CONTEXT_PLACES places before it, written within CONTEXT_SECONDS before it, the
    nearest first."""
    if scope != ARCHIVAL or ts is None:
        return ""
    before = db.execute(
        "SELECT content FROM memory_entries WHERE agent = ? AND scope = ? AND seq < ?"
        " AND seq >= ? AND ts IS NOT NULL AND ts <= ?"
        " AND ts >= strftime('%Y-%m-%d %H:%M:%S', ?, ?) ORDER BY seq DESC, id DESC LIMIT ?",
        [
            agent,
            ARCHIVAL,
            seq,
            seq - CONTEXT_PLACES,
            ts,
            ts,
            f"-{CONTEXT_SECONDS} seconds",
            CONTEXT_ENTRIES,
        ],
    )
    return " ".join(index_text(content) for (content,) in before)


def after_by_query(db: Executes, agent: str, seq: int) -> set[int]:
    """What a query for one place finds: the archival entries right after it."""
    found = db.execute(
        "SELECT id FROM memory_entries WHERE agent = ? AND scope = ? AND seq > ?"
        " ORDER BY seq, id LIMIT ?",
        [agent, ARCHIVAL, seq, CONTEXT_ENTRIES],
    )
    return {row_id for (row_id,) in found}


class CountingQueries:
    """A database connection that counts the statements run through it."""

    def __init__(self, db: Executes) -> None:
        self.db = db
        self.queries = 0

    def execute(self, sql: str, parameters: Any = ()) -> Any:
        self.queries += 1
        return self.db.execute(sql, parameters)


def taken_in_counting_queries(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[tuple[str, str, str | None, int, str]], list[IndexRow]]:
    """The words indexes take every row in: each BM25 row's entry (agent, scope, ts, seq)
    with the context it was given (checked against a query for it), and the rows whose
    context was asked for alone."""
    one_by_one: list[IndexRow] = []
    by_query = BM25Index._context

    def counted(index: BM25Index, db: Executes, row: IndexRow) -> str:
        one_by_one.append(row)
        return by_query(index, db, row)

    monkeypatch.setattr(BM25Index, "_context", counted)
    service.upkeep.catch_up_indexes()
    taken = service.index_db.execute(
        "SELECT e.agent, e.scope, e.ts, e.seq, t.context FROM memory_terms t"
        " JOIN memory_terms_keys k ON k.key = t.rowid JOIN memory_entries e ON e.id = k.row_id"
    ).fetchall()
    for agent, scope, ts, seq, context in taken:
        assert context == context_by_query(service.index_db, agent, scope, ts, seq), (agent, seq)
    return taken, one_by_one


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_rows_context_is_what_a_query_for_it_finds(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    fill(service, random.Random(seed))
    taken, asked_alone = taken_in_counting_queries(service, monkeypatch)
    assert len(taken) == 3 * 600
    assert any(context for *_, context in taken)
    # Those of the first agents were mostly found among the neighbours read at once.
    dense = [e for e in taken if e[0] != AGENTS[-1] and e[1] == ARCHIVAL and e[2] is not None]
    assert sum(row.agent != AGENTS[-1] for row in asked_alone) < len(dense) * 0.6


def test_saves_arriving_together_find_their_contexts_without_a_query_each(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    with write_transaction(service.db):
        for agent in AGENTS:
            for n in range(500):
                ts = (START + timedelta(seconds=10 * n)).strftime("%Y-%m-%d %H:%M:%S")
                service.db.execute(
                    "INSERT INTO memory_entries(agent, scope, ts, content, seq, source)"
                    " VALUES (?, ?, ?, ?, ?, 'db')",
                    [agent, ARCHIVAL, ts, f"{agent} said thing {n}", n + 1],
                )
    taken, asked_alone = taken_in_counting_queries(service, monkeypatch)
    assert len(taken) == 3 * 500
    assert all(context for agent, scope, ts, seq, context in taken if seq > 1)
    assert asked_alone == []  # each step's contexts were all in what it read


def insert_archival(
    service: MemoryService, agent: str, entries: list[tuple[int, datetime]]
) -> None:
    with write_transaction(service.db):
        for n, (seq, when) in enumerate(entries):
            service.db.execute(
                "INSERT INTO memory_entries(agent, scope, ts, content, seq, source)"
                " VALUES (?, ?, ?, ?, ?, 'db')",
                [agent, ARCHIVAL, when.strftime("%Y-%m-%d %H:%M:%S"), f"{agent} note {n}", seq],
            )


def test_entries_hours_apart_have_no_context_and_are_taken_in_without_a_query_each(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing written within the time span before an entry: the look-up ends at its
    CONTEXT_PLACES places, in what was read, and never runs down the whole memory."""
    for agent in AGENTS:
        insert_archival(service, agent, [(n + 1, START + timedelta(hours=n)) for n in range(400)])
    taken, asked_alone = taken_in_counting_queries(service, monkeypatch)
    assert len(taken) == 3 * 400
    assert not any(context for *_, context in taken)
    assert asked_alone == []


def test_an_entry_more_places_back_than_the_context_reaches_is_not_its_context(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within the time span but CONTEXT_PLACES + 1 places back, behind entries written
    long before: not a neighbour, whether read at once (ada) or asked for alone (bo, one
    of whose places lies too far from the others to read them at once)."""
    for agent in ("ada", "bo"):
        entries = [(1, START)]
        entries += [(n, START - timedelta(hours=3)) for n in range(2, CONTEXT_PLACES + 2)]
        entries += [(CONTEXT_PLACES + 2 + n, START + timedelta(seconds=n)) for n in range(3)]
        if agent == "bo":
            entries.append((1000, START + timedelta(hours=1)))
        insert_archival(service, agent, entries)
    taken, asked_alone = taken_in_counting_queries(service, monkeypatch)
    assert {row.agent for row in asked_alone} == {"bo"}
    contexts = {(agent, seq): context for agent, _, _, seq, context in taken}
    for agent in ("ada", "bo"):
        assert contexts[(agent, CONTEXT_PLACES + 2)] == ""  # note 0 lies a place too far
        assert contexts[(agent, CONTEXT_PLACES + 3)] == f"{agent} note 17"
        assert contexts[(agent, CONTEXT_PLACES + 4)] == f"{agent} note 18 {agent} note 17"


@pytest.mark.parametrize("seed", [4, 5])
def test_the_rows_whose_context_a_changed_row_is_are_those_a_query_per_place_finds(
    service: MemoryService, seed: int
) -> None:
    rng = random.Random(seed)
    fill(service, rng)
    service.upkeep.catch_up_indexes()
    db = service.index_db
    ids = [row_id for (row_id,) in db.execute("SELECT id FROM memory_entries ORDER BY id")]
    places = {
        row_id: (agent, scope, seq)
        for row_id, agent, scope, seq in db.execute(
            "SELECT id, agent, scope, seq FROM memory_entries"
        )
    }
    bm25 = service.upkeep.indexes["bm25"]
    for size in (1, 2, 7, 60, 400):
        start = rng.randrange(len(ids) - size)
        run = ids[start : start + size]
        for changed in (run, sorted(rng.sample(ids, size))):
            expected: set[int] = set()
            for row_id in changed:
                agent, scope, seq = places[row_id]
                if scope == ARCHIVAL:
                    expected |= after_by_query(db, agent, seq)
            counted = CountingQueries(db)
            assert bm25.dependents(counted, changed) == sorted(expected)
            if changed is run and size >= 60:  # a run of rows is read at once, not a row each
                assert counted.queries <= 10, counted.queries
