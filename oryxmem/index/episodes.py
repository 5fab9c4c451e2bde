"""Episodic memory: the rounds of past sessions, a derived index (docs/design.md §12).

A round is a user message and the replies up to the next user message (messages
before a session's first user message make a round of their own), with its session,
its number in the session (from 0) and the time of its first message. Its text is
"role: content" per message, the user's message cut to USER_CHARS and the whole round
to ROUND_CHARS (a long tool output says little a search could use).

The source is ``sessions.messages_json``; the index keeps, per session, how many
messages it has taken in (``episode_state``), so catching up reads only the sessions
whose count moved and makes again only their rounds from the last one it had (which
may have grown). Everything here can be dropped and made again (``drop``): the
sessions are the truth.

Ranking fuses two arms of their own, as search.py does: BM25 over the rounds' terms
(terms.py: stemmed, stopwords dropped; the round before as a context column) and the
cosine of their embeddings (the memories' embedder), each put on [0, 1] and weighted.
Two rules about conversations follow: a round takes a share of its best neighbour's
score (a conversation stays on a subject for a few rounds, and the round that holds
the answer often shares few words with the question while the one beside it does),
and a question that names a day (days.py) lifts the rounds said that day.
Measured on the LoCoMo dev set loaded as sessions (bench/episodes_quality.py): each
rule was kept because it lost no question in any of its three conversations, not for
the sum alone (docs/prompt.md has the figures).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from oryxmem.index.days import days_named
from oryxmem.index.terms import index_text, match_any, query_terms, worth_matching
from oryxmem.index.vectors import normalised_top
from oryxmem.store.db import (
    Executes,
    insert_values,
    read_snapshot,
    select_in,
    write_transaction,
)
from oryxmem.store.dbfile import database_file

if TYPE_CHECKING:
    from datetime import date

    import numpy.typing as npt

    from oryxmem.store.db import Database

VERSION = 4  # 2: the round before as a context column; 3: a vector per message; 4: updated_at
RECENT_SECONDS = 2  # a session changed this lately is checked by its messages' count too
USER_CHARS = 1000
ROUND_CHARS = 2000
POOL = 200  # candidates each arm brings to the fusion
KEYWORD_WEIGHT = 0.7
SEMANTIC_WEIGHT = 0.3
NEIGHBOUR_SHARE = 0.15  # of the best score of the round before or after
NAMED_DAY_BOOST = 0.3  # for a round said on a day the question names
CONTEXT_WEIGHT = 0.5  # the round before a round, as its context column (BM25F)
# A query word held by more rounds than this is left out when rarer words remain, and
# when every word is that common the rarest alone is matched (bm25.py's COMMON_ENTRIES,
# for the same reason: FTS5 scores every round a word matches, and such a word weighs
# next to nothing). 1,000 sessions of 10 rounds and a question of common words took
# the prompt 26 ms, 14 of them this search. A conversation of the dev set has a few
# hundred rounds, far under it.
COMMON_ROUNDS = 2000
RAREST_CAP = 16 * COMMON_ROUNDS  # rounds counted to find the rarest of common words
SESSIONS_PER_STEP = 50  # sessions one step of catching up takes in
TABLES = ("episode_terms", "episode_vectors", "episodes", "episode_state", "episode_meta")

# texts -> their L2-normalised vectors (the memories' embedder, as passages); a query ->
# its vector
Embed = Callable[[Sequence[str]], "npt.NDArray[np.float32]"]
EmbedQuery = Callable[[str], "npt.NDArray[np.float32]"]


@dataclass(frozen=True)
class Round:
    number: int
    at: str | None
    text: str
    first_message: int  # the index of its first message in the session
    parts: tuple[str, ...] = ()  # each message's text, as embedded (one vector each)


@dataclass(frozen=True)
class EpisodeHit:
    session: str
    agent: str
    round: int
    at: str | None
    text: str
    score: float
    arms: tuple[str, ...]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def rounds(messages: Sequence[dict[str, Any]]) -> list[Round]:
    """The rounds of a session's messages, in order."""
    found: list[Round] = []
    parts: list[str] = []
    at: str | None = None
    first = 0

    def close() -> None:
        if parts:
            text = _cut("\n".join(parts), ROUND_CHARS)
            found.append(Round(len(found), at, text, first, tuple(p[:USER_CHARS] for p in parts)))

    for index, message in enumerate(messages):
        role = str(message.get("role", ""))
        content = " ".join(str(message.get("content", "")).split())
        if role == "user" and parts:
            close()
            parts = []
        if not parts:
            at, first = message.get("at") or message.get("ts"), index
        parts.append(f"{role}: {_cut(content, USER_CHARS) if role == 'user' else content}")
    close()
    return found


@dataclass(frozen=True)
class _Taken:
    """A session's new rounds, made and embedded, waiting to be written."""

    session: str
    agent: str
    count: int  # its messages when they were read
    keep: int  # the rounds already written that stay
    fresh: list[Round]
    context: list[str]  # the text of the round before each fresh one
    vectors: npt.NDArray[np.float32] | None


class EpisodeIndex:
    """The rounds of every session, searchable; ``embed`` None: by words only."""

    def __init__(
        self, embed: Embed | None, embed_query: EmbedQuery | None, model: str = ""
    ) -> None:
        self.embed = embed
        self.embed_query = embed_query
        self.identity = f"{VERSION}\n{model}"

    @classmethod
    def for_embedder(cls, embedder: Any | None) -> EpisodeIndex:
        """Rounds embedded by the memories' embedder (oryxmem.embed), or by words only."""
        if embedder is None:
            return cls(None, None)
        return cls(
            lambda texts: embedder.embed(list(texts), "passage"),
            embedder.query_vector,
            embedder.model_id,
        )

    # --- tables -------------------------------------------------------------------

    def ensure(self, db: Database) -> None:
        """The tables, made (again) when missing or made for another version or model."""
        if self._is_current(db):
            return
        with write_transaction(db):
            if self._is_current(db):  # another thread made them while this one waited
                return
            self._drop(db)
            db.execute("CREATE TABLE episode_meta (identity TEXT NOT NULL)")
            db.execute("INSERT INTO episode_meta VALUES (?)", [self.identity])
            db.execute(
                "CREATE TABLE episodes (id INTEGER PRIMARY KEY, session TEXT NOT NULL,"
                " agent TEXT NOT NULL, round INTEGER NOT NULL, at TEXT, text TEXT NOT NULL,"
                " UNIQUE (session, round))"
            )
            db.execute("CREATE INDEX episodes_agent ON episodes(agent)")
            db.execute(
                "CREATE VIRTUAL TABLE episode_terms USING fts5(body, context, tokenize='unicode61')"
            )
            db.execute("CREATE TABLE episode_vectors (id INTEGER PRIMARY KEY, vector BLOB)")
            db.execute(
                "CREATE TABLE episode_state (session TEXT PRIMARY KEY, messages INTEGER NOT NULL,"
                " updated_at TEXT)"
            )

    def _is_current(self, db: Database) -> bool:
        """Are the tables there, made for this version and model? Both asked in one read
        snapshot: another thread may drop and make them again between two statements."""
        with read_snapshot(db):
            exists = db.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'episode_meta'"
            ).fetchone()
            if not exists:
                return False
            row = db.execute("SELECT identity FROM episode_meta").fetchone()
        return row is not None and row[0] == self.identity

    def drop(self, db: Database) -> None:
        with write_transaction(db):
            self._drop(db)

    @staticmethod
    def _drop(db: Database) -> None:
        for table in TABLES:
            db.execute(f"DROP TABLE IF EXISTS {table}")

    # --- catching up ------------------------------------------------------------------

    def pending(self, db: Database) -> int:
        """Sessions changed since the index took them in (or gone), read in one snapshot
        (a reindex may drop the tables between two statements)."""
        with read_snapshot(db):
            made = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'episode_state'").fetchone()
            if made is None:
                return int(db.execute("SELECT count(*) FROM sessions").fetchone()[0])
            row = db.execute(
                "SELECT count(*) FROM sessions s LEFT JOIN episode_state e ON e.session = s.id"
                " WHERE e.updated_at IS NOT s.updated_at"
            ).fetchone()
            gone = db.execute(
                "SELECT count(*) FROM episode_state WHERE session NOT IN (SELECT id FROM sessions)"
            ).fetchone()
        return int(row[0]) + int(gone[0])

    def _candidates(self, db: Executes) -> list[tuple[str, int]]:
        """(session, messages taken in) of the sessions that may have changed: their
        updated_at is not the one taken in, or is so recent that a second message of the
        same second may have come (updated_at counts seconds). Reads no messages."""
        recent = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - RECENT_SECONDS))
        rows = db.execute(
            "SELECT s.id, coalesce(e.messages, 0) FROM sessions s"
            " LEFT JOIN episode_state e ON e.session = s.id"
            " WHERE e.updated_at IS NOT s.updated_at OR s.updated_at >= ?",
            [recent],
        )
        return [(str(session), int(had)) for session, had in rows]

    def catch_up(self, db: Database, max_sessions: int = SESSIONS_PER_STEP) -> int:
        """Take in the sessions whose messages changed (at most max_sessions of them):
        their rounds are made (and embedded) with no transaction open, then written in
        one short one. Returns the sessions taken in."""
        self.ensure(db)
        with read_snapshot(db):  # a reindex may drop the tables again at any moment
            if not self._is_current(db):
                return 0  # the next step makes them again and takes everything in
            gone = self._gone(db)
            candidates = self._candidates(db)
        work: list[_Taken] = []
        touched = []  # seen again, nothing new: only their updated_at is kept
        for session, had in candidates:
            if len(work) >= max_sessions:
                break
            row = db.execute(
                "SELECT agent, messages_json, updated_at FROM sessions WHERE id = ?", [session]
            ).fetchone()
            if row is None:
                continue
            agent, raw, updated_at = row
            messages = json.loads(raw)
            if len(messages) == had:
                touched.append((session, had, updated_at))
            else:
                work.append(self._take(session, agent, messages, had))
        if not (work or touched or gone):
            return 0  # nothing to write: the write lock is not taken
        with write_transaction(db):
            # Another connection may have dropped the tables while the rounds were made
            # (a reindex): the next step makes them again and takes everything in.
            if not self._is_current(db):
                return 0
            gone = self._gone(db)
            for taken in work:
                self._write(db, taken)
            for session, count, updated_at in touched:
                self._state(db, session, count, updated_at)
            for session in gone:
                self._forget(db, session, 0)
                db.execute("DELETE FROM episode_state WHERE session = ?", [session])
        return len(work) + len(gone)

    @staticmethod
    def _gone(db: Executes) -> list[str]:
        """The sessions taken in that are no longer there."""
        return [
            str(row[0])
            for row in db.execute(
                "SELECT session FROM episode_state WHERE session NOT IN (SELECT id FROM sessions)"
            )
        ]

    def _take(self, session: str, agent: str, messages: list[Any], had: int) -> _Taken:
        """The rounds of a session from the one that held the last message taken in (it
        may have grown), with their contexts and vectors: made outside any transaction."""
        made = rounds(messages)
        keep = max(sum(1 for r in made if r.first_message < had) - 1, 0) if had else 0
        fresh = made[keep:]
        context = [made[r.number - 1].text if r.number else "" for r in fresh]
        vectors = None
        if self.embed and fresh:  # a vector per message: a round is as close as its best
            vectors = self.embed([part for r in fresh for part in r.parts])
        return _Taken(session, agent, len(messages), keep, fresh, context, vectors)

    @staticmethod
    def _state(db: Database, session: str, count: int, updated_at: str | None) -> None:
        db.execute(
            "INSERT INTO episode_state(session, messages, updated_at) VALUES (?, ?, ?)"
            " ON CONFLICT(session) DO UPDATE SET messages = excluded.messages,"
            " updated_at = excluded.updated_at",
            [session, count, updated_at],
        )

    def _write(self, db: Database, taken: _Taken) -> None:
        session, agent, count, keep = taken.session, taken.agent, taken.count, taken.keep
        fresh, context, vectors = taken.fresh, taken.context, taken.vectors
        now = db.execute(
            "SELECT json_array_length(messages_json), updated_at FROM sessions WHERE id = ?",
            [session],
        ).fetchone()
        if now is None or int(now[0]) != count:
            return  # it changed meanwhile: the next step takes it in
        self._forget(db, session, keep)
        ids = []
        for r in fresh:
            cursor = db.execute(
                "INSERT INTO episodes(session, agent, round, at, text) VALUES (?, ?, ?, ?, ?)",
                [session, agent, r.number, r.at, r.text],
            )
            ids.append(cursor.lastrowid)
        insert_values(
            db,
            "INSERT INTO episode_terms(rowid, body, context)",
            [
                (i, index_text(r.text), index_text(c))
                for i, r, c in zip(ids, fresh, context, strict=True)
            ],
        )
        if vectors is not None:
            blobs, at = [], 0
            for r in fresh:
                blobs.append(vectors[at : at + len(r.parts)].astype(np.float32).tobytes())
                at += len(r.parts)
            insert_values(
                db, "INSERT INTO episode_vectors(id, vector)", list(zip(ids, blobs, strict=True))
            )
        self._state(db, session, count, now[1])

    @staticmethod
    def _forget(db: Database, session: str, from_round: int) -> None:
        ids = [
            row[0]
            for row in db.execute(
                "SELECT id FROM episodes WHERE session = ? AND round >= ?", [session, from_round]
            )
        ]
        for table, key in (
            ("episode_terms", "rowid"),
            ("episode_vectors", "id"),
            ("episodes", "id"),
        ):
            db.conn.executemany(f"DELETE FROM {table} WHERE {key} = ?", [[i] for i in ids])

    # --- searching ----------------------------------------------------------------------

    def search(
        self,
        db: Executes,
        agent: str,
        query: str,
        k: int,
        exclude_session: str | None = None,
    ) -> list[EpisodeHit]:
        """The agent's rounds best for a query (none of ``exclude_session``), best first."""
        other = exclude_session or ""
        keyword: dict[int, float] = {}
        match = match_any(_words_to_match(db, query))
        if match is not None:
            hits = db.execute(
                f"SELECT t.rowid, bm25(episode_terms, 1.0, {CONTEXT_WEIGHT}) AS rank"
                " FROM episode_terms t"
                " JOIN episodes e ON e.id = t.rowid"
                " WHERE episode_terms MATCH ? AND e.agent = ? AND e.session != ?"
                " ORDER BY rank LIMIT ?",
                [match, agent, other, POOL],
            ).fetchall()
            best = max((-rank for _, rank in hits), default=0.0)
            keyword = {row_id: -rank / best for row_id, rank in hits if best > 0}
        semantic = self._semantic(db, agent, query, other)
        weights = (KEYWORD_WEIGHT, SEMANTIC_WEIGHT) if semantic else (1.0, 0.0)
        fused = {
            row_id: weights[0] * keyword.get(row_id, 0.0) + weights[1] * semantic.get(row_id, 0.0)
            for row_id in keyword.keys() | semantic.keys()
        }
        scores = _with_neighbours(db, fused)
        that_day = _said_on(db, agent, other, days_named(query))
        for row_id in that_day:
            scores[row_id] = scores.get(row_id, 0.0) + NAMED_DAY_BOOST
        best_ids = sorted(scores, key=lambda i: (-scores[i], -i))[:k]
        if not best_ids:
            return []
        marks = ",".join("?" * len(best_ids))
        found = {
            row[0]: row
            for row in db.execute(
                f"SELECT id, session, agent, round, at, text FROM episodes WHERE id IN ({marks})",
                best_ids,
            )
        }
        out = []
        for row_id in best_ids:
            _, session, owner, number, at, text = found[row_id]
            arms = tuple(
                arm
                for arm, hit in (
                    ("keyword", row_id in keyword),
                    ("semantic", row_id in semantic),
                    ("neighbour", row_id not in fused and row_id not in that_day),
                    ("day", row_id in that_day),
                )
                if hit
            )
            out.append(EpisodeHit(session, owner, number, at, text, round(scores[row_id], 6), arms))
        return out

    def _semantic(self, db: Executes, agent: str, query: str, other: str) -> dict[int, float]:
        """The POOL rounds closest in meaning, min-max scaled over the agent's rounds."""
        if self.embed_query is None:
            return {}
        query_vector = self.embed_query(query)
        vectors = self._vectors(db, agent, len(query_vector))
        if vectors is None:
            return {}
        ids, sessions, starts, matrix = vectors
        similarity = np.maximum.reduceat(matrix @ query_vector, starts)  # a round: its best
        if other:
            keep = sessions != other
            ids, similarity = ids[keep], similarity[keep]
        return normalised_top(ids, similarity, POOL).as_dict()

    def _vectors(self, db: Executes, agent: str, size: int) -> _Vectors | None:
        """The agent's rounds' ids, sessions, where each one's vectors start, and the
        vectors (one per message), read once and kept while the agent's rounds are the
        same (shared by the process's connections to the same database)."""
        stamp = tuple(
            db.execute("SELECT count(*), max(id) FROM episodes WHERE agent = ?", [agent]).fetchone()
        )
        key = (database_file(db), agent, self.identity)
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        rows = db.execute(
            "SELECT e.id, e.session, v.vector FROM episodes e JOIN episode_vectors v"
            " ON v.id = e.id WHERE e.agent = ? AND length(v.vector) > 0 ORDER BY e.id",
            [agent],
        ).fetchall()
        vectors: _Vectors | None = None
        if rows:
            per_round = np.array([len(row[2]) // (4 * size) for row in rows], dtype=np.int64)
            vectors = (
                np.array([row[0] for row in rows], dtype=np.int64),
                np.array([row[1] for row in rows], dtype=object),
                np.concatenate(([0], np.cumsum(per_round)[:-1])).astype(np.int64),
                np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32).reshape(-1, size),
            )
        with _CACHE_LOCK:
            _CACHE[key] = (stamp, vectors)
        return vectors


def _with_neighbours(db: Executes, scores: dict[int, float]) -> dict[int, float]:
    """Each round's score plus NEIGHBOUR_SHARE of the best of the rounds before and after
    it; a round beside a scored one becomes a candidate too."""
    pairs = select_in(
        db,
        "SELECT e.id, n.id FROM episodes e JOIN episodes n ON n.session = e.session"
        " AND n.round IN (e.round - 1, e.round + 1) WHERE e.id IN ({marks})",
        list(scores),
    )
    best_beside: dict[int, float] = {}
    for scored, beside in pairs:
        best_beside[beside] = max(best_beside.get(beside, 0.0), scores[scored])
    return {
        row_id: scores.get(row_id, 0.0) + NEIGHBOUR_SHARE * best_beside.get(row_id, 0.0)
        for row_id in scores.keys() | best_beside.keys()
    }


def _said_on(db: Executes, agent: str, other: str, days: set[date]) -> set[int]:
    """The agent's rounds (none of session ``other``) that began on one of these days."""
    return {
        int(row[0])
        for row in select_in(
            db,
            "SELECT id FROM episodes WHERE agent = ? AND session != ?"
            " AND substr(at, 1, 10) IN ({marks})",
            sorted(day.isoformat() for day in days),
            [agent, other],
        )
    }


# ids, sessions, where each round's vectors start, the vectors
_Vectors = tuple[
    "npt.NDArray[np.int64]", "npt.NDArray[Any]", "npt.NDArray[np.int64]", "npt.NDArray[np.float32]"
]
_CACHE: dict[tuple[str, str, str], tuple[tuple[Any, ...], _Vectors | None]] = {}
_CACHE_LOCK = threading.Lock()


def _words_to_match(db: Executes, query: str) -> list[str]:
    """The query's words, less those too common to be worth matching (counted only when
    there are more rounds than COMMON_ROUNDS: else no word can be that common)."""
    words = query_terms(query)
    if _most_rounds(db) <= COMMON_ROUNDS:
        return words
    return worth_matching(words, lambda word, cap: _held(db, word, cap), COMMON_ROUNDS, RAREST_CAP)[
        0
    ]


def _most_rounds(db: Executes) -> int:
    """At least as many as the rounds of every agent (their ids count from 1), read off
    the table's last id."""
    return int(db.execute("SELECT coalesce(max(id), 0) FROM episodes").fetchone()[0])


def _held(db: Executes, word: str, cap: int) -> int:
    """How many rounds hold the word (in their text or their context), up to cap."""
    found = db.execute(
        "SELECT count(*) FROM (SELECT 1 FROM episode_terms WHERE episode_terms MATCH ? LIMIT ?)",
        [match_any([word]), cap],
    ).fetchone()
    return int(found[0])
