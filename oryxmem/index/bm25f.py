"""FTS5's bm25(), computed from an agent's terms held in memory (numpy).

FTS5 scores a row for a query of single terms (fts5_aux.c, fts5Bm25Function) as

    sum over the terms: idf * f * (K1 + 1) / (f + K1 * (1 - B + B * length / average))

where f is the term's occurrences in each column of the row times that column's
weight, length the row's tokens over all its columns, average the table's tokens per
row, and idf = log((rows - holding + 0.5) / (holding + 0.5)), 1e-6 where that is not
above 0, with rows and holding (the rows that hold the term) counted over the whole
table, every agent's rows. FTS5 reads each matched row's length from its docsize
table and walks its positions, about 0.8 µs a row; held here, an agent's terms score
the same rows to the last few bits of a double in a fraction of that (a query's word
held by 500 of 1,000 entries: 57 µs against 550 to 930).

A row's terms are what the FTS5 table holds: terms.py's terms joined by spaces, which
FTS5's unicode61 tokenizer splits where str.split() does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from oryxmem.store.db import Executes

K1 = 1.2  # FTS5's bm25() constants
B = 0.75
IDF_FLOOR = 1e-6  # FTS5's idf for a term held by half the rows or more


@dataclass(frozen=True)
class TableTotals:
    """What FTS5's averages record says of the whole table."""

    rows: int
    tokens: int  # over every column

    @property
    def average(self) -> float:
        return self.tokens / self.rows if self.rows else 0.0


def read_totals(db: Executes, table: str) -> TableTotals:
    """The table's rows and tokens, from FTS5's averages record (its %_data row 1: the
    row count, then each column's tokens, as SQLite varints)."""
    found = db.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    if found is None or not found[0]:
        return TableTotals(0, 0)
    counts = varints(bytes(found[0]))
    return TableTotals(counts[0], sum(counts[1:]))


def varints(blob: bytes) -> list[int]:
    """SQLite's varints, one after another: 7 bits a byte, high bit set but on the last;
    a ninth byte gives all its 8 bits."""
    values: list[int] = []
    at = 0
    while at < len(blob):
        value = 0
        for place in range(9):
            byte = blob[at]
            at += 1
            if place == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values


def idf(rows: int, holding: int) -> float:
    found = math.log((rows - holding + 0.5) / (holding + 0.5))
    return found if found > 0 else IDF_FLOOR


@dataclass(frozen=True)
class Scored:
    """Rows scored for a query, in key order: their keys, scores (higher is better,
    bm25() negated) and whether a term is in the row's own column (the first)."""

    keys: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]
    own: npt.NDArray[np.bool_]


_Floats = npt.NDArray[np.float64]
# a term's rows: their keys, its count in their own column and in their context, their
# lengths
_Postings = tuple[npt.NDArray[np.int64], _Floats, _Floats, _Floats]
_Counts = dict[str, tuple[int, int]]  # term -> its count in a row's own column, its context
# The rows put or dropped since the pairs' table was made are merged into it when they are
# at least MERGE_AFTER, and MERGE_SHARE of its rows.
MERGE_AFTER = 256
MERGE_SHARE = 0.1


def counted(body: str, context: str) -> tuple[_Counts, int]:
    """A row's terms with their counts in each column, and its length in tokens."""
    counts: _Counts = {}
    own_terms, context_terms = body.split(), context.split()
    for term in own_terms:
        mine, around = counts.get(term, (0, 0))
        counts[term] = (mine + 1, around)
    for term in context_terms:
        mine, around = counts.get(term, (0, 0))
        counts[term] = (mine, around + 1)
    return counts, len(own_terms) + len(context_terms)


class AgentTerms:
    """One agent's rows as bm25() reads them, compactly: a table of (term, row) pairs
    sorted by term and then by key, so that a term's rows are one slice of arrays (the
    row's key, the term's count in each column, the row's length). Rows put or dropped
    since the table was made wait beside it until they are worth merging in."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}  # term -> its id (the agent's vocabulary)
        self._starts = np.zeros(1, np.int64)  # term id -> its first pair (and one past the last)
        self._terms = np.zeros(0, np.int32)  # each pair's term id, ...
        self._keys = np.zeros(0, np.int64)  # ... its row's key,
        self._own = np.zeros(0, np.uint16)  # ... the term's count in the row's own column,
        self._around = np.zeros(0, np.uint16)  # ... in its context,
        self._lengths = np.zeros(0, np.uint32)  # ... and the row's length
        self._merged: set[int] = set()  # the keys of the rows in the table
        self._dead: set[int] = set()  # of those, the ones dropped or put again since
        self._fresh: dict[int, tuple[_Counts, int]] = {}  # rows put since the table was made

    @classmethod
    def made(cls, rows: Iterable[tuple[int, str, str]]) -> AgentTerms:
        """The terms of these rows (key, body, context), merged at once."""
        made = cls()
        made._fresh = {key: counted(body, context) for key, body, context in rows}
        made.merge()
        return made

    def __len__(self) -> int:
        return len(self._merged) - len(self._dead) + len(self._fresh)

    def put(self, key: int, body: str, context: str) -> None:
        """The row's terms as the table now holds them (in place of any it held)."""
        self.drop(key)
        self._fresh[key] = counted(body, context)
        self._merge_when_due()

    def drop(self, key: int) -> None:
        self._fresh.pop(key, None)
        if key in self._merged:
            self._dead.add(key)
            self._merge_when_due()

    def _merge_when_due(self) -> None:
        waiting = len(self._fresh) + len(self._dead)
        if waiting >= max(MERGE_AFTER, MERGE_SHARE * len(self._merged)):
            self.merge()

    def merge(self) -> None:
        """Make the table again from its live pairs and the rows put since."""
        live = self._live(self._keys)
        terms, keys, own, around, lengths = [], [], [], [], []
        for key, (counts, length) in self._fresh.items():
            for term, (mine, near) in counts.items():
                terms.append(self._ids.setdefault(term, len(self._ids)))
                keys.append(key)
                own.append(mine)
                around.append(near)
                lengths.append(length)
        every_term = np.concatenate([self._terms[live], np.array(terms, np.int32)])
        every_key = np.concatenate([self._keys[live], np.array(keys, np.int64)])
        order = np.lexsort((every_key, every_term))
        self._terms, self._keys = every_term[order], every_key[order]
        self._own = np.concatenate([self._own[live], np.array(own, np.uint16)])[order]
        self._around = np.concatenate([self._around[live], np.array(around, np.uint16)])[order]
        made = np.concatenate([self._lengths[live], np.array(lengths, np.uint32)])
        self._lengths = made[order]
        pairs = np.bincount(self._terms, minlength=len(self._ids))
        self._starts = np.concatenate([[0], np.cumsum(pairs)]).astype(np.int64)
        self._merged = (self._merged - self._dead) | set(self._fresh)
        self._dead, self._fresh = set(), {}

    def _live(self, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        if not self._dead or not len(keys):
            return np.ones(len(keys), np.bool_)
        dead = np.fromiter(self._dead, np.int64, len(self._dead))
        return ~np.isin(keys, dead)

    def _postings(self, term: str) -> _Postings:
        """The term's rows in key order: their keys, the term's count in each column,
        their lengths."""
        at = self._ids.get(term)
        part = slice(0, 0)
        if at is not None and at + 1 < len(self._starts):
            part = slice(int(self._starts[at]), int(self._starts[at + 1]))
        keys = self._keys[part]
        live = self._live(keys)
        keys = keys[live]
        own = self._own[part][live].astype(np.float64)
        around = self._around[part][live].astype(np.float64)
        lengths = self._lengths[part][live].astype(np.float64)
        fresh = [
            (key, *counts[term], length)
            for key, (counts, length) in self._fresh.items()
            if term in counts
        ]
        if fresh:
            added = np.array([row[1:] for row in fresh], np.float64).T
            keys = np.concatenate([keys, np.array([row[0] for row in fresh], np.int64)])
            own = np.concatenate([own, added[0]])
            around = np.concatenate([around, added[1]])
            lengths = np.concatenate([lengths, added[2]])
            order = np.argsort(keys, kind="stable")
            keys, own, around, lengths = keys[order], own[order], around[order], lengths[order]
        return keys, own, around, lengths

    def scores(
        self,
        terms: Iterable[str],
        holding: dict[str, int],
        totals: TableTotals,
        weights: tuple[float, float],
    ) -> Scored:
        """The rows that hold any of the terms, scored as bm25(table, *weights) scores
        them, negated; ``holding`` counts each term's rows over the whole table, as FTS5
        does."""
        own_weight, context_weight = weights
        keys_of, scores_of, own_of = [], [], []
        for term in terms:  # as FTS5 does, a term asked twice counts twice
            keys, mine, around, lengths = self._postings(term)
            if not len(keys):
                continue
            f = own_weight * mine + context_weight * around
            norm = K1 * (1 - B + B * lengths / totals.average)
            keys_of.append(keys)
            # in FTS5's order of operations, so that each score is the double it gives
            scores_of.append(idf(totals.rows, holding[term]) * ((f * (K1 + 1)) / (f + norm)))
            own_of.append(mine > 0)
        if not keys_of:
            return Scored(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.bool_))
        if len(keys_of) == 1:
            return Scored(keys_of[0], scores_of[0], own_of[0])
        every, at = np.unique(np.concatenate(keys_of), return_inverse=True)
        summed = np.bincount(at, weights=np.concatenate(scores_of), minlength=len(every))
        own = np.bincount(at, weights=np.concatenate(own_of), minlength=len(every)) > 0
        return Scored(every.astype(np.int64), summed.astype(np.float64), own)
