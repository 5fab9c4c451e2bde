"""The memory_entries side of sync: rows in, plans out, history and sync_state kept.

Every function here runs inside the caller's write transaction (BEGIN
IMMEDIATE), so the rows, their index, the history and the agreed state change
together or not at all.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oryxmem.errors import OryxError
from oryxmem.store.db import Executes, insert_values
from oryxmem.store.format import SCOPES, TIMESTAMP_RE, Entry, normalize_content
from oryxmem.store.sqlite import insert_indexed_rows
from oryxmem.sync.reconcile import Plan, RowState, number_rows
from oryxmem.workspace import agent_name_problem

if TYPE_CHECKING:
    from sqlite_utils import Database


FileStat = tuple[int | None, int | None, int | None]  # (inode, size, mtime_ns)


@dataclass(frozen=True)
class SyncState:
    """What both sides last agreed on, and the file as it was then."""

    agent: str
    path: str
    size: int | None
    mtime_ns: int | None
    inode: int | None
    sha256: str | None
    agreed: list[str]
    status: str
    detail: str | None
    change_seq: int

    @property
    def file_stat(self) -> FileStat:
        """The file's (inode, size, mtime_ns) when both sides last agreed."""
        return (self.inode, self.size, self.mtime_ns)


def insert_waiting_row(db: Database, agent: str, entry: Entry, source: str) -> None:
    """A save the file cannot take yet: a row sync will treat as added in the database."""
    db.execute(
        "INSERT INTO memory_entries(agent, scope, ts, content, source) VALUES (?, ?, ?, ?, ?)",
        [agent, entry.scope, entry.ts, entry.content, source],
    )
    record_history(db, agent, "add", source, entry, "waiting: MEMORY.md has conflict markers")


def row_problem(
    agent: str, scope: Any, ts: Any, content: Any, max_content_chars: int
) -> str | None:
    """Why a row another program wrote cannot become a line of MEMORY.md, if it cannot."""
    if agent and agent_name_problem(agent):
        return f"unsafe agent name {agent!r}: {agent_name_problem(agent)}"
    if scope not in SCOPES:
        return f"scope must be 'core' or 'archival', not {scope!r}"
    if ts is not None and not (isinstance(ts, str) and TIMESTAMP_RE.fullmatch(ts)):
        return f"ts must be 'yyyy-MM-dd HH:mm:ss' or NULL, not {ts!r}"
    if not isinstance(content, str):
        return f"content must be text, not {type(content).__name__}"
    try:
        text = normalize_content(content)
    except OryxError as error:
        return error.message
    if len(text) > max_content_chars:
        return f"content is {len(text)} characters; the limit is {max_content_chars}"
    return None


def quarantine_invalid_rows(db: Database, agent: str, max_content_chars: int) -> list[str]:
    """Move this agent's rule-breaking rows to memory_quarantine; strip padded content."""
    reasons = []
    rows = db.execute(
        "SELECT id, scope, ts, content FROM memory_entries WHERE agent = ? AND entry_id IS NULL"
        " UNION SELECT id, scope, ts, content FROM memory_entries"
        " WHERE agent = ? AND indexed = 0",
        [agent, agent],
    ).fetchall()
    for row_id, scope, ts, content in rows:
        problem = row_problem(agent, scope, ts, content, max_content_chars)
        if problem is None:
            if content != content.strip():
                db.execute(
                    "UPDATE memory_entries SET content = ? WHERE id = ?", [content.strip(), row_id]
                )
            continue
        quarantine_row(db, row_id, agent, scope, ts, content, problem)
        reasons.append(problem)
    return reasons


def quarantine_row(
    db: Database, row_id: int, agent: str, scope: Any, ts: Any, content: Any, reason: str
) -> None:
    db.execute(
        "INSERT INTO memory_quarantine(row_id, agent, scope, ts, content, reason)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [row_id, agent, str(scope), None if ts is None else str(ts), _text(content), reason],
    )
    db.execute("DELETE FROM memory_entries WHERE id = ?", [row_id])
    record_history(db, agent, "quarantine", "db", None, reason, scope=str(scope), content=content)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def unsafe_agents_with_rows(db: Database) -> list[str]:
    """Agent names in memory_entries that can never be a directory of .oryxos/agents/."""
    names = [row[0] for row in db.execute("SELECT DISTINCT agent FROM memory_entries")]
    return [name for name in names if name and agent_name_problem(str(name))]


def quarantine_agent(db: Database, agent: str) -> int:
    rows = db.execute(
        "SELECT id, scope, ts, content FROM memory_entries WHERE agent = ?", [agent]
    ).fetchall()
    problem = f"unsafe agent name {agent!r}: {agent_name_problem(str(agent))}"
    for row_id, scope, ts, content in rows:
        quarantine_row(db, row_id, str(agent), scope, ts, content, problem)
    return len(rows)


def read_rows(db: Database, agent: str) -> list[RowState]:
    rows = db.execute(
        "SELECT id, entry_id, scope, ts, content FROM memory_entries WHERE agent = ?"
        " ORDER BY scope, seq, id",
        [agent],
    )
    return number_rows(rows)


def read_state(db: Executes, agent: str, *, with_agreed: bool = True) -> SyncState | None:
    """The agreed state; without with_agreed the id list (large for a large file) is skipped."""
    row = db.execute(
        "SELECT agent, path, size, mtime_ns, inode, sha256, status, detail, change_seq"
        " FROM sync_state WHERE agent = ?",
        [agent],
    ).fetchone()
    if row is None:
        return None
    agent_, path, size, mtime_ns, inode, sha, status, detail, change_seq = row
    agreed = (
        [r[0] for r in db.execute("SELECT entry_id FROM sync_agreed WHERE agent = ?", [agent])]
        if with_agreed
        else []
    )
    return SyncState(agent_, path, size, mtime_ns, inode, sha, agreed, status, detail, change_seq)


def file_stat(path: str | os.PathLike[str]) -> FileStat | None:
    """The file's (inode, size, mtime_ns) as sync compares it; None: there is no file."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def is_current(db: Executes, state: SyncState, stat: FileStat | None = None) -> bool:
    """Does the agreed state still hold: status ok, no row changed since, and (when
    given) the file still has the stat it had then?"""
    return (
        state.status == "ok"
        and (stat is None or stat == state.file_stat)
        and not has_pending_changes(db, state.agent, state.change_seq)
    )


def is_settled(db: Executes, agent: str, stat: FileStat) -> bool:
    """Is the agent in sync with its file as it is now? Cheap: no id list is read."""
    state = read_state(db, agent, with_agreed=False)
    return state is not None and is_current(db, state, stat)


def write_state(db: Database, state: SyncState, previous: Sequence[str] | None = None) -> None:
    """Record what both sides agree on. With ``previous`` (the agreed ids before), only the
    difference is written: a save to a 100,000-entry file adds one row, not 100,000."""
    db.execute(
        "INSERT INTO sync_state(agent, path, size, mtime_ns, inode, sha256, status, detail,"
        " change_seq, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?,"
        " strftime('%Y-%m-%d %H:%M:%S', 'now', 'localtime'))"
        " ON CONFLICT(agent) DO UPDATE SET path = excluded.path, size = excluded.size,"
        " mtime_ns = excluded.mtime_ns, inode = excluded.inode, sha256 = excluded.sha256,"
        " status = excluded.status, detail = excluded.detail,"
        " change_seq = excluded.change_seq, updated_at = excluded.updated_at",
        [
            state.agent,
            state.path,
            state.size,
            state.mtime_ns,
            state.inode,
            state.sha256,
            state.status,
            state.detail,
            state.change_seq,
        ],
    )
    if previous is None:
        db.execute("DELETE FROM sync_agreed WHERE agent = ?", [state.agent])
        added, removed = set(state.agreed), set()
    else:
        before, after = set(previous), set(state.agreed)
        added, removed = after - before, before - after
    db.conn.executemany(
        "DELETE FROM sync_agreed WHERE agent = ? AND entry_id = ?",
        [[state.agent, i] for i in removed],
    )
    insert_values(
        db, "INSERT OR IGNORE INTO sync_agreed(agent, entry_id)", [(state.agent, i) for i in added]
    )


def latest_change_seq(db: Database) -> int:
    value = db.execute("SELECT coalesce(max(seq), 0) FROM memory_changes").fetchone()[0]
    return int(value)


def agents_with_pending_changes(db: Database) -> list[str]:
    """Agents whose rows changed since reconcile last took their changes in."""
    rows = db.execute(
        "SELECT DISTINCT name FROM ("
        " SELECT c.agent AS name, c.seq AS seq FROM memory_changes c"
        " UNION ALL SELECT c.old_agent, c.seq FROM memory_changes c WHERE c.old_agent IS NOT NULL"
        ") LEFT JOIN sync_state s ON s.agent = name WHERE seq > coalesce(s.change_seq, 0)"
    )
    return [row[0] for row in rows if row[0] is not None]


def has_pending_changes(db: Executes, agent: str, since_seq: int) -> bool:
    """Did this agent's rows change after since_seq? One index probe."""
    row = db.execute(
        "SELECT 1 FROM memory_changes WHERE agent = ?1 AND seq > ?2"
        " UNION ALL SELECT 1 FROM memory_changes WHERE old_agent = ?1 AND seq > ?2 LIMIT 1",
        [agent, since_seq],
    ).fetchone()
    return row is not None


def prune_changes(db: Database) -> int:
    """Forget changes every agent they name has taken in; they are hints, not records."""
    cursor = db.execute(
        "DELETE FROM memory_changes WHERE seq <= coalesce("
        " (SELECT change_seq FROM sync_state WHERE agent = memory_changes.agent), 0)"
        " AND (old_agent IS NULL OR seq <= coalesce("
        " (SELECT change_seq FROM sync_state WHERE agent = memory_changes.old_agent), 0))"
    )
    return cursor.rowcount


def protected_entries(db: Database, agent: str, window_seconds: int) -> set[str]:
    """Entries added from the socket or the database lately, not yet restored once."""
    rows = db.execute(
        "SELECT entry_id FROM memory_history WHERE agent = ? AND op = 'add' AND source != 'file'"
        " AND at >= strftime('%Y-%m-%d %H:%M:%S', 'now', 'localtime', ?)"
        " EXCEPT SELECT entry_id FROM memory_history WHERE agent = ? AND op = 'restore'",
        [agent, f"-{window_seconds} seconds", agent],
    )
    return {row[0] for row in rows if row[0]}


HistoryRow = tuple[str, str, str, str | None, str | None, str | None, str | None, str | None]


def history_row(
    agent: str, op: str, source: str, entry: Entry, detail: str | None = None
) -> HistoryRow:
    return (agent, op, source, entry.scope, entry.entry_id, entry.ts, entry.content, detail)


def record_history_rows(db: Database, rows: Sequence[HistoryRow]) -> None:
    insert_values(
        db,
        "INSERT INTO memory_history(agent, op, source, scope, entry_id, ts, content, detail)",
        rows,
    )


def record_history(
    db: Database,
    agent: str,
    op: str,
    source: str,
    entry: Entry | None,
    detail: str | None = None,
    *,
    scope: str | None = None,
    content: Any = None,
) -> None:
    """One history event; without an entry (a quarantined row), its scope and content."""
    if entry is not None:
        record_history_rows(db, [history_row(agent, op, source, entry, detail)])
    else:
        record_history_rows(db, [(agent, op, source, scope, None, None, _text(content), detail)])


def index_rows(db: Database, agent: str) -> int:
    """Put this agent's unindexed rows in the recall index (SQL cannot casefold)."""
    rows = db.execute(
        "SELECT id, content FROM memory_entries INDEXED BY memory_entries_unindexed"
        " WHERE agent = ?1 AND scope = 'core' AND indexed = 0"
        " UNION ALL SELECT id, content FROM memory_entries INDEXED BY memory_entries_unindexed"
        " WHERE agent = ?1 AND scope = 'archival' AND indexed = 0",
        [agent],
    ).fetchall()
    for row_id, content in rows:
        db.execute("DELETE FROM memory_fts WHERE rowid = ?", [row_id])
        db.execute(
            "INSERT INTO memory_fts(rowid, folded) VALUES (?, ?)", [row_id, content.casefold()]
        )
        db.execute("UPDATE memory_entries SET indexed = 1 WHERE id = ?", [row_id])
    return len(rows)


def apply_plan_to_rows(db: Database, agent: str, plan: Plan, file_entries: Sequence[Entry]) -> None:
    """Make the rows match what the plan decided, and write every add and remove to history."""
    events: list[HistoryRow] = []
    losers = {row_id: (entry, why) for row_id, entry, why in plan.lost}
    doomed = set(plan.row_deletes)
    if doomed:
        for row_id, scope, ts, content, entry_id in db.execute(
            f"SELECT id, scope, ts, content, entry_id FROM memory_entries"
            f" WHERE id IN ({','.join('?' * len(doomed))})",
            list(doomed),
        ).fetchall():
            if row_id in losers:
                events.append(history_row(agent, "lost", "db", *losers[row_id]))
            else:
                entry = Entry(scope, ts, content, entry_id)
                events.append(history_row(agent, "remove", "file", entry))
        db.conn.executemany("DELETE FROM memory_entries WHERE id = ?", [[r] for r in doomed])
    by_id = {entry.entry_id: entry for entry in file_entries}
    events += [history_row(agent, "remove", "db", by_id[i]) for i in plan.file_removals]
    restored = set(plan.restored)
    events += [
        history_row(agent, "restore" if entry in restored else "add", "db", entry)
        for entry in plan.file_additions
    ]
    insert_rows(db, agent, plan.row_inserts, "file")
    events += [history_row(agent, "add", "file", entry) for entry in plan.row_inserts]
    db.conn.executemany(
        "UPDATE memory_entries SET entry_id = ? WHERE id = ?",
        [[entry_id, row_id] for row_id, entry_id in plan.row_restamps],
    )
    record_history_rows(db, events)


def entries_not_in_rows(db: Executes, agent: str, entries: Sequence[Entry]) -> list[Entry]:
    """The entries whose ids no row of the agent has yet."""
    present: set[str] = set()
    ids = [entry.entry_id for entry in entries]
    for at in range(0, len(ids), 500):  # under SQLite's limit on parameters
        chunk = ids[at : at + 500]
        marks = ", ".join("?" * len(chunk))
        present.update(
            row[0]
            for row in db.execute(
                f"SELECT entry_id FROM memory_entries WHERE agent = ? AND entry_id IN ({marks})",
                [agent, *chunk],
            )
        )
    return [entry for entry in entries if entry.entry_id not in present]


def insert_rows(db: Database, agent: str, entries: Sequence[Entry], source: str) -> None:
    """Insert rows that mirror entries of the file (their ids as agreed), already indexed."""
    if not entries:
        return
    next_seq = _next_seqs(db, agent)
    rows = []
    for entry in entries:
        rows.append((entry, next_seq[entry.scope]))
        next_seq[entry.scope] += 1
    insert_indexed_rows(db, agent, rows, source)


def _next_seqs(db: Database, agent: str) -> dict[str, int]:
    rows = db.execute(
        "SELECT scope, coalesce(max(seq), 0) + 1 FROM memory_entries WHERE agent = ?"
        " GROUP BY scope",
        [agent],
    )
    seqs = dict.fromkeys(SCOPES, 1)
    seqs.update({scope: int(value) for scope, value in rows})
    return seqs


def history(db: Database, agent: str | None, limit: int) -> list[dict[str, Any]]:
    where, args = ("WHERE agent = ?", [agent]) if agent is not None else ("", [])
    rows = db.execute(
        f"SELECT at, agent, op, source, scope, ts, content, detail FROM memory_history {where}"
        " ORDER BY id DESC LIMIT ?",
        [*args, limit],
    ).fetchall()
    keys = ("at", "agent", "op", "source", "scope", "ts", "content", "detail")
    return [dict(zip(keys, row, strict=True)) for row in reversed(rows)]


def quarantined(db: Database) -> Iterable[dict[str, Any]]:
    keys = ("at", "row_id", "agent", "scope", "ts", "content", "reason")
    for row in db.execute(
        "SELECT at, row_id, agent, scope, ts, content, reason FROM memory_quarantine ORDER BY id"
    ):
        yield dict(zip(keys, row, strict=True))


def sync_summary(db: Database) -> dict[str, Any]:
    """Agents per sync status, the ones with a problem, and the quarantined rows."""
    statuses: dict[str, int] = {}
    problems = []
    for agent, status, detail in db.execute(
        "SELECT agent, status, detail FROM sync_state ORDER BY agent"
    ):
        statuses[status] = statuses.get(status, 0) + 1
        if status != "ok":
            problems.append({"agent": agent, "status": status, "detail": detail})
    quarantined = db.execute("SELECT count(*) FROM memory_quarantine").fetchone()[0]
    return {"agents": statuses, "problems": problems, "quarantined_rows": quarantined}
