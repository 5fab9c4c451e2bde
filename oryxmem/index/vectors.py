"""The semantic arm: one embedding per entry, kept in SQLite, searched in memory.

Vectors are stored by the hash of the text they embed (two entries with the same
text share one) as float16, and read the first time the agent is searched into its
PackedVectors (index/packed.py: one byte per component, scanned by faiss): a search
is one scan of the agent's codes (a million in 22 ms on two cores), not a scan of
SQLite. The index is slow to build, so it never follows saves on the
memory thread: the daemon's indexer thread embeds the rows of the next step outside
any transaction (``prepare``), then takes them in with a short write; a search
answers from what is embedded and says how much is not.

A process keeps one copy per agent and brings it up to date from two tables: every
row taken in and every row forgotten carries the number of the step that did it, so
a reader asks only for what changed since the step it last saw, and reads everything
again when it has fallen further behind than the forgotten rows are kept.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from oryxmem.config import Config
from oryxmem.embed import Embedder, load_embedder
from oryxmem.heap import give_back_freed_memory
from oryxmem.index import (
    DerivedIndex,
    Hit,
    IndexRow,
    built_state,
    index_rows,
    newest_changed,
    pending,
)
from oryxmem.index.packed import PackedVectors
from oryxmem.store.db import Executes, insert_values, select_in
from oryxmem.store.dbfile import database_file

if TYPE_CHECKING:
    import numpy.typing as npt

    from oryxmem.store.db import Database

# Forgotten rows are remembered this many steps: a reader further behind reads all again.
GONE_KEPT_STEPS = 2000
# A search embeds the rows an agent changed last that the indexer has not embedded yet
# when they are no more than this (about 1.5 ms each): what was just saved is found by
# meaning at once. More is a backlog (a restore, a pull, a reindex): the indexer embeds
# it, and a search meanwhile answers for those rows by words and says how many they are.
FRESH_ROWS = 16
READ_ROWS = 8192  # rows read at a time into an agent's copy
# An agent with at least this share of the embedded rows is read by one scan of them.
SCAN_SHARE = 0.25
# A scan of no more codes than this (about 0.2 ms, with the least similarity read from
# as many sampled rows) is done on the searching thread when nothing is to be embedded.
QUICK_ROWS = 4096


def text_key(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Scores:
    """What the semantic arm found: the best rows' similarity to the query (about their
    cosine), the least similarity of the agent's rows (None: no row), and how many of
    the agent's rows it could not score (not embedded yet)."""

    row_ids: npt.NDArray[np.int64]
    similarity: npt.NDArray[np.float32]
    unembedded: int
    lowest: float | None = None


def _no_scores(unembedded: int) -> Scores:
    return Scores(np.zeros(0, np.int64), np.zeros(0, np.float32), unembedded)


@dataclass(frozen=True)
class Scorer:
    """A search by meaning with what it asks of the database read already: called with
    the query and a limit, it asks the database nothing (so it may run on another
    thread), and says whether it is quick enough to be run on the caller's."""

    score: Callable[[str, int], Scores]
    rows: int = 0  # the codes a call scans
    embeds: bool = False  # it embeds the rows changed since the indexer's last step
    embedder: Embedder | None = None

    def __call__(self, query: str, limit: int) -> Scores:
        return self.score(query, limit)

    def quick(self, query: str) -> bool:
        """Nothing to embed (the query's embedding is remembered) and a short scan: less
        than handing it to another thread and back costs."""
        known = self.embedder is None or self.embedder.knows(query)
        return known and not self.embeds and self.rows <= QUICK_ROWS


class _Matrices:
    """The matrices of one database in this process, shared by its connections."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.agents: dict[str, PackedVectors] = {}
        self.writes = 0  # vectors this process wrote (its own commits move no data_version)


_MATRICES: dict[tuple[str, int], _Matrices] = {}
_MATRICES_LOCK = threading.Lock()


class VectorIndex(DerivedIndex):
    name = "vectors"
    # 2: memory_vectors is a rowid table, its key a unique index: a step's vectors are
    # appended in order (a step of 256 held the write lock 16 ms when the table was keyed
    # by the text's hash, its writes spread over the table's pages; 1.5 ms so).
    version = 2
    # Rows a step embeds, then writes in one transaction: about a second of work on 2
    # cores. Fewer, larger writes: the write lock is taken less often for the same rows.
    batch = 256
    follows_saves = False

    def __init__(self, config: Config | None = None) -> None:
        super().__init__(config)
        self._embedder: Embedder | None = None
        self._prepared: dict[str, bytes] = {}  # key -> its vector, float16
        self._seen: dict[str, tuple[int, int]] = {}  # agent -> (data_version, writes) looked at

    @classmethod
    def enabled(cls, config: Config) -> bool:
        return str(config.get("recall.embedder")) != "none"

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            embedder = load_embedder(self.config)
            assert embedder is not None, "the vector index is used only with an embedder"
            self._embedder = embedder
        return self._embedder

    def identity(self) -> int:
        """The version and the model: vectors of another model are made again."""
        return self._identity_at(self.version)

    def _identity_at(self, version: int) -> int:
        material = f"{version}\n{self.embedder.model_id}".encode()
        return int(hashlib.blake2b(material, digest_size=6).hexdigest(), 16)

    def carry_over(self, db: Database, stored: int) -> bool:
        """The vectors of this model stored at version 1 (memory_vectors keyed by the
        text's hash) are copied into the table as version 2 keeps them, not embedded
        again: once, a few seconds at 100,000 vectors."""
        if stored != self._identity_at(1):
            return False
        db.execute("ALTER TABLE memory_vectors RENAME TO memory_vectors_1")
        self._create_vectors(db)
        db.execute(
            "INSERT INTO memory_vectors(key, vector) SELECT key, vector FROM memory_vectors_1"
        )
        db.execute("DROP TABLE memory_vectors_1")
        self._forget_copies(db)
        return True

    def close(self) -> None:
        if self._embedder is not None:
            self._embedder.close()

    # --- the tables ---------------------------------------------------------------

    @staticmethod
    def _create_vectors(db: Database) -> None:
        db.execute(
            "CREATE TABLE memory_vectors (id INTEGER PRIMARY KEY, key TEXT NOT NULL,"
            " vector BLOB NOT NULL)"
        )
        db.execute("CREATE UNIQUE INDEX memory_vectors_key ON memory_vectors(key)")

    def create(self, db: Database) -> None:
        self._create_vectors(db)
        db.execute(
            "CREATE TABLE memory_vector_rows (row_id INTEGER PRIMARY KEY, agent TEXT NOT NULL,"
            " key TEXT NOT NULL, step INTEGER NOT NULL)"
        )
        db.execute("CREATE INDEX memory_vector_rows_agent ON memory_vector_rows(agent, step)")
        db.execute("CREATE INDEX memory_vector_rows_key ON memory_vector_rows(key)")
        db.execute("CREATE INDEX memory_vector_rows_step ON memory_vector_rows(step)")
        db.execute(
            "CREATE TABLE memory_vector_gone (step INTEGER NOT NULL, row_id INTEGER NOT NULL,"
            " agent TEXT NOT NULL)"
        )
        db.execute("CREATE INDEX memory_vector_gone_agent ON memory_vector_gone(agent, step)")
        db.execute("CREATE INDEX memory_vector_gone_step ON memory_vector_gone(step)")

    def drop(self, db: Database) -> None:
        for table in ("memory_vector_gone", "memory_vector_rows", "memory_vectors"):
            db.execute(f"DROP TABLE IF EXISTS {table}")
        self._forget_copies(db)

    @staticmethod
    def _forget_copies(db: Executes) -> None:
        path = database_file(db)
        with _MATRICES_LOCK:  # this process's copies, of any model, are stale now
            for key in [key for key in _MATRICES if key[0] == path]:
                del _MATRICES[key]

    def _matrices(self, db: Executes) -> _Matrices:
        key = (database_file(db), self.identity())
        with _MATRICES_LOCK:
            return _MATRICES.setdefault(key, _Matrices())

    @staticmethod
    def _last_step(db: Executes) -> int:
        return int(
            db.execute(
                "SELECT max(coalesce((SELECT max(step) FROM memory_vector_rows), 0),"
                " coalesce((SELECT max(step) FROM memory_vector_gone), 0))"
            ).fetchone()[0]
        )

    def remove(self, db: Database, row_ids: Sequence[int]) -> None:
        if not row_ids:
            return
        found = select_in(
            db,
            "SELECT row_id, agent, key FROM memory_vector_rows WHERE row_id IN ({marks})",
            row_ids,
        )
        if not found:
            return
        step = self._last_step(db) + 1
        db.conn.executemany(
            "DELETE FROM memory_vector_rows WHERE row_id = ?", [[r[0]] for r in found]
        )
        insert_values(
            db,
            "INSERT INTO memory_vector_gone(step, row_id, agent)",
            [(step, r[0], r[1]) for r in found],
        )
        db.conn.executemany(
            "DELETE FROM memory_vectors WHERE key = ?1"
            " AND NOT EXISTS (SELECT 1 FROM memory_vector_rows WHERE key = ?1)",
            [[key] for key in {r[2] for r in found}],
        )
        db.execute("DELETE FROM memory_vector_gone WHERE step < ?", [step - GONE_KEPT_STEPS])
        self._matrices(db).writes += 1

    def prepare(self, rows: Sequence[IndexRow]) -> None:
        """Embed these rows' texts now, outside any transaction, for add() to take: each
        vector by its text's key, as the float16 bytes that are stored."""
        todo = {text_key(r.content): r.content for r in rows}
        todo = {k: t for k, t in todo.items() if k not in self._prepared}
        if todo:
            vectors = self.embedder.embed_backlog(list(todo.values())).astype(np.float16)
            self._prepared.update(zip(todo, (v.tobytes() for v in vectors), strict=True))

    def add(self, db: Database, rows: Sequence[IndexRow]) -> None:
        if not rows:
            return
        keys = [text_key(r.content) for r in rows]
        have = {
            row[0]
            for row in select_in(db, "SELECT key FROM memory_vectors WHERE key IN ({marks})", keys)
        }
        missing = [r for r, k in zip(rows, keys, strict=True) if k not in have]
        self.prepare(missing)  # what no one prepared (it changed meanwhile): small, here
        insert_values(
            db,
            "INSERT OR IGNORE INTO memory_vectors(key, vector)",
            [(k, self._prepared[k]) for k in dict.fromkeys(keys) if k not in have],
        )
        step = self._last_step(db) + 1
        insert_values(
            db,
            "INSERT OR REPLACE INTO memory_vector_rows(row_id, agent, key, step)",
            [(r.row_id, r.agent, k, step) for r, k in zip(rows, keys, strict=True)],
        )
        for key in keys:
            self._prepared.pop(key, None)
        self._matrices(db).writes += 1

    # --- searching ------------------------------------------------------------------

    def _current(self, db: Executes, agent: str) -> PackedVectors:
        """The agent's vectors, brought up to what the tables hold now. Nothing is asked of
        the tables while no other connection has committed and this process has written
        no vectors since the last look (PRAGMA data_version says the first). The caller
        holds the matrices' lock."""
        matrices = self._matrices(db)
        copy = matrices.agents.get(agent)
        seen = (int(db.execute("PRAGMA data_version").fetchone()[0]), matrices.writes)
        if copy is not None and self._seen.get(agent) == seen:
            return copy
        last = self._last_step(db)
        if copy is None or copy.step != last:
            copy = self._bring_up(db, agent, copy, last)
            matrices.agents[agent] = copy
        self._seen[agent] = seen
        return copy

    def _bring_up(
        self, db: Executes, agent: str, copy: PackedVectors | None, last: int
    ) -> PackedVectors:
        oldest_gone = db.execute("SELECT min(step) FROM memory_vector_gone").fetchone()[0]
        # Forgotten rows of the steps before the oldest kept may be missing: read all.
        if copy is None or (oldest_gone is not None and oldest_gone > copy.step + 1):
            copy, since = PackedVectors(), 0
        else:
            since = copy.step
            copy.forget(
                [
                    row[0]
                    for row in db.execute(
                        "SELECT row_id FROM memory_vector_gone WHERE agent = ? AND step > ?",
                        [agent, since],
                    )
                ]
            )
        for row_ids, vectors in _stored(db, agent, since):
            copy.take(row_ids, vectors)
        copy.step = last
        if not since:
            give_back_freed_memory()  # the pieces read
        return copy

    def scorer(self, db: Executes, agent: str) -> Scorer:
        """What a search by meaning asks of the database, read now on the caller's
        connection, and the rest as a function of the query that asks the database
        nothing (the query's embedding and the scan of the codes), so it may run on
        another thread meanwhile. It scores the agent's embedded rows, and the rows it
        changed that the indexer has not embedded yet when they are no more than
        FRESH_ROWS (those are embedded there, and their older vectors, if any, left
        out): a search right after a save finds it by meaning, and one during a backlog
        embeds nothing."""
        if built_state(db, self) is None:  # not built here yet
            unbuilt = pending(db, self, agent) or 0
            return Scorer(lambda query, limit: _no_scores(unbuilt))
        waiting = pending(db, self, agent) or 0
        fresh_ids = newest_changed(db, self, agent, FRESH_ROWS) if waiting <= FRESH_ROWS else []
        unembedded = max(0, waiting - len(fresh_ids))
        fresh = index_rows(db, fresh_ids)
        matrices = self._matrices(db)
        with matrices.lock:
            copy = self._current(db, agent)
            nothing = not copy.count and not fresh
        if nothing:
            return Scorer(lambda query, limit: _no_scores(unembedded))

        def score(query: str, limit: int) -> Scores:
            vector = self.embedder.query_vector(query)  # with no lock held: 2 to 4 ms
            with matrices.lock:  # (another thread may take rows into the copy meanwhile)
                # The codes' scores as they are: within about 0.01 of the cosine
                # (packed.py). Reading the candidates' float16 vectors back to rescore
                # them changed nothing on the dev set (hybrid R@1/5/10 the same to the
                # third place) and cost a third of a search at 1,000 entries.
                row_ids, similarity = copy.best(vector, limit, fresh_ids)
                lowest = copy.lowest(vector, fresh_ids)
            if fresh:
                vectors = self.embedder.embed([r.content for r in fresh], "passage")
                row_ids = np.concatenate([row_ids, np.array([r.row_id for r in fresh], np.int64)])
                similarity = np.concatenate([similarity, (vectors @ vector).astype(np.float32)])
            if len(similarity):
                least = float(similarity.min())
                lowest = least if lowest is None else min(lowest, least)
            return Scores(row_ids, similarity, unembedded, lowest)

        return Scorer(score, copy.used, bool(fresh), self.embedder)

    def search(self, db: Executes, agent: str, query: str, limit: int | None) -> list[Hit]:
        found = self.scorer(db, agent)(query, sys.maxsize if limit is None else limit)
        row_ids, similarity = found.row_ids, found.similarity
        if not len(row_ids):
            return []
        count = len(row_ids) if limit is None else min(limit, len(row_ids))
        top = np.argpartition(-similarity, count - 1)[:count]
        top = top[np.argsort(-similarity[top], kind="stable")]
        return [Hit(int(row_ids[i]), float(similarity[i])) for i in top]


def _stored(
    db: Executes, agent: str, since: int
) -> Iterator[tuple[Sequence[int] | npt.NDArray[np.int64], npt.NDArray[np.float16]]]:
    """The agent's rows taken in after step ``since`` and their vectors, in pieces. All of
    an agent that holds a good share of the vectors is read in one pass over them, in
    their order, not by looking each one up: a million took 11.6 s by key, 2 s so."""
    if not since:
        held = db.execute("SELECT count(*) FROM memory_vector_rows WHERE agent = ?", [agent])
        total = db.execute("SELECT count(*) FROM memory_vector_rows")
        if int(held.fetchone()[0]) >= SCAN_SHARE * int(total.fetchone()[0]):
            rows = db.execute("SELECT row_id, key FROM memory_vector_rows WHERE agent = ?", [agent])
            yield from _scanned(db, rows.fetchall())
            return
    cursor = db.execute(
        "SELECT r.row_id, v.vector FROM memory_vector_rows r JOIN memory_vectors v"
        " ON v.key = r.key WHERE r.agent = ? AND r.step > ?",
        [agent, since],
    )
    while chunk := cursor.fetchmany(READ_ROWS):
        vectors = np.frombuffer(b"".join(row[1] for row in chunk), np.float16)
        yield [row[0] for row in chunk], vectors.reshape(len(chunk), -1)


def _scanned(
    db: Executes, rows: Sequence[tuple[int, str]]
) -> Iterator[tuple[npt.NDArray[np.int64], npt.NDArray[np.float16]]]:
    """These (row id, key) rows' vectors, from one scan of memory_vectors: the keys sorted
    (as bytes: 32 MB a million), each piece of the scan matched by binary search (rows
    with the same text share a key, and each gets its vector)."""
    keys = np.array([key.encode() for _, key in rows], "S32")
    order = np.argsort(keys, kind="stable")
    keys, ids = keys[order], np.array([row_id for row_id, _ in rows], np.int64)[order]
    cursor = db.execute("SELECT key, vector FROM memory_vectors")
    while chunk := cursor.fetchmany(READ_ROWS):
        found = np.array([row[0].encode() for row in chunk], "S32")
        left = np.searchsorted(keys, found, "left")
        counts = np.searchsorted(keys, found, "right") - left
        hit = np.flatnonzero(counts)
        if not len(hit):
            continue
        vectors = np.frombuffer(b"".join(chunk[i][1] for i in hit), np.float16)
        vectors = vectors.reshape(len(hit), -1)
        each = counts[hit]
        firsts = np.repeat(left[hit], each)
        offsets = np.arange(len(firsts)) - np.repeat(np.cumsum(each) - each, each)
        yield ids[firsts + offsets], np.repeat(vectors, each, axis=0)


@dataclass(frozen=True)
class Normalised:
    """The best rows by similarity, as arrays in one order: their ids, their similarity
    min-max scaled to [0, 1], and the similarity itself (both in doubles)."""

    row_ids: npt.NDArray[np.int64]
    scaled: npt.NDArray[np.float64]
    cosines: npt.NDArray[np.float64]

    def as_dict(self) -> dict[int, float]:
        """Row id -> scaled similarity."""
        return dict(zip(self.row_ids.tolist(), self.scaled.tolist(), strict=True))


def normalised_top(
    row_ids: npt.NDArray[np.int64],
    similarity: npt.NDArray[np.float32],
    pool: int,
    lowest: float | None = None,
) -> Normalised:
    """The pool best rows by similarity, min-max scaled over all of the agent's rows (the
    lowest of which is ``lowest`` when the scores are only of the best ones). Rows all
    alike (one row, say) are each the best there is: 1."""
    count = min(pool, len(row_ids))
    if not count:
        return Normalised(np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
    low, high = float(similarity.min()), float(similarity.max())
    if lowest is not None:
        low = min(low, lowest)
    if high <= low:
        return Normalised(
            np.asarray(row_ids[:count], np.int64), np.ones(count), np.full(count, high)
        )
    top = np.argpartition(-similarity, count - 1)[:count]
    cosines = similarity[top].astype(np.float64)  # each as float() gives it
    scaled = (cosines - low) / (high - low)  # in doubles, as Python's own arithmetic
    return Normalised(np.asarray(row_ids[top], np.int64), scaled, cosines)
