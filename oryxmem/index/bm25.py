"""The ranked keyword arm: BM25 over each entry and the entries written just before it.

An FTS5 table of terms.py's terms (stemmed) with two columns per row:
the entry's own text, and its context, the archival entries that came just before
it in the file (among its CONTEXT_PLACES places before it) and were written within
CONTEXT_SECONDS of it. A memory line is often the answer to the one before it (a
turn of a conversation, the reply to a request), so the words of the question it
answers help find it; they count half as much as its own (BM25F column weights).
Measured on the LoCoMo dev set (bench/recall_quality.py): the context raises recall@5
of this arm from 0.562 to 0.641 (stemming had raised it from 0.529). Measured before
stemming: the entries after an entry do not help, one before helps less than two, and
context at full weight hurts the first hit (R@1 0.333).

Each agent's entries have keys of their own: an entry's row in the FTS5 table is
numbered (its agent's slot << KEY_BITS) | its row id, so a search asks FTS5 for one
range of keys and reads the postings of that agent's entries only. Filtering on an
UNINDEXED agent column instead read each matched entry's stored row, every agent's:
with 100 agents of 1,000 entries a search by words took 2.64 ms p50 and 155 ms p99,
1.57 and 9.4 ms by range. Unlike a term naming the agent, a range adds nothing to an
entry's length, so every score is what it was.
"""

from __future__ import annotations

import json
import secrets
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oryxmem.config import Config
from oryxmem.index import DerivedIndex, Hit, IndexRow, RankedWords
from oryxmem.index.terms import index_text, match_any, query_terms, worth_matching
from oryxmem.store.db import Executes, insert_values, select_in
from oryxmem.store.dbfile import database_files
from oryxmem.store.format import ARCHIVAL
from oryxmem.store.indexfile import ROWS

if TYPE_CHECKING:
    from oryxmem.index.held import AgentState
    from oryxmem.store.db import Database

CONTEXT_ENTRIES = 2  # how many entries before an entry are its context
CONTEXT_SECONDS = 1800  # written no longer than this before it
# ... and among the places just before it: an entry further back is no neighbour of it.
# The bound keeps each look-up short: without it, an entry with nothing written within
# CONTEXT_SECONDS before it (the first of a session) had every earlier entry read, and a
# memory whose entries lie hours apart took quadratic time to take in (20,000 entries
# an hour apart: 53 s; 0.63 s with it).
CONTEXT_PLACES = 16
CONTEXT_WEIGHT = 0.5  # a context term counts half as much as one of the entry's own
# A query term held by more than half of all entries is left out of the query when
# rarer ones remain: FTS5's BM25 gives it no weight (its IDF is clamped to ~0). So is one
# held by more than COMMON_ENTRIES: FTS5 scores every entry a term matches, and on a
# large memory a common word would make one search score most of it (Lucene's cutoff
# frequency does the same). A smaller share than half lost recall@1 on the dev set,
# whose 1,463 entries are far under COMMON_ENTRIES. When every word is that common, the
# rarest is matched, among the newest COMMON_ENTRIES entries that hold it only (the
# semantic arm still ranks them all): at 100,000 entries, a query of only the commonest
# words took up to 100 ms, and takes 5.
COMMON_SHARE = 0.5
COMMON_ENTRIES = 2000
# The rarest of words all that common is found by counting each up to this many entries
# (about 3 ms a word): words held by more are all as common as the query needs to know.
RAREST_CAP = 16 * COMMON_ENTRIES
HELD_KEPT = 1024  # words' counts kept (bm25._held), all of them let go when full
# The entries around a step's rows (their contexts, the rows whose context they are) are
# read for each agent at once: its entries from its first row to its last, and the
# CONTEXT_PLACES before them. Fewer than READ_AT_ONCE rows, or rows further apart than
# SPAN_PER_ROW places each (and SPAN_SLACK), are looked up one by one instead. Saves
# arriving together are neighbours: a query per row cost about a third of taking a row in.
READ_AT_ONCE = 4
SPAN_PER_ROW = 4
SPAN_SLACK = 64


KEY_BITS = 40  # a row id below 2**40; an agent's slot above it
ROW_MASK = (1 << KEY_BITS) - 1
# Each add() or remove() is a step; the keys dropped are logged with theirs for this many
# steps, so that a copy of an agent's terms held in memory (held.py) is brought up to
# date by the keys changed since its step.
GONE_KEPT_STEPS = 4096


class BM25Index(DerivedIndex):
    name = "bm25"
    # 2: stemmed by terms.py (Snowball), not by SQLite's porter tokenizer; 3: keyed by
    # agent (KEY_BITS); 4: each key's step and the keys dropped (held.py reads them)
    version = 4

    def __init__(self, config: Config | None = None) -> None:
        super().__init__(config)
        # The terms of texts prepare() stemmed ahead of add(), which holds the write lock:
        # stemming is most of the work of taking a row in.
        self._terms: dict[str, str] = {}
        # How many entries hold a word (counted up to a cap), by the state of the index
        # they were counted at: a search of the same words at the same state (nothing
        # taken in since) asks FTS5 for none of them again.
        self._held_at: dict[tuple[tuple[Any, ...], str, int], int] = {}

    def create(self, db: Database) -> None:
        db.execute(
            "CREATE VIRTUAL TABLE memory_terms USING fts5(body, context, agent UNINDEXED,"
            " scope UNINDEXED, seq UNINDEXED, tokenize='unicode61 remove_diacritics 0')"
        )
        # Each agent's slot (the high bits of its entries' keys), the last step that
        # changed its entries, and how many it has; each entry's key, and the step that
        # wrote it; the keys dropped, and the step that dropped them.
        db.execute(
            "CREATE TABLE memory_terms_agents (agent TEXT PRIMARY KEY, slot INTEGER NOT NULL,"
            " step INTEGER NOT NULL DEFAULT 0, entries INTEGER NOT NULL DEFAULT 0)"
        )
        db.execute(
            "CREATE TABLE memory_terms_keys (row_id INTEGER PRIMARY KEY, key INTEGER NOT NULL,"
            " step INTEGER NOT NULL)"
        )
        db.execute("CREATE INDEX memory_terms_keys_step ON memory_terms_keys(step)")
        db.execute("CREATE TABLE memory_terms_gone (key INTEGER NOT NULL, step INTEGER NOT NULL)")
        db.execute("CREATE INDEX memory_terms_gone_step ON memory_terms_gone(step)")
        # How many entries hold each term; how many entries there are, the last step,
        # the last step whose dropped keys are no longer logged, and the index's epoch:
        # a random number, new each time it is made (held.py knows its copies by it).
        db.execute("CREATE VIRTUAL TABLE memory_terms_vocab USING fts5vocab(memory_terms, 'row')")
        db.execute(
            "CREATE TABLE memory_terms_count (entries INTEGER NOT NULL, step INTEGER NOT NULL,"
            " forgot INTEGER NOT NULL, epoch INTEGER NOT NULL)"
        )
        db.execute("INSERT INTO memory_terms_count VALUES (0, 0, 0, ?)", [secrets.randbits(62)])

    def drop(self, db: Database) -> None:
        for table in (
            "memory_terms_vocab",
            "memory_terms",
            "memory_terms_count",
            "memory_terms_agents",
            "memory_terms_keys",
            "memory_terms_gone",
        ):
            db.execute(f"DROP TABLE IF EXISTS {table}")

    def remove(self, db: Database, row_ids: Sequence[int]) -> None:
        keys = [int(key) for (key,) in _keys(db, row_ids)]
        if not keys:
            return
        db.conn.executemany("DELETE FROM memory_terms WHERE rowid = ?", [[k] for k in keys])
        db.conn.executemany(
            "DELETE FROM memory_terms_keys WHERE row_id = ?", [[r] for r in row_ids]
        )
        step = _stepped(db, [key >> KEY_BITS for key in keys], -1)
        insert_values(db, "INSERT INTO memory_terms_gone(key, step)", [(k, step) for k in keys])
        forgot = step - GONE_KEPT_STEPS
        if db.execute("DELETE FROM memory_terms_gone WHERE step <= ?", [forgot]).rowcount:
            db.execute("UPDATE memory_terms_count SET forgot = ?", [forgot])

    def prepare(self, rows: Sequence[IndexRow]) -> None:
        """Stem the rows' texts before the write lock is taken (their context is mostly
        the rows just before them, in the same batch)."""
        self._terms = {row.content: index_text(row.content) for row in rows}

    def _text(self, content: str) -> str:
        terms = self._terms.get(content)
        return index_text(content) if terms is None else terms

    def add(self, db: Database, rows: Sequence[IndexRow]) -> None:
        slots: dict[str, int] = {}
        keys = []
        for row in rows:
            if row.row_id > ROW_MASK:
                raise ValueError(f"row id {row.row_id} is past what a key holds (2**{KEY_BITS})")
            if row.agent not in slots:
                slots[row.agent] = _slot_made(db, row.agent)
            keys.append((row.row_id, slots[row.agent] << KEY_BITS | row.row_id))
        step = _stepped(db, [slots[row.agent] for row in rows], 1)
        insert_values(
            db,
            "INSERT INTO memory_terms_keys(row_id, key, step)",
            [(row_id, key, step) for row_id, key in keys],
        )
        contexts = self._contexts(db, rows)
        insert_values(
            db,
            "INSERT INTO memory_terms(rowid, body, context, agent, scope, seq)",
            [
                (key, self._text(r.content), contexts.get(r.row_id, ""), r.agent, r.scope, r.seq)
                for (_, key), r in zip(keys, rows, strict=True)
            ],
        )
        self._terms = {}

    def _selective(self, db: Executes, words: list[str]) -> _Selected:
        """The words worth matching: of those some entry holds, the ones held by no more
        than COMMON_SHARE of all entries and COMMON_ENTRIES, or (when every one is that
        common) the rarest; and whether that one is held by more than COMMON_ENTRIES. A
        word no entry holds never crowds out a common one (in a memory of one entry,
        every word it holds is held by all)."""
        at = tuple(
            db.execute(
                "SELECT c.entries, c.step, c.epoch, s.version, s.cursor, s.backfill_below"
                " FROM memory_terms_count AS c LEFT JOIN index_state AS s ON s.name = ?",
                [self.name],
            ).fetchone()
        )
        most = int(min(COMMON_SHARE * int(at[0]), COMMON_ENTRIES))
        counts: dict[str, int] = {}

        def held(word: str, cap: int) -> int:
            counts[word] = self._held(db, at, word, cap)
            return counts[word]

        # Entries holding each word, counted up to a cap: FTS5's vocabulary table counts
        # them all, reading a common word's whole list (a million entries: 32 ms).
        chosen, rarest = worth_matching(words, held, most, RAREST_CAP)
        too_common = rarest is not None and rarest > COMMON_ENTRIES
        # Each chosen word's count is exact unless it is too common (then it was cut off
        # at RAREST_CAP, and held.py's copies are not used)
        return _Selected(chosen, too_common, {word: counts[word] for word in chosen}, int(at[2]))

    def _held(self, db: Executes, at: tuple[Any, ...], word: str, cap: int) -> int:
        """How many entries hold the word, counted up to cap, with the index at state
        ``at`` (its entries, version, cursor and backfill: a state no change leaves as
        it was)."""
        key = (at, word, cap)
        held = self._held_at.get(key)
        if held is None:
            found = db.execute(
                "SELECT count(*) FROM"
                " (SELECT 1 FROM memory_terms WHERE memory_terms MATCH ? LIMIT ?)",
                [match_any([word]), cap],
            ).fetchone()
            held = int(found[0])
            if at[4] is None:  # no state to know it by (not built here)
                return held
            if len(self._held_at) >= HELD_KEPT:
                self._held_at.clear()
            self._held_at[key] = held
        return held

    def _context(self, db: Executes, row: IndexRow) -> str:
        """The row's context: the text of the CONTEXT_ENTRIES archival entries among the
        CONTEXT_PLACES places before it written within CONTEXT_SECONDS before it, the
        nearest first."""
        if row.scope != ARCHIVAL or row.ts is None:
            return ""
        before = db.execute(
            "SELECT content FROM memory_entries WHERE agent = ? AND scope = ?"
            " AND seq < ? AND seq >= ? AND ts IS NOT NULL AND ts <= ?"
            " AND ts >= strftime('%Y-%m-%d %H:%M:%S', ?, ?)"
            " ORDER BY seq DESC, id DESC LIMIT ?",
            [
                row.agent,
                ARCHIVAL,
                row.seq,
                row.seq - CONTEXT_PLACES,
                row.ts,
                row.ts,
                f"-{CONTEXT_SECONDS} seconds",
                CONTEXT_ENTRIES,
            ],
        )
        return self._joined(content for (content,) in before)

    def _joined(self, contents: Iterable[Any]) -> str:
        return " ".join(self._text(content) for content in contents if isinstance(content, str))

    def _contexts(self, db: Executes, rows: Sequence[IndexRow]) -> dict[int, str]:
        """Each row's context (_context, by row id; none for a row that has none), with
        each agent's entries around its rows read at once (_read_before)."""
        by_agent: dict[str, list[IndexRow]] = {}
        for row in rows:
            if row.scope == ARCHIVAL and row.ts is not None:
                by_agent.setdefault(row.agent, []).append(row)
        contexts: dict[int, str] = {}
        for agent, mine in by_agent.items():
            read = _read_before(db, agent, sorted(row.seq for row in mine))
            if not read:
                contexts.update((row.row_id, self._context(db, row)) for row in mine)
                continue
            earliest = _earliest(db, {r.ts for r in mine if isinstance(r.ts, str)})
            places = [seq for seq, _, _ in read]
            for row in mine:
                found = _before(read, bisect_left(places, row.seq), row, earliest)
                contexts[row.row_id] = (
                    self._context(db, row) if found is None else self._joined(found)
                )
        return contexts

    def dependents(self, db: Executes, row_ids: Sequence[int]) -> list[int]:
        """The entries whose context a changed row is (or was): the ones after it, where
        it is now and where the index last saw it."""
        places: dict[str, set[int]] = {}  # agent -> seqs
        keys = [key for (key,) in _keys(db, row_ids)]
        for table, column, ids in (
            ("memory_entries", "id", row_ids),
            ("memory_terms", "rowid", keys),
        ):
            for agent, scope, seq in select_in(
                db, f"SELECT agent, scope, seq FROM {table} WHERE {column} IN ({{marks}})", ids
            ):
                if scope == ARCHIVAL and seq is not None:
                    places.setdefault(agent, set()).add(int(seq))
        after: set[int] = set()
        for agent, seqs in places.items():
            after.update(_entries_after(db, agent, sorted(seqs)))
        return sorted(after)

    def search(self, db: Executes, agent: str, query: str, limit: int | None) -> list[Hit]:
        """The agent's entries by BM25 (their text, and their context at half weight)."""
        found = self.ranked(db, agent, query, limit)
        return [
            Hit(row_id, score)
            for row_id, score in zip(found.row_ids.tolist(), found.scores.tolist(), strict=True)
        ]

    def ranked(
        self, db: Executes, agent: str, query: str, limit: int | None, *, held: bool = True
    ) -> RankedWords:
        """search(), as arrays, with whether each entry matched by its own words (True)
        or only by its context: the second bm25() weighs the context at 0. Called in a
        read snapshot: the agent's terms held in memory (held.py) are scored when they
        can be (and ``held``), else FTS5's bm25(); the same doubles, in the same order."""
        words = query_terms(query)
        if not words:
            return RankedWords.none()
        state = _agent_state(db, agent)
        if state is None:  # none of its entries taken in
            return RankedWords.none()
        selected = self._selective(db, words)
        if held and not selected.too_common:
            scored = self._held_ranked(db, state, selected, limit)
            if scored is not None:
                return scored
        first = state.first
        match = match_any(selected.words)
        if selected.too_common:  # only the newest COMMON_ENTRIES holding it: BM25 reads no more
            cut = db.execute(
                "SELECT rowid FROM memory_terms WHERE memory_terms MATCH ?"
                " AND rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                [match, first, state.last, COMMON_ENTRIES - 1],
            ).fetchone()
            first = cut[0] if cut is not None else first
        found = db.execute(
            f"SELECT rowid, bm25(memory_terms, 1.0, {CONTEXT_WEIGHT}) AS rank,"
            " bm25(memory_terms, 1.0, 0.0) FROM memory_terms"
            " WHERE memory_terms MATCH ? AND rowid BETWEEN ? AND ? ORDER BY rank LIMIT ?",
            [match, first, state.last, -1 if limit is None else limit],
        ).fetchall()
        if not found:
            return RankedWords.none()
        import numpy as np  # (a search: loaded already for it)

        keys, ranks, own = zip(*found, strict=True)
        # bm25() is negated (lower ranks better); 0 where nothing of the entry matched.
        return RankedWords(
            np.array(keys, np.int64) & ROW_MASK,
            -np.array(ranks, np.float64),
            np.array(own, np.float64) < 0,
        )

    def _held_ranked(
        self, db: Executes, state: AgentState, selected: _Selected, limit: int | None
    ) -> RankedWords | None:
        """ranked() from the agent's terms held in memory; None when they are not."""
        import numpy as np  # (a search: loaded already for it)

        from oryxmem.index import held
        from oryxmem.index.bm25f import read_totals

        if state.entries > held.AGENT_ROWS:  # never held: nothing more to read for it
            return None
        files = database_files(db)
        path = files.get("main", "")
        if not path:  # a database in memory: no thread of another connection can read it
            return None
        found = held.held_terms(path, selected.epoch, files.get(ROWS, "")).scores(
            db,
            state,
            selected.words,
            selected.holding,
            read_totals(db, "memory_terms"),
            (1.0, CONTEXT_WEIGHT),
        )
        if found is None:
            return None
        scored = found.scored
        # best first, ties by key as FTS5's ORDER BY rank leaves them (rows in key order)
        order = np.lexsort((scored.keys, -scored.scores))[:limit]
        return RankedWords(
            scored.keys[order] & ROW_MASK, scored.scores[order], scored.own[order], found.texts
        )


@dataclass(frozen=True)
class _Selected:
    """The query's words worth matching (BM25Index._selective), whether the one left is
    too common, how many entries hold each, and the index's epoch."""

    words: list[str]
    too_common: bool
    holding: dict[str, int]
    epoch: int


def _agent_state(db: Executes, agent: str) -> AgentState | None:
    """The agent's keys, last step and entries (None: none of its entries taken in)."""
    from oryxmem.index.held import AgentState  # (numpy with it: a search, not a save)

    found = db.execute(
        "SELECT slot, step, entries FROM memory_terms_agents WHERE agent = ?", [agent]
    ).fetchone()
    if found is None:
        return None
    slot, step, entries = (int(value) for value in found)
    return AgentState(slot, slot << KEY_BITS, slot << KEY_BITS | ROW_MASK, step, entries)


def _stepped(db: Database, slots: Sequence[int], sign: int) -> int:
    """A new step that adds (sign 1) or drops (-1) an entry of each of these slots'
    agents (a slot once for each entry): the step."""
    db.execute(
        "UPDATE memory_terms_count SET entries = entries + ?, step = step + 1",
        [sign * len(slots)],
    )
    step = int(db.execute("SELECT step FROM memory_terms_count").fetchone()[0])
    db.conn.executemany(
        "UPDATE memory_terms_agents SET step = ?, entries = entries + ? WHERE slot = ?",
        [(step, sign * count, slot) for slot, count in Counter(slots).items()],
    )
    return step


def _slot(db: Executes, agent: str) -> int | None:
    """The agent's slot: the high bits of its entries' keys (None: it has none yet)."""
    found = db.execute("SELECT slot FROM memory_terms_agents WHERE agent = ?", [agent]).fetchone()
    return None if found is None else int(found[0])


def _slot_made(db: Executes, agent: str) -> int:
    """The agent's slot, made now when it has none (the next after the last one made)."""
    slot = _slot(db, agent)
    if slot is None:
        slot = int(
            db.execute("SELECT coalesce(max(slot) + 1, 0) FROM memory_terms_agents").fetchone()[0]
        )
        db.execute("INSERT INTO memory_terms_agents(agent, slot) VALUES (?, ?)", [agent, slot])
    return slot


def _keys(db: Executes, row_ids: Sequence[int]) -> list[tuple[int]]:
    """The keys of these rows' entries in the FTS5 table (of those taken in)."""
    return list(
        select_in(db, "SELECT key FROM memory_terms_keys WHERE row_id IN ({marks})", row_ids)
    )


def _earliest(db: Executes, stamps: set[str]) -> dict[str, str | None]:
    """For each entry time, the earliest its context may have been written
    (CONTEXT_SECONDS before it), as SQLite reads the time (None: not a time it reads)."""
    if not stamps:
        return {}
    found = db.execute(
        "SELECT value, strftime('%Y-%m-%d %H:%M:%S', value, ?) FROM json_each(?)",
        [f"-{CONTEXT_SECONDS} seconds", json.dumps(sorted(stamps))],
    )
    return dict(found.fetchall())


def _worth_reading(seqs: list[int]) -> bool:
    """Are an agent's places (sorted) enough, and near enough each other, for its entries
    around them to be read at once?"""
    return len(seqs) >= READ_AT_ONCE and seqs[-1] - seqs[0] <= SPAN_PER_ROW * len(seqs) + SPAN_SLACK


def _read_before(db: Executes, agent: str, seqs: list[int]) -> list[Any]:
    """The agent's archival entries (seq, ts, content) from CONTEXT_PLACES places before
    the first of these places (sorted) to the last, in order: every row's context lies
    among them. None when they are not worth reading at once (each row's context is then
    asked for alone)."""
    if not _worth_reading(seqs):
        return []
    found = db.execute(
        "SELECT seq, ts, content FROM memory_entries WHERE agent = ? AND scope = ?"
        " AND seq >= ? AND seq < ? ORDER BY seq, id",
        [agent, ARCHIVAL, seqs[0] - CONTEXT_PLACES, seqs[-1]],
    )
    return found.fetchall()


def _before(
    read: Sequence[Any], at: int, row: IndexRow, earliest: dict[str, str | None]
) -> list[Any] | None:
    """The contents of the row's context among the entries read (seq, ts, content; those
    before it end at ``at``; the read holds every place of its CONTEXT_PLACES), the nearest
    first, as _context's query picks them; None when a time is not text (the query
    compares it as SQLite does). ``earliest`` holds every text time of the step's rows."""
    if not isinstance(row.ts, str):
        return None
    since = earliest[row.ts]
    if since is None:  # not a time SQLite reads: the query matches nothing
        return []
    picked: list[Any] = []
    for place in range(at - 1, -1, -1):
        seq, ts, content = read[place]
        if seq < row.seq - CONTEXT_PLACES:
            break
        if ts is None:
            continue
        if not isinstance(ts, str):
            return None
        if since <= ts <= row.ts:
            picked.append(content)
            if len(picked) == CONTEXT_ENTRIES:
                break
    return picked


def _entries_after(db: Executes, agent: str, seqs: list[int]) -> list[int]:
    """The ids of the CONTEXT_ENTRIES archival entries after each of the agent's places
    (``seqs``, sorted): its entries from the first place to the last and the few after
    them, read at once; one query per place when they lie far apart."""
    after = "SELECT seq, id FROM memory_entries WHERE agent = ? AND scope = ? AND seq > ?"
    if not _worth_reading(seqs):
        return [
            row_id
            for seq in seqs
            for _, row_id in db.execute(
                f"{after} ORDER BY seq, id LIMIT ?", [agent, ARCHIVAL, seq, CONTEXT_ENTRIES]
            )
        ]
    read = db.execute(
        f"{after} AND seq <= ? ORDER BY seq, id", [agent, ARCHIVAL, seqs[0], seqs[-1]]
    ).fetchall()
    read += db.execute(
        f"{after} ORDER BY seq, id LIMIT ?", [agent, ARCHIVAL, seqs[-1], CONTEXT_ENTRIES]
    ).fetchall()
    places = [seq for seq, _ in read]
    ids: list[int] = []
    for seq in seqs:
        at = bisect_right(places, seq)
        ids.extend(row_id for _, row_id in read[at : at + CONTEXT_ENTRIES])
    return ids
