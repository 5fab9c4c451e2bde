"""Search: the arms, and how their answers are fused into one ranking (docs/design.md §11).

Two arms answer a query: the ranked keyword arm (index/bm25.py: BM25 over an entry
and the entries just before it) and the semantic arm (index/vectors.py: cosine
similarity of embeddings). Hybrid search puts each arm's scores on [0, 1] (BM25
divided by its best, cosine min-max over the agent's entries) and adds them
with weights, KEYWORD_WEIGHT and SEMANTIC_WEIGHT, so a score is from 0 to 1; a row
whose fused score is 0 (the bottom of the scale of the one arm that brought it) is
not a hit.

Every choice here was kept only because bench/recall_quality.py (the LoCoMo dev
set: 354 questions over three long conversations) showed it helps; docs/search.md
has the table. The keyword arm carries most of it (with its context column,
recall@5 0.641 alone); the semantic arm adds what words miss (0.660 fused), in
every category, and finds paraphrases words cannot ('what does the user drink'
for 'likes tea'). What the numbers rejected: reciprocal-rank fusion (R@5 0.458
against 0.522 for BM25 without context then: a weak arm's top ranks count as much as
a strong one's), pseudo-relevance feedback on either arm (R@10 +0.01 at most,
R@1 -0.04 to -0.08), neighbour scores added after fusion (below the context
column), embedding an entry together with its neighbours (0.354 against 0.342
alone, far below the keyword arm's context), the multilingual e5-small model
(ten times the time of MiniLM, a gain under 0.02).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from oryxmem.helper import own_helper
from oryxmem.index import Hit
from oryxmem.index.vectors import Scores, normalised_top
from oryxmem.store.db import Executes, select_in


class WordsArm(Protocol):
    """An index that ranks rows by their words (registry: arm "words"; bm25.py's)."""

    def ranked(
        self, db: Executes, agent: str, query: str, limit: int | None
    ) -> list[tuple[Hit, bool]]:
        """Rows best first, each with whether its own words matched (else its context)."""
        ...


class MeaningArm(Protocol):
    """An index that scores rows by meaning (registry: arm "meaning"; vectors.py's)."""

    def scorer(self, db: Executes, agent: str) -> Callable[[str, int], Scores]:
        """What scoring asks of the database, read now; the rest as a function of the
        query and the limit that asks it nothing: the limit best rows' similarity to the
        query, the least of all, and how many rows it could not score."""
        ...


MODES = ("hybrid", "semantic", "keyword")
# On the dev set every weight of the semantic arm from 0.1 to 0.3 beats the keyword arm
# alone in every category; 0.2 is the middle, and the best at recall@1.
KEYWORD_WEIGHT = 0.8
SEMANTIC_WEIGHT = 0.2
# An entry that holds the whole query, as typed (casefolded), comes before the others
# (arm "exact"): what keyword recall returns is never lost by ranking (the dev set's
# questions are never held whole by a turn: the figures do not move).
EXACT_MIN_CHARS = 3  # shorter queries are words: the keyword arm ranks them
# Candidates each arm brings to the fusion: a hit that is in neither arm's first this
# many cannot make the top of a search for the few entries an agent asks for.
POOL = 200
_NOT_SCORED = (0.0, 0.0)  # (scaled, cosine) of a row the semantic arm did not bring
# What found a row, by (whole query, its own words, its context only, its meaning).
_ARMS = {
    flags: tuple(
        arm
        for arm, yes in zip(("exact", "keyword", "context", "semantic"), flags, strict=True)
        if yes
    )
    for flags in itertools.product((False, True), repeat=4)
}


@dataclass(frozen=True)
class Ranked:
    """One row a search found: its fused score, and what found it: its own words
    (keyword), the words of the entries just before it (context), its meaning (semantic)."""

    row_id: int
    score: float  # the arms' scores fused: 0 (nothing) to 1 (the best of every arm)
    arms: tuple[str, ...]
    similarity: float  # cosine to the query (0 when the semantic arm did not look)


@dataclass(frozen=True)
class Ranking:
    ranked: list[Ranked]
    unembedded: int  # rows the semantic arm has not embedded yet (it answered without them)


def rank(
    db: Executes,
    agent: str,
    query: str,
    limit: int,
    mode: str,
    keyword: WordsArm,
    vectors: MeaningArm | None,
) -> Ranking:
    """The agent's rows for a query, best first. Without vectors (recall.embedder = none)
    every mode is the keyword arm."""
    if vectors is None:
        mode = "keyword"
    keyword_scores: dict[int, float] = {}
    own: set[int] = set()  # found by their own words, not only by the entries before them
    # Hybrid: the query's embedding and the scan (no database, the GIL let go) run on the
    # caller's helper thread while the keyword arm asks SQLite: on two cores a search at
    # 100,000 entries waits for the longer of the two, not for both.
    meaning = None
    if vectors is not None and mode == "hybrid":
        meaning = own_helper().submit(vectors.scorer(db, agent), query, POOL)
    exact: set[int] = set()
    if mode in ("hybrid", "keyword"):
        keyword_scores, own = _keyword_arm(db, agent, query, keyword)
        exact = _holding_whole(db, query, keyword_scores.keys())  # (the meaning arm runs)
    semantic_scores: dict[int, tuple[float, float]] = {}  # row -> (scaled, cosine)
    unembedded = 0
    if vectors is not None and mode in ("hybrid", "semantic"):
        found = meaning.result() if meaning is not None else vectors.scorer(db, agent)(query, POOL)
        semantic_scores = normalised_top(found.row_ids, found.similarity, POOL, found.lowest)
        unembedded = found.unembedded
    if mode == "hybrid":
        exact |= _holding_whole(db, query, semantic_scores.keys() - keyword_scores.keys())
    candidates = keyword_scores.keys() | semantic_scores.keys()
    keyword_weight, semantic_weight = {
        "hybrid": (KEYWORD_WEIGHT, SEMANTIC_WEIGHT),
        "keyword": (1.0, 0.0),
        "semantic": (0.0, 1.0),
    }[mode]
    # Those holding the whole query first, then by score; ties: the newer first. Each
    # candidate's sort key (not exact, -score, -row id) leads its tuple, so the best are
    # chosen by comparing tuples alone.
    scored: list[tuple[bool, float, int, tuple[str, ...]]] = []
    for row_id in candidates:
        scaled = semantic_scores.get(row_id, _NOT_SCORED)[0]
        words = keyword_scores.get(row_id)
        score = keyword_weight * (words or 0.0) + semantic_weight * scaled
        is_exact = row_id in exact
        if score <= 0 and not is_exact:
            continue  # the bottom of an arm's scale: nothing found it, in truth
        by_own = row_id in own
        # credited to the keyword arm only where an entry's own words match; one found
        # only by the words of the entries before it says "context"
        arms = _ARMS[is_exact, by_own, words is not None and not by_own, row_id in semantic_scores]
        scored.append((not is_exact, -score, -row_id, arms))
    ranked = [
        Ranked(-row_id, -score, arms, semantic_scores.get(-row_id, _NOT_SCORED)[1])
        for _, score, row_id, arms in heapq.nsmallest(limit, scored)
    ]
    return Ranking(ranked, unembedded)


def _keyword_arm(
    db: Executes, agent: str, query: str, keyword: WordsArm
) -> tuple[dict[int, float], set[int]]:
    """BM25F's scores scaled to the best (1.0), and the rows found by their own words."""
    hits = keyword.ranked(db, agent, query, POOL)
    best = max((hit.score for hit, _ in hits), default=0.0)
    scores = {hit.row_id: hit.score / best for hit, _ in hits if best > 0}
    return scores, {hit.row_id for hit, by_own_words in hits if by_own_words}


def _holding_whole(db: Executes, query: str, candidates: Collection[int]) -> set[int]:
    """The candidates whose content holds the whole query (casefolded). An entry that does
    holds all its words, so the arms brought it: there is nowhere else to look."""
    folded = query.strip().casefold()
    if len(folded) < EXACT_MIN_CHARS:
        return set()
    return {
        row_id
        for row_id, content in select_in(
            db, "SELECT id, content FROM memory_entries WHERE id IN ({marks})", list(candidates)
        )
        if isinstance(content, str) and folded in content.casefold()
    }
