"""The schema of ``.oryxos/oryxos.db``, as sqlite-utils migrations applied in order.

Table names and the documented columns of ``memory_entries`` (agent, scope,
ts, content) are a contract: other programs write them with plain SQL. The
triggers below log every such write in ``memory_changes`` so the sync engine
sees writes made by other processes. A migration, once released, never changes.

sqlite-utils (which imports numpy, about 100 ms) is imported only to apply them:
whether any is pending is read from its own table with sqlite3 (``is_current``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from oryxmem.store.indexfile import move_out_of_rows

if TYPE_CHECKING:
    from sqlite_utils import Database, Migrations

SET_NAME = "oryxmem"  # the migration set, as sqlite-utils records it
MIGRATIONS: list[Callable[[Database], None]] = []


def migration(step: Callable[[Database], None]) -> Callable[[Database], None]:
    """One step of the schema, applied once, in the order of this file."""
    MIGRATIONS.append(step)
    return step


def migration_set(name: str, steps: Sequence[Callable[[Database], None]]) -> Migrations:
    """The steps as sqlite-utils' migration set ``name`` (oryxmem's, or a plugin's)."""
    from sqlite_utils import Migrations

    found = Migrations(name)
    for step in steps:
        found()(step)
    return found


def is_current(
    conn: sqlite3.Connection, name: str, steps: Sequence[Callable[[Database], None]]
) -> bool:
    """Has every step of the set been applied? (What sqlite-utils' ``pending`` asks, read
    directly, without importing it.)"""
    try:
        applied = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM _sqlite_migrations WHERE migration_set = ?", [name]
            )
        }
    except sqlite3.OperationalError:  # no such table: a new database
        return False
    return applied >= {step.__name__ for step in steps}


@migration
def create_memory_entries(db: Database) -> None:
    db.execute(
        """
        CREATE TABLE memory_entries (
            id INTEGER PRIMARY KEY,
            agent TEXT NOT NULL DEFAULT '',
            scope TEXT NOT NULL DEFAULT 'archival',
            ts TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%S', 'now', 'localtime')),
            content TEXT NOT NULL,
            -- Below: oryxmem's own columns. entry_id is NULL for a row another
            -- program wrote until oryxmem has taken it in.
            entry_id TEXT,
            seq INTEGER,
            source TEXT NOT NULL DEFAULT 'db',
            indexed INTEGER NOT NULL DEFAULT 0
        )
        """
    )
    db.execute("CREATE INDEX memory_entries_order ON memory_entries(agent, scope, seq)")
    db.execute("CREATE INDEX memory_entries_by_entry_id ON memory_entries(agent, entry_id)")
    db.execute(
        "CREATE INDEX memory_entries_unindexed ON memory_entries(agent, scope) WHERE indexed = 0"
    )
    # Casefolded content, indexed by trigrams for recall; rowid = memory_entries.id.
    # Filled by oryxmem (SQL cannot casefold); a row written or changed by another
    # program is dropped from it and marked unindexed by the triggers below.
    db.execute(
        "CREATE VIRTUAL TABLE memory_fts USING fts5(folded, tokenize='trigram case_sensitive 1')"
    )
    db.execute(
        """
        CREATE TABLE memory_changes (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            op TEXT NOT NULL,
            row_id INTEGER NOT NULL,
            agent TEXT,
            old_agent TEXT,
            at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
        )
        """
    )
    db.execute(
        """
        CREATE TRIGGER memory_entries_insert AFTER INSERT ON memory_entries BEGIN
            INSERT INTO memory_changes(op, row_id, agent) VALUES ('insert', NEW.id, NEW.agent);
        END
        """
    )
    # A row written without a position goes after the others of its section.
    db.execute(
        """
        CREATE TRIGGER memory_entries_order_new AFTER INSERT ON memory_entries
        WHEN NEW.seq IS NULL BEGIN
            UPDATE memory_entries SET seq = 1 + coalesce((
                SELECT max(seq) FROM memory_entries
                WHERE agent = NEW.agent AND scope = NEW.scope AND id != NEW.id
            ), 0) WHERE id = NEW.id;
        END
        """
    )
    db.execute(
        """
        CREATE TRIGGER memory_entries_update AFTER UPDATE OF agent, scope, ts, content
        ON memory_entries BEGIN
            DELETE FROM memory_fts WHERE rowid = OLD.id;
            UPDATE memory_entries SET indexed = 0 WHERE id = NEW.id;
            INSERT INTO memory_changes(op, row_id, agent, old_agent)
            VALUES ('update', NEW.id, NEW.agent, OLD.agent);
        END
        """
    )
    db.execute(
        """
        CREATE TRIGGER memory_entries_delete AFTER DELETE ON memory_entries BEGIN
            DELETE FROM memory_fts WHERE rowid = OLD.id;
            INSERT INTO memory_changes(op, row_id, agent) VALUES ('delete', OLD.id, OLD.agent);
        END
        """
    )
    db.execute(
        """
        CREATE TABLE memory_history (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%S', 'now', 'localtime')),
            agent TEXT NOT NULL,
            op TEXT NOT NULL,
            source TEXT NOT NULL,
            scope TEXT,
            entry_id TEXT,
            ts TEXT,
            content TEXT,
            detail TEXT
        )
        """
    )
    db.execute("CREATE INDEX memory_history_agent ON memory_history(agent, id)")
    db.execute(
        """
        CREATE TABLE sync_state (
            agent TEXT PRIMARY KEY,
            path TEXT NOT NULL,
            size INTEGER,
            mtime_ns INTEGER,
            inode INTEGER,
            sha256 TEXT,
            entry_ids TEXT NOT NULL DEFAULT '[]',
            status TEXT NOT NULL DEFAULT 'ok',
            detail TEXT,
            updated_at TEXT
        )
        """
    )


@migration
def create_sessions(db: Database) -> None:
    db.table("sessions").create(
        {
            "id": str,
            "agent": str,
            "created_at": str,
            "updated_at": str,
            "messages_json": str,
        },
        pk="id",
        not_null={"agent", "created_at", "updated_at", "messages_json"},
        defaults={"messages_json": "'[]'"},
    )
    db.table("sessions").create_index(["agent", "updated_at"])
    db.table("tool_invocations").create(
        {
            "id": int,
            "tool": str,
            "agent": str,
            "session": str,
            "input": str,
            "output": str,
            "ok": int,
            "ms": float,
            "at": str,
        },
        pk="id",
        not_null={"tool", "agent", "ok", "ms", "at"},
    )


@migration
def add_quarantine_and_change_cursor(db: Database) -> None:
    # Rows another program wrote that break the rules: kept here, never dropped.
    db.execute(
        """
        CREATE TABLE memory_quarantine (
            id INTEGER PRIMARY KEY,
            at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%S', 'now', 'localtime')),
            row_id INTEGER,
            agent TEXT,
            scope TEXT,
            ts TEXT,
            content TEXT,
            reason TEXT NOT NULL
        )
        """
    )
    # The last memory_changes.seq reconcile has taken in, per agent.
    db.execute("ALTER TABLE sync_state ADD COLUMN change_seq INTEGER NOT NULL DEFAULT 0")
    db.execute("CREATE INDEX memory_changes_agent ON memory_changes(agent, seq)")
    db.execute(
        "CREATE INDEX memory_changes_old_agent ON memory_changes(old_agent, seq)"
        " WHERE old_agent IS NOT NULL"
    )


@migration
def agreed_ids_in_their_own_table(db: Database) -> None:
    # One row per agreed entry id: a save adds one row instead of rewriting a list
    # that holds every id of the file. sync_state.entry_ids is no longer used.
    db.execute(
        "CREATE TABLE sync_agreed (agent TEXT NOT NULL, entry_id TEXT NOT NULL,"
        " PRIMARY KEY (agent, entry_id)) WITHOUT ROWID"
    )
    db.execute(
        "INSERT OR IGNORE INTO sync_agreed(agent, entry_id)"
        " SELECT s.agent, j.value FROM sync_state s, json_each(s.entry_ids) j"
    )
    db.execute("UPDATE sync_state SET entry_ids = '[]'")


@migration
def derived_indexes_fed_from_the_change_log(db: Database) -> None:
    # Everything that answers a search is now a derived index (oryxmem/index/), fed from
    # memory_changes through its own cursor in index_state; the triggers only log.
    db.execute("DROP TRIGGER memory_entries_update")
    db.execute("DROP TRIGGER memory_entries_delete")
    db.execute(
        """
        CREATE TRIGGER memory_entries_update AFTER UPDATE OF agent, scope, ts, content
        ON memory_entries BEGIN
            INSERT INTO memory_changes(op, row_id, agent, old_agent)
            VALUES ('update', NEW.id, NEW.agent, OLD.agent);
        END
        """
    )
    db.execute(
        """
        CREATE TRIGGER memory_entries_delete AFTER DELETE ON memory_entries BEGIN
            INSERT INTO memory_changes(op, row_id, agent) VALUES ('delete', OLD.id, OLD.agent);
        END
        """
    )
    db.execute("DROP INDEX memory_entries_unindexed")
    db.execute("ALTER TABLE memory_entries DROP COLUMN indexed")
    db.execute("DROP TABLE memory_fts")  # the keyword index makes its own, and fills it
    db.execute(
        "CREATE TABLE index_state (name TEXT PRIMARY KEY, version INTEGER NOT NULL,"
        " cursor INTEGER NOT NULL, backfill_below INTEGER NOT NULL DEFAULT 0, built_at TEXT)"
    )
    # sync_state: the unused id list goes; the file's ctime completes its stat; and the
    # lines the parser kept as they are (not entries) are remembered, to report once.
    db.execute("ALTER TABLE sync_state DROP COLUMN entry_ids")
    db.execute("ALTER TABLE sync_state ADD COLUMN ctime_ns INTEGER")
    db.execute("ALTER TABLE sync_state ADD COLUMN notes TEXT NOT NULL DEFAULT '[]'")


@migration
def sessions_remember_where_they_were_imported_from(db: Database) -> None:
    # An imported session names its transcript (claude-code:<id>, jsonl:<path>): importing
    # it again adds only the messages it gained since.
    db.execute("ALTER TABLE sessions ADD COLUMN source TEXT")
    db.execute("CREATE UNIQUE INDEX sessions_source ON sessions(source) WHERE source IS NOT NULL")


@migration
def history_says_when_an_entry_was_written_into_the_file(db: Database) -> None:
    # written_ns: when oryxmem wrote the entry into MEMORY.md (a save, or a put-back), in
    # epoch nanoseconds; written_after_others: that write went onto a file someone else had
    # written since. Together they tell a file written from a buffer older than an entry
    # from one that held it (rows.protected_entries).
    db.execute("ALTER TABLE memory_history ADD COLUMN written_ns INTEGER")
    db.execute("ALTER TABLE memory_history ADD COLUMN written_after_others INTEGER")
    db.execute(
        "CREATE INDEX memory_history_written ON memory_history(agent, written_ns)"
        " WHERE written_ns IS NOT NULL"
    )


@migration
def derived_indexes_have_a_file_of_their_own(db: Database) -> None:
    # The indexes move to .oryxos/oryxos.db.indexes (store/indexdb.py): their writes no longer
    # hold this file's write lock. This file gets an id the index file names, so an index
    # file is never taken for another rows' file's; what the indexes kept here is carried
    # over (the vectors, the episodes) or dropped (the words, made again in seconds).
    rows_id = db.execute("SELECT lower(hex(randomblob(16)))").fetchone()[0]
    db.execute("CREATE TABLE store_identity (id TEXT NOT NULL)")
    db.execute("INSERT INTO store_identity VALUES (?)", [rows_id])
    move_out_of_rows(db, rows_id)
