"""The rows of memory_entries and what is kept beside them: history, sync_state.

The rows are the contract other programs write with plain SQL; the triggers of
schema.py log every write in memory_changes. Every function here that writes
runs inside the caller's write transaction (BEGIN IMMEDIATE), so the rows, the
history and the agreed state change together or not at all. ``mirror_appends``
is how a save reaches the rows; the sync engine uses the rest to reconcile.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from oryxmem.fileio import FileStat
from oryxmem.store import staging
from oryxmem.store.db import Executes, insert_values, select_in
from oryxmem.store.format import SCOPES, Entry, EntryIds
from oryxmem.store.markdown import Append
from oryxmem.store.staging import StagedEntry

if TYPE_CHECKING:
    from oryxmem.store.db import Database

# (row id, the entry id it had when both sides last agreed, scope, ts, content)
RowTuple = tuple[int, str | None, str, str | None, str]


@dataclass(frozen=True)
class SyncState:
    """What both sides last agreed on, and the file as it was then."""

    agent: str
    path: str
    file_stat: FileStat | None  # None: there was no file
    sha256: str | None
    agreed: list[str]
    status: str
    detail: str | None
    change_seq: int
    # Lines of the file that are kept as they are but are not entries: (line, text).
    notes: list[tuple[int, str]] = field(default_factory=list)


def insert_waiting_row(db: Database, agent: str, entry: Entry, source: str) -> None:
    """A save the file cannot take yet: a row sync will treat as added in the database."""
    db.execute(
        "INSERT INTO memory_entries(agent, scope, ts, content, source) VALUES (?, ?, ?, ?, ?)",
        [agent, entry.scope, entry.ts, entry.content, source],
    )
    record_history(db, agent, "add", source, entry, "waiting: MEMORY.md has conflict markers")


def as_text(value: Any) -> str | None:
    """A value another program put in a text column, as text (bytes decoded)."""
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read_rows(db: Database, agent: str) -> list[RowTuple]:
    """The agent's rows in file order (core, then archival)."""
    rows: list[RowTuple] = db.execute(
        "SELECT id, entry_id, scope, ts, content FROM memory_entries WHERE agent = ?"
        " ORDER BY scope, seq, id",
        [agent],
    ).fetchall()
    return rows


def read_state(db: Executes, agent: str, *, with_agreed: bool = True) -> SyncState | None:
    """The agreed state; without with_agreed the id list (large for a large file) is skipped."""
    row = db.execute(
        "SELECT agent, path, inode, size, mtime_ns, ctime_ns, sha256, status, detail,"
        " change_seq, notes FROM sync_state WHERE agent = ?",
        [agent],
    ).fetchone()
    if row is None:
        return None
    agent_, path, inode, size, mtime_ns, ctime_ns, sha, status, detail, change_seq, notes = row
    agreed = (
        [r[0] for r in db.execute("SELECT entry_id FROM sync_agreed WHERE agent = ?", [agent])]
        if with_agreed
        else []
    )
    stat = None if inode is None else FileStat(inode, size, mtime_ns, ctime_ns or 0)
    kept = [(int(line), str(text)) for line, text in json.loads(notes or "[]")]
    return SyncState(agent_, path, stat, sha, agreed, status, detail, change_seq, kept)


def agreed_file_stats(db: Executes) -> dict[str, FileStat | None]:
    """Each agent in sync (status ok) and its file's stat as last agreed (None: no file)."""
    return {
        agent: None if inode is None else FileStat(inode, size, mtime_ns, ctime_ns or 0)
        for agent, inode, size, mtime_ns, ctime_ns in db.execute(
            "SELECT agent, inode, size, mtime_ns, ctime_ns FROM sync_state WHERE status = 'ok'"
        )
    }


def is_current(db: Executes, state: SyncState, stat: FileStat | None = None) -> bool:
    """Does the agreed state still hold: status ok, no row changed since, and (when
    given) the file still has the stat it had then?"""
    return (
        state.status == "ok"
        and (stat is None or stat == state.file_stat)
        and not has_pending_changes(db, state.agent, state.change_seq)
    )


def is_settled(db: Executes, agent: str, stat: FileStat | None) -> bool:
    """Is the agent in sync with its file as it is now (its stat)? Cheap: no id list is read."""
    state = read_state(db, agent, with_agreed=False)
    return stat is not None and state is not None and is_current(db, state, stat)


def write_state(db: Database, state: SyncState, previous: Sequence[str] | None = None) -> None:
    """Record what both sides agree on. With ``previous`` (the agreed ids before), only the
    difference is written: a save to a 100,000-entry file adds one row, not 100,000."""
    write_state_row(db, state)
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


def write_state_row(db: Database, state: SyncState) -> None:
    """The agent's row of sync_state as ``state`` has it (its agreed ids are not written)."""
    stat = state.file_stat
    db.execute(
        "INSERT INTO sync_state(agent, path, inode, size, mtime_ns, ctime_ns, sha256, status,"
        " detail, change_seq, notes, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
        " strftime('%Y-%m-%d %H:%M:%S', 'now', 'localtime'))"
        " ON CONFLICT(agent) DO UPDATE SET path = excluded.path, inode = excluded.inode,"
        " size = excluded.size, mtime_ns = excluded.mtime_ns, ctime_ns = excluded.ctime_ns,"
        " sha256 = excluded.sha256, status = excluded.status, detail = excluded.detail,"
        " change_seq = excluded.change_seq, notes = excluded.notes,"
        " updated_at = excluded.updated_at",
        [
            state.agent,
            state.path,
            *(stat if stat is not None else (None, None, None, None)),
            state.sha256,
            state.status,
            state.detail,
            state.change_seq,
            json.dumps(state.notes, ensure_ascii=False),
        ],
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


def prune_changes(db: Database, index_floor: int, limit: int) -> int:
    """Forget up to ``limit`` of the oldest changes that every agent they name and every
    derived index have taken in (``index_floor``: the lowest cursor of the indexes,
    store/indexdb.index_floor): the change log is a queue of hints, not a record
    (memory_history is that)."""
    cursor = db.execute(
        "DELETE FROM memory_changes WHERE seq IN (SELECT seq FROM memory_changes"
        " WHERE seq <= ?1 AND seq <= coalesce("
        " (SELECT change_seq FROM sync_state WHERE agent = memory_changes.agent), 0)"
        " AND (old_agent IS NULL OR seq <= coalesce("
        " (SELECT change_seq FROM sync_state WHERE agent = memory_changes.old_agent), 0))"
        " ORDER BY seq LIMIT ?2)",
        [index_floor, limit],
    )
    return cursor.rowcount


def protected_entries(
    db: Database, agent: str, in_file: Collection[str], window_seconds: int, now_ns: int
) -> set[str]:
    """The entries a file lacks because it was written from a buffer that never held them:
    each must be put back, however often that happens in a row.

    An entry oryxmem wrote into MEMORY.md (a save, a put-back) may leave it only when
    someone deletes it from a buffer that held it. A buffer holds an entry only if it was
    read after that entry was first written. So when the file holds an entry F first
    written after E's last write, and no save between the two went onto a file someone
    else had written (which may have dropped E unseen), E was in the file when F came,
    the buffer held E, and its removal was meant. Without such an F the file came from an
    older buffer (or a person deleted the newest lines: the two look alike), and E is
    put back while its last write is at most ``window_seconds`` old (0: never)."""
    if window_seconds <= 0:
        return set()
    since = now_ns - window_seconds * 1_000_000_000
    last_write: dict[str, int] = {}
    blind: list[int] = []  # saves that went onto a file someone else had written
    for entry_id, written, after_others in db.execute(
        "SELECT entry_id, written_ns, written_after_others FROM memory_history"
        " WHERE agent = ? AND written_ns >= ? AND op IN ('add', 'restore')",
        [agent, since],
    ):
        if entry_id is not None:
            last_write[entry_id] = max(last_write.get(entry_id, 0), int(written))
        if after_others:
            blind.append(int(written))
    missing = {i: w for i, w in last_write.items() if i not in in_file}
    if not missing:
        return set()
    held = [entry_id for entry_id in last_write if entry_id in in_file]
    first_writes = sorted(
        int(first)
        for _, first in select_in(
            db,
            "SELECT entry_id, min(written_ns) FROM memory_history WHERE agent = ?"
            " AND entry_id IN ({marks}) AND written_ns IS NOT NULL GROUP BY entry_id",
            held,
            [agent],
        )
    )
    blind.sort()
    protected = set()
    for entry_id, written in missing.items():
        after = bisect.bisect_right(blind, written)
        horizon = blind[after] if after < len(blind) else now_ns + 1  # the next blind save
        first_later = bisect.bisect_right(first_writes, written)
        if not (first_later < len(first_writes) and first_writes[first_later] < horizon):
            protected.add(entry_id)
    return protected


# (agent, op, source, scope, entry id, ts, content, detail, written_ns,
#  written_after_others)
HistoryRow = tuple[
    str, str, str, str | None, str | None, str | None, str | None, str | None, int | None, int
]


def history_row(
    agent: str,
    op: str,
    source: str,
    entry: Entry,
    detail: str | None = None,
    written_ns: int | None = None,
    after_others: bool = False,
) -> HistoryRow:
    """One event of an entry; ``written_ns`` when oryxmem wrote it into MEMORY.md then,
    ``after_others`` when that write went onto a file someone else had written."""
    return (
        agent,
        op,
        source,
        entry.scope,
        entry.entry_id,
        entry.ts,
        entry.content,
        detail,
        written_ns,
        int(after_others),
    )


def record_history_rows(db: Database, rows: Sequence[HistoryRow]) -> None:
    insert_values(
        db,
        f"INSERT INTO memory_history({staging.HISTORY_COLUMNS})",
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
        record_history_rows(
            db, [(agent, op, source, scope, None, None, as_text(content), detail, None, 0)]
        )


def entries_not_in_rows(db: Executes, agent: str, entries: Sequence[Entry]) -> list[Entry]:
    """The entries whose ids no row of the agent has yet."""
    present = {
        row[0]
        for row in select_in(
            db,
            "SELECT entry_id FROM memory_entries WHERE agent = ? AND entry_id IN ({marks})",
            [entry.entry_id for entry in entries],
            [agent],
        )
    }
    return [entry for entry in entries if entry.entry_id not in present]


ENTRY_COLUMNS = "e.id, e.scope, e.ts, e.content, e.entry_id, e.seq"


def entry_from_row(row: Any) -> Entry:
    """The entry a row of ENTRY_COLUMNS holds (one another program wrote has no id yet)."""
    _, scope, ts, content, entry_id, _ = row
    return Entry(scope, ts, content, entry_id or EntryIds().allocate(scope, ts, content))


def entries_by_row_id(db: Executes, row_ids: Sequence[int]) -> dict[int, Entry]:
    """The entries of these rows, by row id (rows gone since are left out)."""
    return {
        row[0]: entry_from_row(row)
        for row in select_in(
            db, f"SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE e.id IN ({{marks}})", row_ids
        )
    }


def ids_of_repeats(db: Executes, agent: str, key: str) -> list[str]:
    """The ids of the agent's rows that are copies of the entry whose first id is key."""
    rows = db.execute(
        "SELECT entry_id FROM memory_entries WHERE agent = ?1 AND entry_id >= ?2"
        " AND entry_id < ?2 || '.'",
        [agent, key],
    )
    return [row[0] for row in rows]


def insert_rows(db: Database, agent: str, entries: Sequence[Entry], source: str) -> None:
    """Rows that mirror entries of the file (their ids as agreed), after the others of their
    section, a hundred to a statement. The caller holds a write transaction, so the row
    ids after the largest are ours to give (the ones SQLite would have chosen)."""
    if not entries:
        return
    next_seq = next_seqs(db, agent)
    last = db.execute("SELECT coalesce(max(id), 0) FROM memory_entries").fetchone()[0]
    values = []
    for row_id, entry in enumerate(entries, last + 1):
        values.append((row_id, agent, *entry, next_seq[entry.scope], source))
        next_seq[entry.scope] += 1
    insert_values(
        db,
        "INSERT INTO memory_entries(id, agent, scope, ts, content, entry_id, seq, source)",
        values,
    )


def next_seqs(db: Database, agent: str) -> dict[str, int]:
    """The next position in each section: one probe of the (agent, scope, seq) index each."""
    return {
        scope: int(
            db.execute(
                "SELECT coalesce(max(seq), 0) + 1 FROM memory_entries"
                " WHERE agent = ? AND scope = ?",
                [agent, scope],
            ).fetchone()[0]
        )
        for scope in SCOPES
    }


def history(db: Database, agent: str | None, limit: int) -> list[dict[str, Any]]:
    where, args = ("WHERE agent = ?", [agent]) if agent is not None else ("", [])
    rows = db.execute(
        f"SELECT at, agent, op, source, scope, ts, content, detail FROM memory_history {where}"
        " ORDER BY id DESC LIMIT ?",
        [*args, limit],
    ).fetchall()
    keys = ("at", "agent", "op", "source", "scope", "ts", "content", "detail")
    return [dict(zip(keys, row, strict=True)) for row in reversed(rows)]


def sync_summary(db: Database, recent_repairs: int = 5) -> dict[str, Any]:
    """Agents per sync status, the ones with a problem, the quarantined rows, the lines
    the files keep that are not entries, and the latest repairs after a crash."""
    statuses: dict[str, int] = {}
    problems = []
    kept = []
    for agent, path, status, detail, notes in db.execute(
        "SELECT agent, path, status, detail, notes FROM sync_state ORDER BY agent"
    ):
        statuses[status] = statuses.get(status, 0) + 1
        if status != "ok":
            problems.append({"agent": agent, "status": status, "detail": detail})
        for line, text in json.loads(notes or "[]"):
            kept.append({"agent": agent, "path": path, "line": line, "text": text})
    quarantined = db.execute("SELECT count(*) FROM memory_quarantine").fetchone()[0]
    repairs = [
        {"at": at, "agent": agent, "detail": detail}
        for at, agent, detail in db.execute(
            "SELECT at, agent, detail FROM memory_history WHERE op = 'repair'"
            " ORDER BY id DESC LIMIT ?",
            [recent_repairs],
        )
    ]
    return {
        "agents": statuses,
        "problems": problems,
        "quarantined_rows": quarantined,
        "kept_lines": kept,
        "repairs": repairs,
    }


def agreed_state(
    db: Database,
    agent: str,
    path: str,
    stat: FileStat | None,
    sha: str | None,
    agreed: list[str],
    notes: Sequence[tuple[int, str]] = (),
) -> SyncState:
    """The state both sides agree on now: status ok, every change so far taken in."""
    return SyncState(
        agent=agent,
        path=path,
        file_stat=stat,
        sha256=sha,
        agreed=agreed,
        status="ok",
        detail=None,
        change_seq=latest_change_seq(db),
        notes=list(notes),
    )


def staged_appends(
    db: Database, batches: Iterable[tuple[str, Sequence[Append], str]]
) -> AbstractContextManager[None]:
    """The entries of these appends ((agent, appends, source) each) and their history,
    staged for mirror_appends (store/staging.py): taken before the write transaction,
    left around it."""
    history: list[HistoryRow] = []
    entries: list[StagedEntry] = []
    for agent, appends, source in batches:
        places = dict.fromkeys(SCOPES, 0)
        for append_no, append in enumerate(appends):
            for entry in append.entries:
                history.append(
                    history_row(
                        agent,
                        "add",
                        source,
                        entry,
                        written_ns=append.written_ns,
                        after_others=append.after_others,
                    )
                )
                places[entry.scope] += 1
                entries.append((agent, append_no, *entry, source, places[entry.scope]))
    return staging.staged(db, history, entries)


def mirror_appends(db: Database, agent: str, path: str, appends: Sequence[Append]) -> bool:
    """Mirror entries just appended to MEMORY.md into the rows; they were staged
    (staged_appends), and the caller holds a write transaction.

    ``appends`` are this process's appends in order, each with the file's stat before
    and after it: consecutive, unless someone else wrote the file between two of them
    (their mirror waited on a locked database meanwhile). The entries always become
    rows (those a reconcile has not taken in already), with their history: so they are
    kept even if the file loses them before the next reconcile (a stale editor buffer,
    a branch switched), which then puts them back. When the agreed state matches the
    file as it was before one of the appends, no row changed since, and no one wrote
    the file between the appends from there on, the state moves to the last stat and
    True says both sides agree; otherwise (someone else wrote too) returns False:
    reconcile soon.
    """
    staging.move_history(db, agent)
    # Whether both sides agreed just before these appends: asked before the rows go in
    # (their insert is itself a change to the rows).
    state = read_state(db, agent, with_agreed=False)
    start, all_taken = _agreed_before(db, agent, state, appends)
    # Agreed just before the first append, and no row changed since: the rows are the file
    # as it was then, which had none of these new ids; no need to look them up.
    added = staging.move_entries(db, agent, next_seqs(db, agent), only_missing=start != 0)
    if start is None or appends[-1].after is None:  # (None: someone else wrote it too)
        return all_taken and not added
    notes = state.notes if state is not None else []
    write_state_row(db, agreed_state(db, agent, path, appends[-1].after, None, [], notes))
    staging.move_agreed(db, agent, start)
    return True


def _agreed_before(
    db: Database, agent: str, state: SyncState | None, appends: Sequence[Append]
) -> tuple[int | None, bool]:
    """(the first append whose before-stat both sides agreed on, or None; whether the
    state already holds the file as it is after them all)."""
    if state is None:  # a new agent: in sync if neither side had anything yet
        has_rows = db.execute(
            "SELECT 1 FROM memory_entries WHERE agent = ? LIMIT 1", [agent]
        ).fetchone()
        return (0 if appends[0].before is None and has_rows is None else None), False
    if not is_current(db, state):  # a status not ok, or a row changed since
        return None, False
    stats = [append.before for append in appends]
    start = stats.index(state.file_stat) if state.file_stat in stats else None
    if start is not None and any(
        later.before != earlier.after for earlier, later in pairwise(appends[start:])
    ):
        # Someone else wrote the file between two of them (an editor's buffer written
        # back while the database was locked, so their mirror waited): the file the
        # last one left is not the rows plus these entries. The reconcile judges it.
        return None, False
    return start, start is None and appends[-1].after == state.file_stat
