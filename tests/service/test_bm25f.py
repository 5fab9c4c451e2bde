"""bm25() computed from terms held in memory (oryxmem/index/bm25f.py), against FTS5's own."""

from __future__ import annotations

import random
import sqlite3

import pytest

from oryxmem.index import bm25f
from oryxmem.index.bm25f import AgentTerms, read_totals, varints
from oryxmem.index.terms import index_text, match_any

WORDS = [
    "deploy", "tests", "editor", "tea", "release", "notes", "user", "prefers", "dark",
    "mode", "rust", "python", "friday", "meeting", "深色", "模式", "café", "naïve", "x1",
    "2027", "ci", "pipeline", "flaky", "cache",
]  # fmt: skip
KEY_BITS = 40


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9)))


def fts_scores(
    db: sqlite3.Connection, terms: list[str], weights: tuple[float, float], first: int, last: int
) -> dict[int, tuple[float, bool]]:
    found = db.execute(
        f"SELECT rowid, -bm25(t, {weights[0]}, {weights[1]}), bm25(t, 1.0, 0.0) FROM t"
        " WHERE t MATCH ? AND rowid BETWEEN ? AND ?",
        [match_any(terms), first, last],
    )
    return {key: (score, own < 0) for key, score, own in found}


def holding(db: sqlite3.Connection, term: str) -> int:
    return int(
        db.execute("SELECT count(*) FROM t WHERE t MATCH ?", [match_any([term])]).fetchone()[0]
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("merge_after", [8, 10**9])  # merged often; never (all rows fresh)
def test_the_scores_are_fts5s_for_every_query_after_every_kind_of_change(
    seed: int, merge_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bm25f, "MERGE_AFTER", merge_after)
    rng = random.Random(seed)
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE VIRTUAL TABLE t USING fts5(body, context, agent UNINDEXED,"
        " tokenize='unicode61 remove_diacritics 0')"
    )
    held = {agent: AgentTerms() for agent in (1, 2)}

    def write(key: int, agent: int) -> None:
        body, context = index_text(sentence(rng)), index_text(sentence(rng) * rng.randint(0, 2))
        db.execute("DELETE FROM t WHERE rowid = ?", [key])
        db.execute(
            "INSERT INTO t(rowid, body, context, agent) VALUES (?, ?, ?, ?)",
            [key, body, context, agent],
        )
        held[agent].put(key, body, context)

    keys = {agent: [agent << KEY_BITS | n for n in range(1, 120)] for agent in held}
    for agent, mine in keys.items():
        for key in mine:
            write(key, agent)
    for round_ in range(4):
        if round_:  # rows rewritten (an edit, a context that moved) and rows dropped
            for agent, mine in keys.items():
                for key in rng.sample(mine, 15):
                    write(key, agent)
                for key in rng.sample(mine, 5):
                    db.execute("DELETE FROM t WHERE rowid = ?", [key])
                    held[agent].drop(key)
                    mine.remove(key)
        if round_ == 2:
            for agent_terms in held.values():
                agent_terms.merge()
        assert [len(held[agent]) for agent in held] == [len(keys[agent]) for agent in held]
        db.commit()  # FTS5 writes its averages record at the commit (a reader reads it after)
        totals = read_totals(db, "t")
        assert totals.rows == db.execute("SELECT count(*) FROM t").fetchone()[0]
        for _ in range(40):
            terms = [index_text(rng.choice(WORDS)) for _ in range(rng.randint(1, 3))]
            terms = [term for term in terms if term and " " not in term]
            if not terms:
                continue
            counts = {term: holding(db, term) for term in terms}
            for agent, agent_terms in held.items():
                first, last = agent << KEY_BITS, (agent + 1) << KEY_BITS
                for weights in ((1.0, 0.5), (1.0, 0.0)):
                    want = fts_scores(db, terms, weights, first, last)
                    got = agent_terms.scores(terms, counts, totals, weights)
                    assert got.keys.tolist() == sorted(want)
                    for key, score, own in zip(
                        got.keys.tolist(), got.scores.tolist(), got.own.tolist(), strict=True
                    ):
                        assert score == want[key][0]  # the same double
                        assert own == want[key][1]


def test_varints_read_as_sqlite_writes_them() -> None:
    assert varints(bytes([0x05])) == [5]
    assert varints(bytes([0x81, 0x00])) == [128]
    assert varints(bytes([0x81, 0x80, 0x00, 0x7F])) == [16384, 127]
    assert varints(bytes([0xFF] * 8 + [0xFF])) == [2**64 - 1]


def test_a_table_with_no_rows_has_no_totals() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body, context)")
    db.commit()
    assert read_totals(db, "t").rows == 0
    assert AgentTerms().scores(["tea"], {"tea": 0}, read_totals(db, "t"), (1.0, 0.5)).keys.size == 0
