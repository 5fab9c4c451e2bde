"""Rows no MEMORY.md can hold: found, and moved to memory_quarantine with their reason.

Only rows another program wrote can break the rules (an agent name that can never be
a directory, a bad scope or timestamp, content that is not text or too long). Every
function here that writes runs inside the caller's write transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from oryxmem.clock import TIMESTAMP_RE
from oryxmem.errors import OryxError
from oryxmem.store.db import Executes
from oryxmem.store.format import SCOPES, normalize_content
from oryxmem.store.rows import as_text, record_history
from oryxmem.workspace import agent_name_problem

if TYPE_CHECKING:
    from oryxmem.store.db import Database


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


RowToFix = tuple[int, Any, Any, Any, str | None]  # row id, scope, ts, content, problem


def rows_to_fix(db: Executes, agent: str, max_content_chars: int, since_seq: int) -> list[RowToFix]:
    """This agent's rows that break the rules (with the problem) or whose content is padded
    (problem None). Only rows another program wrote can: those it inserted (no entry id
    yet) and those it changed after ``since_seq`` (the change log says which). Reads only."""
    found: list[RowToFix] = []
    for row_id, scope, ts, content in db.execute(
        "SELECT id, scope, ts, content FROM memory_entries WHERE agent = ?1 AND entry_id IS NULL"
        " UNION SELECT e.id, e.scope, e.ts, e.content FROM memory_changes c"
        " JOIN memory_entries e ON e.id = c.row_id"
        " WHERE c.agent = ?1 AND c.op = 'update' AND c.seq > ?2 AND e.agent = ?1",
        [agent, since_seq],
    ):
        problem = row_problem(agent, scope, ts, content, max_content_chars)
        if problem is not None or content != content.strip():
            found.append((row_id, scope, ts, content, problem))
    return found


def quarantine_invalid_rows(
    db: Database, agent: str, max_content_chars: int, since_seq: int
) -> list[str]:
    """Move this agent's rule-breaking rows (rows_to_fix) to memory_quarantine and strip
    padded content; the caller holds a write transaction. Gives the problems."""
    reasons = []
    for row_id, scope, ts, content, problem in rows_to_fix(db, agent, max_content_chars, since_seq):
        if problem is None:
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
        [row_id, agent, str(scope), None if ts is None else str(ts), as_text(content), reason],
    )
    db.execute("DELETE FROM memory_entries WHERE id = ?", [row_id])
    record_history(db, agent, "quarantine", "db", None, reason, scope=str(scope), content=content)


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


def quarantined(db: Database) -> Iterable[dict[str, Any]]:
    keys = ("at", "row_id", "agent", "scope", "ts", "content", "reason")
    for row in db.execute(
        "SELECT at, row_id, agent, scope, ts, content, reason FROM memory_quarantine ORDER BY id"
    ):
        yield dict(zip(keys, row, strict=True))
