"""The keyword index: recall's exact substring contract (docs/design.md §4) at any size.

A trigram FTS5 index over casefolded content, so a keyword of three or more
characters (CJK included) is an index lookup; shorter ones scan the folded
text. Rows the index has not taken in yet (another program wrote them a moment
ago, or a rebuild is under way) are checked directly, so a search never misses
one, and every hit is checked against the row's current text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from oryxmem.index import DerivedIndex, Hit, IndexRow, unindexed_row_ids
from oryxmem.store.db import Executes, insert_values, select_in
from oryxmem.store.format import ARCHIVAL, CORE, Entry
from oryxmem.store.rows import ENTRY_COLUMNS, entry_from_row

if TYPE_CHECKING:
    from oryxmem.store.db import Database

_TRIGRAM = 3  # the shortest text the trigram index finds (shorter ones: a scan)


def fts_phrase(folded_keyword: str) -> str:
    """An FTS5 query matching the keyword as one exact substring."""
    return '"' + folded_keyword.replace('"', '""') + '"'


class KeywordIndex(DerivedIndex):
    name = "keyword"

    def create(self, db: Database) -> None:
        # rowid = memory_entries.id; SQL cannot casefold, so oryxmem fills it.
        db.execute(
            "CREATE VIRTUAL TABLE memory_fts USING fts5(folded,"
            " tokenize='trigram case_sensitive 1')"
        )

    def drop(self, db: Database) -> None:
        db.execute("DROP TABLE IF EXISTS memory_fts")

    def remove(self, db: Database, row_ids: Sequence[int]) -> None:
        db.conn.executemany("DELETE FROM memory_fts WHERE rowid = ?", [[r] for r in row_ids])

    def add(self, db: Database, rows: Sequence[IndexRow]) -> None:
        insert_values(
            db,
            "INSERT INTO memory_fts(rowid, folded)",
            [(r.row_id, r.content.casefold()) for r in rows],
        )

    def search(self, db: Executes, agent: str, query: str, limit: int | None) -> list[Hit]:
        """Rows whose content holds query (casefolded), in file order: core, then archival."""
        rows = self._holding(db, agent, query.casefold(), scope=None)
        return [Hit(row[0], 1.0) for row in rows[:limit]]

    def recall(self, db: Executes, agent: str, folded_keyword: str) -> list[Entry]:
        """Recall (docs/design.md §4): the archival entries holding the keyword, in order."""
        return [entry_from_row(row) for row in self._holding(db, agent, folded_keyword, ARCHIVAL)]

    def _holding(self, db: Executes, agent: str, folded: str, scope: str | None) -> list[Any]:
        """The agent's rows (ENTRY_COLUMNS) holding the folded text, in file order."""
        if not folded:
            return []
        where, args = (
            ("e.agent = ? AND e.scope = ?", [agent, scope]) if scope else ("e.agent = ?", [agent])
        )
        pending = unindexed_row_ids(db, self, agent)
        if pending is None:  # never built here: every row is a candidate
            candidates = db.execute(
                f"SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE {where}", args
            ).fetchall()
        else:
            # CROSS JOIN keeps the index as the outer loop: left to itself, the planner
            # walks every row of the agent and runs the MATCH once per row.
            if len(folded) >= _TRIGRAM:
                match, argument = "memory_fts MATCH ?", fts_phrase(folded)
            else:
                match, argument = "instr(f.folded, ?) > 0", folded
            candidates = db.execute(
                f"SELECT {ENTRY_COLUMNS} FROM memory_fts f CROSS JOIN memory_entries e"
                f" ON e.id = f.rowid WHERE {match} AND {where}",
                [argument, *args],
            ).fetchall()
            candidates += select_in(
                db,
                f"SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE {where}"
                " AND e.id IN ({marks})",
                pending,
                args,
            )
        # Every hit is checked against the row's text as it is now: the index may hold an
        # older text of a row another program changed a moment ago.
        found = {row[0]: row for row in candidates if _holds(row[3], folded)}
        return sorted(found.values(), key=lambda r: (r[1] != CORE, r[5] or 0, r[0]))


def _holds(content: Any, folded: str) -> bool:
    return isinstance(content, str) and folded in content.casefold()
