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

import itertools
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import numpy.typing as npt

from oryxmem.helper import own_helper
from oryxmem.index import RankedWords
from oryxmem.index.vectors import Normalised, Scorer, normalised_top
from oryxmem.store.db import Executes, select_in


class WordsArm(Protocol):
    """An index that ranks rows by their words (registry: arm "words"; bm25.py's)."""

    def ranked(self, db: Executes, agent: str, query: str, limit: int | None) -> RankedWords:
        """Rows best first, each with whether its own words matched (else its context)."""
        ...


class MeaningArm(Protocol):
    """An index that scores rows by meaning (registry: arm "meaning"; vectors.py's)."""

    def scorer(self, db: Executes, agent: str) -> Scorer:
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
    ranked: Iterator[Ranked]  # best first, each built as it is taken (once)
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
    scorer = None
    if vectors is not None and mode in ("hybrid", "semantic"):
        scorer = vectors.scorer(db, agent)
    # Hybrid: the query's embedding and the scan (no database, the GIL let go) run on the
    # caller's helper thread while the keyword arm asks SQLite: on two cores a search at
    # 100,000 entries waits for the longer of the two, not for both. A quick one (a
    # remembered query, a small agent) is done here after it, with no thread hop.
    meaning = None
    if scorer is not None and mode == "hybrid" and not scorer.quick(query):
        meaning = own_helper().submit(scorer, query, POOL)
    words = RankedWords.none()
    exact: set[int] = set()
    if mode in ("hybrid", "keyword"):
        words = _keyword_arm(db, agent, query, keyword)
        # (the meaning arm runs meanwhile)
        exact = _holding_whole(db, query, words.row_ids.tolist(), words.texts)
    semantic = _NO_MEANING
    unembedded = 0
    if scorer is not None:
        found = meaning.result() if meaning is not None else scorer(query, POOL)
        semantic = normalised_top(found.row_ids, found.similarity, POOL, found.lowest)
        unembedded = found.unembedded
    candidates = _Candidates.of(words, semantic)
    if mode == "hybrid":
        only_meaning = candidates.row_ids[candidates.by_meaning & ~candidates.by_words]
        exact |= _holding_whole(db, query, only_meaning.tolist(), words.texts)
    weights = {
        "hybrid": (KEYWORD_WEIGHT, SEMANTIC_WEIGHT),
        "keyword": (1.0, 0.0),
        "semantic": (0.0, 1.0),
    }[mode]
    return Ranking(candidates.best(exact, weights, limit), unembedded)


_NO_MEANING = Normalised(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))


@dataclass(frozen=True)
class _Candidates:
    """Both arms' rows, each once (ascending), with what each arm gave it (0 and False
    where that arm did not bring it)."""

    row_ids: npt.NDArray[np.int64]
    word_scores: npt.NDArray[np.float64]
    scaled: npt.NDArray[np.float64]
    cosines: npt.NDArray[np.float64]
    by_words: npt.NDArray[np.bool_]
    own: npt.NDArray[np.bool_]  # by its own words, not only by the entries before it
    by_meaning: npt.NDArray[np.bool_]

    @staticmethod
    def of(words: RankedWords, semantic: Normalised) -> _Candidates:
        both = np.concatenate([words.row_ids, semantic.row_ids])
        both.sort()
        row_ids = both[np.concatenate([[True], both[1:] != both[:-1]])] if len(both) else both
        size = len(row_ids)
        at_words = np.searchsorted(row_ids, words.row_ids)
        at_meaning = np.searchsorted(row_ids, semantic.row_ids)
        word_scores, scaled, cosines = np.zeros(size), np.zeros(size), np.zeros(size)
        by_words, own, by_meaning = (np.zeros(size, np.bool_) for _ in range(3))
        word_scores[at_words] = words.scores
        by_words[at_words] = True
        own[at_words] = words.own
        scaled[at_meaning] = semantic.scaled
        cosines[at_meaning] = semantic.cosines
        by_meaning[at_meaning] = True
        return _Candidates(row_ids, word_scores, scaled, cosines, by_words, own, by_meaning)

    def best(self, exact: set[int], weights: tuple[float, float], limit: int) -> Iterator[Ranked]:
        """The ``limit`` best by fused score: those holding the whole query first, then
        by score; ties: the newer (higher row id) first. A row whose fused score is 0
        and that does not hold the query is left out (the bottom of the scale of the one
        arm that brought it: nothing found it, in truth). Each score is the double that
        ``kw * words + sem * scaled`` gives in Python."""
        keyword_weight, semantic_weight = weights
        scores = keyword_weight * self.word_scores + semantic_weight * self.scaled
        holds = np.isin(self.row_ids, np.fromiter(exact, np.int64, len(exact)))
        kept = np.flatnonzero((scores > 0) | holds)
        chosen = kept[np.lexsort((-self.row_ids[kept], -scores[kept], ~holds[kept]))[:limit]]
        # credited to the keyword arm only where an entry's own words match; one found
        # only by the words of the entries before it says "context". Built as taken: a
        # recall that filters the pool (scope, similarity) mostly stops after a few.
        return (
            Ranked(
                int(self.row_ids[at]),
                float(scores[at]),
                _ARMS[
                    bool(holds[at]),
                    bool(self.own[at]),
                    bool(self.by_words[at] and not self.own[at]),
                    bool(self.by_meaning[at]),
                ],
                float(self.cosines[at]),
            )
            for at in chosen.tolist()
        )


def _keyword_arm(db: Executes, agent: str, query: str, keyword: WordsArm) -> RankedWords:
    """BM25F's POOL best, scaled to the best (1.0)."""
    found = keyword.ranked(db, agent, query, POOL)
    best = found.scores.max(initial=0.0)
    if best <= 0:
        return replace(RankedWords.none(), texts=found.texts)
    return RankedWords(found.row_ids, found.scores / best, found.own, found.texts)


def _holding_whole(
    db: Executes, query: str, candidates: Collection[int], texts: Mapping[int, str] | None
) -> set[int]:
    """The candidates whose content holds the whole query (casefolded). An entry that does
    holds all its words, so the arms brought it: there is nowhere else to look. The
    contents the words arm holds (``texts``, casefolded already) are looked at there,
    the others read."""
    folded = query.strip().casefold()
    if len(folded) < EXACT_MIN_CHARS:
        return set()
    exact, unheld = set(), []
    held = texts or {}
    for row_id in candidates:
        text = held.get(row_id)
        if text is None:
            unheld.append(row_id)
        elif folded in text:
            exact.add(row_id)
    exact.update(
        row_id
        for row_id, content in select_in(
            db, "SELECT id, content FROM memory_entries WHERE id IN ({marks})", unheld
        )
        if isinstance(content, str) and folded in content.casefold()
    )
    return exact
