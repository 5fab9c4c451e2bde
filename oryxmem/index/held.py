"""Agents' terms held in memory for the keyword arm, so that bm25f.py scores a search
instead of FTS5's bm25() (the same doubles, in a fraction of the time: bm25() costs
about 0.8 µs a matched row, a warm search of 1,000 entries half a millisecond).

One copy per index file in this process, shared by its connections and threads, and
known by the index's epoch (a dropped and rebuilt index never matches a copy of the old
one). An agent's copy is:

- made once the agent has been searched WANTED times, on a thread of its own: reading
  and counting an agent's rows costs 30 to 100 µs a row, too much for a search to wait
  for. FTS5 answers meanwhile, and always for an agent of more than AGENT_ROWS entries;
- kept current change by change: each write to the index is a step, each key written or
  dropped carries it (bm25.py), and a search whose snapshot is past the copy's step reads
  the keys changed since and their terms, a few rows for a save. A copy past the
  snapshot (another reader moved it on) is not used by that search; one that has fallen
  more than REFRESH_MOST keys behind, or behind the dropped keys still logged, is made
  again on the thread;
- holding each row's content casefolded too, so that the whole-query check of a search
  (search.py) reads no rows for the rows the copy holds; the content is read with the
  row's terms, when the copy is made and when a key is written again;
- held with the others within HELD_ROWS rows in all: a new copy takes the room of the
  least recently searched of those not searched for COLD_SECONDS, or is not made. Many
  agents searched in turn never make copies over and over.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from oryxmem.index.bm25f import AgentTerms, Scored, TableTotals
from oryxmem.store.db import Executes, select_in
from oryxmem.store.indexfile import ROWS, rows_uri

log = logging.getLogger(__name__)

WANTED = 3  # searches of an agent before its terms are held
AGENT_ROWS = 4096  # an agent of more entries is left to FTS5
HELD_ROWS = 32768  # rows held in all, about 1 KB each with their content
COLD_SECONDS = 60.0  # an agent not searched for this long gives way to another
REFRESH_MOST = 512  # keys changed since a copy's step that a search brings it up by


@dataclass
class _Copy:
    terms: AgentTerms
    texts: dict[int, str]  # each row's content casefolded, by row id
    step: int  # the agent's step the terms are at
    used: float  # when a search last used them (time.monotonic())


@dataclass(frozen=True)
class HeldScores:
    """A search scored from a copy, and the copy's texts: each row's content casefolded,
    by row id (read, not copied: a later search may bring a row's text on meanwhile)."""

    scored: Scored
    texts: Mapping[int, str]


@dataclass(frozen=True)
class AgentState:
    """What the index says of an agent in a snapshot: its slot and its keys' range, its
    last step, its entries."""

    slot: int
    first: int
    last: int
    step: int
    entries: int


class HeldTerms:
    """The copies of one index file's agents (by their slots) at one epoch."""

    def __init__(self, path: str, epoch: int, rows: str) -> None:
        self.path, self.epoch = path, epoch
        self.rows = rows  # the rows' file the index's connections attach ('' if none)
        self.lock = threading.Lock()
        self.copies: dict[int, _Copy] = {}
        self.asked: dict[int, int] = {}  # slot -> searches since it was last considered
        self.making: set[int] = set()  # slots queued or being made
        self.too_big: set[int] = set()  # slots found over AGENT_ROWS by a making

    def scores(
        self,
        db: Executes,
        agent: AgentState,
        terms: list[str],
        holding: dict[str, int],
        totals: TableTotals,
        weights: tuple[float, float],
    ) -> HeldScores | None:
        """The agent's rows scored from its copy, brought up to the caller's snapshot;
        None when it has none to use (FTS5 answers)."""
        with self.lock:
            copy = self.copies.get(agent.slot)
            if copy is None:
                self._want(agent)
                return None
            if copy.step > agent.step:  # made from a newer snapshot than the caller's
                return None
            if copy.step < agent.step and not self._bring_up(db, copy, agent):
                del self.copies[agent.slot]
                self._make(agent)
                return None
            copy.used = time.monotonic()
            return HeldScores(copy.terms.scores(terms, holding, totals, weights), copy.texts)

    def _want(self, agent: AgentState) -> None:
        """One more search of an agent with no copy: queue its making on the WANTED-th,
        when it is small enough and there is room for it."""
        slot = agent.slot
        if agent.entries > AGENT_ROWS or slot in self.too_big or slot in self.making:
            return
        asked = self.asked.get(slot, 0) + 1
        if asked < WANTED:
            self.asked[slot] = asked
            return
        self.asked.pop(slot, None)  # asked again WANTED times before it is considered again
        if self._room(agent.entries):
            self._make(agent)

    def _room(self, rows: int) -> bool:
        """Whether ``rows`` more fit within HELD_ROWS, making room by letting go of the
        copies searched least recently of those that went cold."""
        held = sum(len(copy.terms) for copy in self.copies.values())
        now = time.monotonic()
        cold = sorted(
            (copy.used, slot)
            for slot, copy in self.copies.items()
            if now - copy.used > COLD_SECONDS
        )
        for _, slot in cold:
            if held + rows <= HELD_ROWS:
                break
            held -= len(self.copies.pop(slot).terms)
        return held + rows <= HELD_ROWS

    def _make(self, agent: AgentState) -> None:
        self.making.add(agent.slot)
        _maker().put((self, agent))

    def _bring_up(self, db: Executes, copy: _Copy, agent: AgentState) -> bool:
        """Bring the copy to the agent's step: drop the keys dropped since, read again
        the keys written since, with their rows' content. False when that is more than
        REFRESH_MOST keys, or some dropped keys are no longer logged (the copy is to be
        made again)."""
        forgot = int(db.execute("SELECT forgot FROM memory_terms_count").fetchone()[0])
        if copy.step < forgot:
            return False
        changed = [
            [int(key) for (key,) in db.execute(sql, [copy.step, agent.first, agent.last])]
            for sql in (
                "SELECT key FROM memory_terms_gone WHERE step > ? AND key BETWEEN ? AND ?",
                "SELECT key FROM memory_terms_keys WHERE step > ? AND key BETWEEN ? AND ?",
            )
        ]
        gone, written = changed
        if len(gone) + len(written) > REFRESH_MOST:
            return False
        for key in gone:
            copy.terms.drop(key)
            copy.texts.pop(key - agent.first, None)
        read = select_in(db, _WITH_CONTENT + "IN ({marks})", written, [agent.first])
        for key, body, context, content in read:
            copy.terms.put(key, body, context)
            _hold_text(copy.texts, key - agent.first, content)
        copy.step = agent.step
        return len(copy.terms) <= AGENT_ROWS

    def make(self, agent: AgentState) -> None:
        """Make the agent's copy from its rows, in a snapshot of a connection of its own
        (on the maker's thread), and hold it if there is room."""
        try:
            made = self._read(agent)
        finally:
            with self.lock:
                self.making.discard(agent.slot)
        if made is None:
            return
        with self.lock:
            if agent.slot not in self.copies and self._room(len(made.terms)):
                self.copies[agent.slot] = made

    def _read(self, agent: AgentState) -> _Copy | None:
        conn = sqlite3.connect(f"file:{quote(self.path)}?mode=ro", uri=True)
        try:
            if self.rows:  # the rows' file, attached as the index's own connections do
                conn.execute(f"ATTACH DATABASE ? AS {ROWS}", [rows_uri(Path(self.rows))])
            conn.execute("BEGIN")
            (epoch,) = conn.execute("SELECT epoch FROM memory_terms_count").fetchone()
            found = conn.execute(
                "SELECT step FROM memory_terms_agents WHERE slot = ?", [agent.slot]
            ).fetchone()
            if epoch != self.epoch or found is None:  # made again since: nothing to hold
                return None
            rows = conn.execute(
                _WITH_CONTENT + "BETWEEN ? AND ? LIMIT ?",
                [agent.first, agent.first, agent.last, AGENT_ROWS + 1],
            ).fetchall()
        finally:
            conn.close()
        if len(rows) > AGENT_ROWS:
            with self.lock:
                self.too_big.add(agent.slot)
            return None
        texts: dict[int, str] = {}
        for key, _, _, content in rows:
            _hold_text(texts, key - agent.first, content)
        terms = AgentTerms.made((key, body, context) for key, body, context, _ in rows)
        return _Copy(terms, texts, int(found[0]), time.monotonic())


# Keys' terms with their rows' content (NULL: the row went, and its key goes next), the
# keys as the rest says; the first parameter is the agent's first key (a key less it is
# the row id).
_WITH_CONTENT = (
    "SELECT t.rowid, t.body, t.context, e.content FROM memory_terms AS t"
    " LEFT JOIN memory_entries AS e ON e.id = t.rowid - ? WHERE t.rowid "
)


def _hold_text(texts: dict[int, str], row_id: int, content: object) -> None:
    if isinstance(content, str):
        texts[row_id] = content.casefold()
    else:
        texts.pop(row_id, None)


_HELD: dict[str, HeldTerms] = {}
_HELD_LOCK = threading.Lock()


def held_terms(path: str, epoch: int, rows: str) -> HeldTerms:
    """The copies of the index file at ``path`` at this epoch (those of another epoch,
    of an index since dropped, are let go); ``rows``: the rows' file it attaches."""
    with _HELD_LOCK:
        held = _HELD.get(path)
        if held is None or held.epoch != epoch:
            held = _HELD[path] = HeldTerms(path, epoch, rows)
        return held


class _Maker:
    """The thread that makes copies, one after another, started with the first."""

    def __init__(self) -> None:
        self.todo: queue.Queue[tuple[HeldTerms, AgentState]] = queue.Queue()
        threading.Thread(target=self._run, name="oryxmem-held-terms", daemon=True).start()

    def put(self, job: tuple[HeldTerms, AgentState]) -> None:
        self.todo.put(job)

    def _run(self) -> None:
        while True:
            held, agent = self.todo.get()
            try:
                held.make(agent)
            except sqlite3.Error as error:  # nothing is lost: FTS5 goes on answering
                log.warning("could not hold the terms of an index's agent: %s", error)
            finally:
                self.todo.task_done()


_MAKER: _Maker | None = None
_MAKER_LOCK = threading.Lock()


def _maker() -> _Maker:
    global _MAKER
    with _MAKER_LOCK:
        if _MAKER is None:
            _MAKER = _Maker()
        return _MAKER


def settle() -> None:
    """Wait until every copy queued is made (for tests and benchmarks that need the
    copies in place before they measure)."""
    if _MAKER is not None:
        _MAKER.todo.join()
