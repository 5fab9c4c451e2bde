"""The mem0 backend's own tables, as migrations the one runner applies (store/db.py) when
the backend is configured: what the mirror agreed with mem0, which store that was, and
the memories of other clients being brought in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def create_mem0_tables(db: Any) -> None:
    # Each entry of ours and the memory that holds it in mem0 (NULL: being added).
    db.execute(
        "CREATE TABLE IF NOT EXISTS mem0_agreed (agent TEXT NOT NULL, entry_id TEXT NOT NULL,"
        " mem0_id TEXT, PRIMARY KEY (agent, entry_id)) WITHOUT ROWID"
    )
    # The mem0 store those were agreed with: another store, and nothing is agreed.
    db.execute("CREATE TABLE IF NOT EXISTS mem0_store (store_id TEXT NOT NULL)")
    # A memory another client added, being brought in: its save may have landed.
    db.execute(
        "CREATE TABLE IF NOT EXISTS mem0_imports (mem0_id TEXT PRIMARY KEY, agent TEXT NOT NULL,"
        " content TEXT NOT NULL)"
    )


MIGRATIONS: list[Callable[[Any], None]] = [create_mem0_tables]
