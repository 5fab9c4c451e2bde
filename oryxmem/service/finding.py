"""Finding: search (ranked by the arms of search.py), recall, and the episodes of past
sessions.

Recall keeps the substring contract (memory.recall = keyword) or answers by meaning and
words (hybrid). Alone (``index_upkeep``), a search first reads a file edited since the
last sync and brings the indexes up to the rows, embedding a few batches itself; in the
daemon its threads keep them current and a search only reads.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from itertools import islice
from typing import cast

from oryxmem.errors import (
    BackendUnavailableError,
    EmbedderUnavailableError,
    EmptyKeywordError,
    InvalidContentError,
    InvalidFieldError,
    SemanticSearchOffError,
)
from oryxmem.fileio import FileStat, file_stat
from oryxmem.index import is_caught_up, pending
from oryxmem.index.episodes import EpisodeHit
from oryxmem.index.keyword import KeywordIndex
from oryxmem.search import MODES, POOL, MeaningArm, Ranked, Ranking, WordsArm, rank
from oryxmem.service.results import RecallResult, SearchHit, SearchResult
from oryxmem.service.shared import Shared
from oryxmem.service.upkeep import Upkeep
from oryxmem.store import rows
from oryxmem.store.base import fold_keyword
from oryxmem.store.db import Executes, read_snapshot
from oryxmem.store.format import ARCHIVAL, Entry, has_lone_surrogate
from oryxmem.store.indexdb import open_index_readonly

log = logging.getLogger("oryxmem")
# A MEMORY.md this large costs more to parse (about 35 ms per MB) than a look at its
# rows through a read-only connection: a recall from the CLI asks the rows first.
ROWS_ANSWER_FROM_BYTES = 256 * 1024
# A search with no daemon to embed in the background embeds this many steps of the
# vector index first (256 rows a step: about a thousand rows), then answers and says
# what is left.
SEARCH_EMBED_STEPS = 4
# A hybrid recall returns an entry the keyword arm did not find only when its meaning is
# this close to the question (cosine): a recall of 'ci' in a two-entry memory is not
# answered with both.
RECALL_MIN_SIMILARITY = 0.25  # MiniLM: unrelated sentences score about 0.1


class Finding:
    def __init__(self, shared: Shared, upkeep: Upkeep) -> None:
        self.shared = shared
        self.upkeep = upkeep

    def search(
        self,
        agent: str | None,
        query: str,
        *,
        limit: int | None = None,
        mode: str = "hybrid",
        scope: str | None = None,
        min_similarity: float | None = None,
    ) -> SearchResult:
        """The agent's entries ranked for a query, best first (search.py says how)."""
        ref = self.shared.resolve(agent)
        self._check_query(query, mode)
        count = limit or int(self.shared.config.get("recall.limit"))
        note = None
        if self.shared.index_upkeep:  # alone (no daemon keeps the rows and indexes current):
            self._settle_rows(ref.agent)  # a file edited since the last sync is read first
            self.upkeep.catch_up_indexes()  # the keyword arm sees every row (cheap when current)
            note = self._embed_first(mode)
        mode_used = mode if note is None else "keyword"
        # Every arm brings its POOL best either way; only as many are ranked in full as
        # can be answered: the first `count`, unless a filter may leave some out.
        best = min(count, POOL) if scope is None and min_similarity is None else POOL
        # One read transaction for all of it: the arms, the entries and what is pending
        # are read from one state of both files (and a search begins one, not twenty).
        with read_snapshot(self.shared.index_db) as db:
            ranking, failed = self._rank(db, ref.agent, query, mode_used, best)
            kept = (  # the words found it, or its meaning is close enough
                ranked
                for ranked in ranking.ranked
                if min_similarity is None
                or {"exact", "keyword"} & set(ranked.arms)
                or ranked.similarity >= min_similarity
            )
            hits = self._hits(db, kept, count, scope)
            words = self._words_pending(db, ref.agent) if mode != "semantic" else 0
        return SearchResult(ref, query, mode, hits, ranking.unembedded, note or failed, words)

    def _words_pending(self, db: Executes, agent: str) -> int:
        """How many of the agent's rows the words arm has not taken in (0 but during a
        backlog in the daemon: alone, a search has it take in every row first)."""
        words = self.upkeep.arm("words")
        if words is None or is_caught_up(db, words):
            return 0
        return pending(db, words, agent) or 0

    def _check_query(self, query: str, mode: str) -> None:
        if mode not in MODES:
            raise InvalidFieldError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if not query.strip():
            raise EmptyKeywordError("the search query is empty")
        if has_lone_surrogate(query):
            raise InvalidContentError("the search query holds a lone surrogate (not Unicode)")
        if mode == "semantic" and str(self.shared.config.get("recall.embedder")) == "none":
            raise SemanticSearchOffError(
                "search by meaning is off (recall.embedder = none): search by words"
                " (mode keyword or hybrid), or set recall.embedder"
            )

    def _embed_first(self, mode: str) -> str | None:
        """Alone, before a search by meaning: embed a few steps of the rows not embedded
        yet. A note (search by words only) when the model cannot be used."""
        vectors = self.upkeep.arm("meaning")
        if mode == "keyword" or vectors is None or not self.shared.embeds_in_search:
            return None
        try:
            for _ in range(SEARCH_EMBED_STEPS):
                if not self.upkeep.embed_step():
                    break
        except EmbedderUnavailableError as error:
            if mode == "semantic":
                raise
            return self._words_only(error)
        return None

    @staticmethod
    def _words_only(error: EmbedderUnavailableError) -> str:
        note = f"searched by words only: {error.message}"
        log.info("%s", note)  # the caller is told in the result (the CLI prints it)
        return note

    def _rank(
        self, db: Executes, agent: str, query: str, mode: str, limit: int
    ) -> tuple[Ranking, str | None]:
        """The ``limit`` best by every arm of ``mode``, and a note when it searched by
        words only because the model could not be used."""
        words = self.upkeep.arm("words")
        if words is None:
            raise BackendUnavailableError("no index is the words arm of search (bm25)")
        bm25 = cast(WordsArm, words)
        vectors = None if mode == "keyword" else cast(MeaningArm | None, self.upkeep.arm("meaning"))
        try:
            return rank(db, agent, query, limit, mode, bm25, vectors), None
        except EmbedderUnavailableError as error:
            if mode == "semantic":
                raise
            note = self._words_only(error)
            return rank(db, agent, query, limit, "keyword", bm25, None), note

    def _hits(
        self, db: Executes, kept: Iterator[Ranked], count: int, scope: str | None
    ) -> list[SearchHit]:
        """The first ``count`` of the ranked rows in ``scope``, with their entries (read
        for the rows kept only, ``count`` at a time)."""
        hits: list[SearchHit] = []
        while chunk := list(islice(kept, count)):
            found = rows.entries_by_row_id(db, [r.row_id for r in chunk])
            for ranked in chunk:
                entry = found.get(ranked.row_id)
                if entry is None or (scope is not None and entry.scope != scope):
                    continue
                hits.append(SearchHit(entry, round(ranked.score, 6), ranked.arms))
            if len(hits) >= count:
                break
        return hits[:count]

    def _settle_rows(self, agent: str) -> None:
        """Bring the rows up to the agent's file when it changed since sync last saw it
        (one stat and one read when it did not)."""
        stat = file_stat(self.shared.workspace.memory_path(agent))
        if stat is not None and not rows.is_settled(self.shared.db, agent, stat):
            self.shared.sync_engine().reconcile_agent(agent)

    def recall(self, agent: str | None, keyword: str) -> RecallResult:
        """What recall_memory answers: memory.recall says hybrid (the best entries for the
        question, by meaning and words, best first) or keyword (every archival entry that
        holds it, oldest first)."""
        fold_keyword(keyword)  # an empty keyword is the same error either way
        if has_lone_surrogate(keyword):
            raise InvalidContentError("the keyword holds a lone surrogate (not Unicode)")
        if self.shared.recall_ranks:
            return self.recall_by_meaning(agent, keyword)
        ref = self.shared.resolve(agent)
        entries = self._recall_from_rows(ref.agent, keyword)
        if entries is not None:
            return RecallResult(ref, keyword, [entry.render() for entry in entries])
        return RecallResult(ref, keyword, self.shared.reader(ref).recall(keyword))

    def recall_by_meaning(
        self, agent: str | None, question: str, limit: int | None = None
    ) -> RecallResult:
        """The archival entries that best answer a question, by meaning and words: those
        the words find, and those whose meaning is close enough (RECALL_MIN_SIMILARITY)."""
        result = self.search(
            agent, question, limit=limit, scope=ARCHIVAL, min_similarity=RECALL_MIN_SIMILARITY
        )
        lines = [hit.entry.render() for hit in result.hits]
        return RecallResult(result.agent, question, lines, "hybrid")

    def relevant_entries(self, agent: str, query: str, limit: int) -> list[Entry]:
        """The archival entries a hybrid search ranks best for a query, as recall keeps
        them; none when the query has nothing to search by."""
        try:
            result = self.search(
                agent or None,
                query,
                limit=limit,
                scope=ARCHIVAL,
                min_similarity=RECALL_MIN_SIMILARITY,
            )
        except (EmptyKeywordError, InvalidContentError):
            return []
        return [hit.entry for hit in result.hits]

    def _recall_from_rows(self, agent: str, keyword: str) -> list[Entry] | None:
        """Recall through the keyword index when sync says the rows equal the file right
        now (None: the backend answers instead). Where the database is open anyway (the
        daemon), always; in a short-lived process (the CLI) only for a file large enough
        that parsing it costs more, through a plain read-only connection (no
        migrations)."""
        shared = self.shared
        folded = fold_keyword(keyword)
        stat = file_stat(shared.workspace.memory_path(agent))
        if stat is None:
            return None
        index = self.upkeep.indexes["keyword"]
        assert isinstance(index, KeywordIndex)
        if shared.db_is_open:
            return self._rows_if_settled(shared.index_db, agent, stat, folded, index)
        if stat.size < ROWS_ANSWER_FROM_BYTES or not shared.workspace.db_path.exists():
            return None
        try:
            conn = open_index_readonly(shared.workspace.db_path)
        except sqlite3.Error:
            return None
        if conn is None:
            return None
        try:
            return self._rows_if_settled(conn, agent, stat, folded, index)
        except sqlite3.Error as error:  # an older schema, a locked file: the file answers
            log.info("recall from the rows of %s skipped: %s", agent or "(global)", error)
            return None
        finally:
            conn.close()

    @staticmethod
    def _rows_if_settled(
        db: Executes, agent: str, stat: FileStat, folded: str, index: KeywordIndex
    ) -> list[Entry] | None:
        return index.recall(db, agent, folded) if rows.is_settled(db, agent, stat) else None

    # --- episodes ---------------------------------------------------------------

    def search_episodes(
        self, agent: str | None, query: str, k: int = 5, exclude_session: str | None = None
    ) -> list[EpisodeHit]:
        """The agent's rounds of past sessions best for a query, best first."""
        shared, upkeep = self.shared, self.upkeep
        ref = shared.resolve(agent)
        if not query.strip():
            raise EmptyKeywordError("the search query is empty")
        if has_lone_surrogate(query):
            raise InvalidContentError("the search query holds a lone surrogate (not Unicode)")
        episodes = upkeep.episodes
        if episodes is None:
            return []
        if shared.index_upkeep:  # alone: the sessions appended since are taken in first
            while upkeep.episodes_step():
                pass
        else:
            episodes.ensure(shared.index_db)
        try:
            return episodes.search(shared.index_db, ref.agent, query, k, exclude_session)
        except EmbedderUnavailableError as error:
            log.warning("episodes searched by words only: %s", error.message)
            words = type(episodes).for_embedder(None)  # type: ignore[attr-defined]
            return list(words.search(shared.index_db, ref.agent, query, k, exclude_session))
