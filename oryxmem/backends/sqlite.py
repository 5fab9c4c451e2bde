"""SqliteMemoryStore: long-term memory read from the rows of ``memory_entries``.

Recall goes through the keyword index (index/keyword.py), caught up from the
change log first, so rows another program wrote a moment ago are found too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from oryxmem.clock import Clock
from oryxmem.index import catch_up
from oryxmem.index.keyword import KeywordIndex
from oryxmem.store.base import LongTermMemoryStore, MemorySnapshot, StoreLimits, StoreResources
from oryxmem.store.db import write_transaction
from oryxmem.store.format import ARCHIVAL, CORE, Entry, EntryIds, EntryText
from oryxmem.store.rows import ENTRY_COLUMNS, entry_from_row, ids_of_repeats, insert_rows
from oryxmem.store.window import archival_window

if TYPE_CHECKING:
    from oryxmem.store.db import Database


class SqliteMemoryStore(LongTermMemoryStore):
    def __init__(
        self,
        db: Database,
        index_db: Database,
        agent: str,
        *,
        clock: Clock,
        limits: StoreLimits,
        source: str = "api",
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        self.db = db
        self.index_db = index_db  # the keyword index's file (store/indexdb.py)
        self.agent = agent
        self.source = source
        self.keyword = KeywordIndex()

    @classmethod
    def for_agent(cls, agent: str, resources: StoreResources) -> SqliteMemoryStore:
        return cls(
            resources.database(),
            resources.index_database(),
            agent,
            clock=resources.clock,
            limits=resources.limits,
        )

    def _append(self, addition: EntryText) -> Entry:
        with write_transaction(self.db):
            key = EntryIds().allocate(addition.scope, addition.ts, addition.content)
            ids = EntryIds.counting(ids_of_repeats(self.db, self.agent, key))
            entry = ids.entry(addition.scope, addition.ts, addition.content)
            insert_rows(self.db, self.agent, [entry], self.source)
        with write_transaction(self.index_db):  # its own file: after the row's commit
            catch_up(self.index_db, self.keyword, max_steps=1)
        return entry

    def _scope_rows(self, scope: str, newest_first: bool = False) -> Any:
        order = "DESC" if newest_first else "ASC"
        return self.db.execute(
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE e.agent = ? AND e.scope = ?"
            f" ORDER BY e.seq {order}, e.id {order}",
            [self.agent, scope],
        )

    def entries(self) -> tuple[list[Entry], list[Entry]]:
        core = [entry_from_row(row) for row in self._scope_rows(CORE)]
        return core, [entry_from_row(row) for row in self._scope_rows(ARCHIVAL)]

    def load(self) -> MemorySnapshot:
        core = [entry_from_row(row) for row in self._scope_rows(CORE)]
        limit = self.limits.archival_limit_chars
        newest: list[Entry] = []
        used = 0
        for row in self._scope_rows(ARCHIVAL, newest_first=True):
            entry = entry_from_row(row)
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
        with write_transaction(self.index_db):
            catch_up(self.index_db, self.keyword)
        return self.keyword.recall(self.index_db, self.agent, folded_keyword)
