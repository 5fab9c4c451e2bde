"""SqliteMemoryStore: long-term memory kept as rows of ``memory_entries``.

Recall goes through ``memory_fts``, a trigram index over casefolded content,
so any keyword of three or more characters (CJK included) is an index lookup;
shorter keywords scan the folded text. Rows that another program wrote and
oryxmem has not indexed yet are checked directly, so recall never misses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from oryxmem.clock import Clock
from oryxmem.store.base import LongTermMemoryStore, MemorySnapshot, StoreLimits
from oryxmem.store.db import Executes, insert_values, write_transaction
from oryxmem.store.format import (
    ARCHIVAL,
    CORE,
    Entry,
    NewEntry,
    archival_window,
    entry_id_for,
    entry_key,
)

if TYPE_CHECKING:
    from sqlite_utils import Database

_COLUMNS = "e.id, e.scope, e.ts, e.content, e.entry_id, e.seq"
_TRIGRAM = 3


def _entry(row: Any) -> Entry:
    _, scope, ts, content, entry_id, _ = row
    return Entry(scope, ts, content, entry_id or entry_key(scope, ts, content))


def fts_phrase(folded_keyword: str) -> str:
    """An FTS5 query matching the keyword as one exact substring."""
    return '"' + folded_keyword.replace('"', '""') + '"'


def insert_entry(db: Database, agent: str, addition: NewEntry, source: str) -> Entry:
    """Insert one row and its index entry; the caller holds a write transaction."""
    key = entry_key(addition.scope, addition.ts, addition.content)
    ordinal, next_seq = db.execute(
        "SELECT (SELECT count(*) FROM memory_entries WHERE agent = ?1 AND entry_id >= ?2"
        " AND entry_id < ?2 || '.'),"
        " (SELECT coalesce(max(seq), 0) + 1 FROM memory_entries WHERE agent = ?1 AND scope = ?3)",
        [agent, key, addition.scope],
    ).fetchone()
    entry = Entry(addition.scope, addition.ts, addition.content, entry_id_for(key, ordinal))
    insert_indexed_rows(db, agent, [(entry, next_seq)], source)
    return entry


def insert_indexed_rows(
    db: Database, agent: str, rows: Sequence[tuple[Entry, int]], source: str
) -> None:
    """Rows (each entry with its position) and their casefolded text in the recall index,
    many to a statement. The caller holds a write transaction, so the row ids after
    the largest are ours to give (the ones SQLite would have chosen)."""
    if not rows:
        return
    last = db.execute("SELECT coalesce(max(id), 0) FROM memory_entries").fetchone()[0]
    ids = range(last + 1, last + 1 + len(rows))
    insert_values(
        db,
        "INSERT INTO memory_entries(id, agent, scope, ts, content, entry_id, seq, source, indexed)",
        [
            (row_id, agent, e.scope, e.ts, e.content, e.entry_id, seq, source, 1)
            for row_id, (e, seq) in zip(ids, rows, strict=True)
        ],
    )
    insert_values(
        db,
        "INSERT INTO memory_fts(rowid, folded)",
        [(row_id, e.content.casefold()) for row_id, (e, _) in zip(ids, rows, strict=True)],
    )


class SqliteMemoryStore(LongTermMemoryStore):
    def __init__(
        self, db: Database, agent: str, *, clock: Clock, limits: StoreLimits, source: str = "api"
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        self.db = db
        self.agent = agent
        self.source = source

    def _append(self, addition: NewEntry) -> Entry:
        with write_transaction(self.db):
            return insert_entry(self.db, self.agent, addition, self.source)

    def _scope_rows(self, scope: str, newest_first: bool = False) -> Any:
        order = "DESC" if newest_first else "ASC"
        return self.db.execute(
            f"SELECT {_COLUMNS} FROM memory_entries e WHERE e.agent = ? AND e.scope = ?"
            f" ORDER BY e.seq {order}, e.id {order}",
            [self.agent, scope],
        )

    def entries(self) -> tuple[list[Entry], list[Entry]]:
        core = [_entry(row) for row in self._scope_rows(CORE)]
        return core, [_entry(row) for row in self._scope_rows(ARCHIVAL)]

    def load(self) -> MemorySnapshot:
        core = [_entry(row) for row in self._scope_rows(CORE)]
        limit = self.limits.archival_limit_chars
        newest: list[Entry] = []
        used = 0
        for row in self._scope_rows(ARCHIVAL, newest_first=True):
            entry = _entry(row)
            newest.append(entry)
            used += len(entry.render()) + 1
            if used > limit:
                break
        newest.reverse()
        total = self.db.execute(
            "SELECT count(*) FROM memory_entries WHERE agent = ? AND scope = ?",
            [self.agent, ARCHIVAL],
        ).fetchone()[0]
        window = archival_window(newest, limit)
        return MemorySnapshot(core, replace(window, omitted=total - len(window.lines)), total)

    def _recall(self, folded_keyword: str) -> list[Entry]:
        return recall_rows(self.db, self.agent, folded_keyword)


def recall_rows(db: Executes, agent: str, folded_keyword: str) -> list[Entry]:
    """The agent's archival rows holding the keyword, in file order, through the index."""
    # CROSS JOIN keeps the index as the outer loop: left to itself, the
    # planner walks every row of the agent and runs the MATCH once per row.
    if len(folded_keyword) >= _TRIGRAM:
        match, argument = "memory_fts MATCH ?", fts_phrase(folded_keyword)
    else:
        match, argument = "instr(f.folded, ?) > 0", folded_keyword
    indexed = db.execute(
        f"SELECT {_COLUMNS} FROM memory_fts f CROSS JOIN memory_entries e ON e.id = f.rowid"
        f" WHERE {match} AND e.agent = ? AND e.scope = ?",
        [argument, agent, ARCHIVAL],
    )
    unindexed = db.execute(
        f"SELECT {_COLUMNS} FROM memory_entries e INDEXED BY memory_entries_unindexed"
        " WHERE e.agent = ? AND e.scope = ? AND e.indexed = 0",
        [agent, ARCHIVAL],
    )
    rows = {row[0]: row for row in [*indexed, *unindexed]}
    hits = sorted(rows.values(), key=lambda row: (row[5] or 0, row[0]))
    return [_entry(row) for row in hits if folded_keyword in row[3].casefold()]
