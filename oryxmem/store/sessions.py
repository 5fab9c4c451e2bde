"""Session history (``sessions.messages_json``) and the record of tool calls."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oryxmem.errors import (
    EmptyContentError,
    InvalidRoleError,
    SessionNotFoundError,
    TranscriptChangedError,
)
from oryxmem.store.db import insert_values, write_transaction

if TYPE_CHECKING:
    from oryxmem.store.db import Database

ROLES = ("user", "assistant", "system", "tool")


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def dump_messages(messages: list[dict[str, Any]]) -> str:
    """messages_json as the sessions keep it."""
    return json.dumps(messages, ensure_ascii=False)


def turns_tail(messages: list[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """The last ``turns`` turns; a turn starts at a user message."""
    starts = [index for index, message in enumerate(messages) if message.get("role") == "user"]
    if len(starts) <= turns:
        return messages
    return messages[starts[-turns] :]


@dataclass(frozen=True)
class SessionInfo:
    id: str
    agent: str
    created_at: str
    updated_at: str
    message_count: int


class SessionStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def create(self, agent: str) -> SessionInfo:
        session_id = os.urandom(16).hex()
        now = _now()
        with write_transaction(self.db):
            self.db.execute(
                "INSERT INTO sessions(id, agent, created_at, updated_at, messages_json)"
                " VALUES (?, ?, ?, ?, '[]')",
                [session_id, agent, now, now],
            )
        return SessionInfo(session_id, agent, now, now, 0)

    def append(self, session_id: str, role: str, content: str) -> int:
        """Add a message; returns the session's message count."""
        if role not in ROLES:
            raise InvalidRoleError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        if not content.strip():
            raise EmptyContentError("message content is empty")
        message = json.dumps({"role": role, "content": content, "at": _now()}, ensure_ascii=False)
        with write_transaction(self.db):
            cursor = self.db.execute(
                "UPDATE sessions SET messages_json = json_insert(messages_json, '$[#]', json(?)),"
                " updated_at = ? WHERE id = ?",
                [message, _now(), session_id],
            )
            if cursor.rowcount == 0:
                raise SessionNotFoundError(f"no session {session_id!r}")
            count: int = self.db.execute(
                "SELECT json_array_length(messages_json) FROM sessions WHERE id = ?", [session_id]
            ).fetchone()[0]
        return count

    def import_messages(
        self, agent: str, source: str, messages: list[dict[str, str]]
    ) -> tuple[str, int]:
        """An imported transcript as a session of the agent: the first time, a session with
        every message; again, only the messages it gained since (none: nothing changes).
        Returns the session id and how many messages were added. A transcript that no
        longer begins with what was imported is refused, changing nothing."""
        for message in messages:
            if message["role"] not in ROLES or not message["content"].strip():
                raise InvalidRoleError(f"not a message: {message!r:.80}")
        stamped = [{**m, "at": m.get("at") or _now()} for m in messages]
        with write_transaction(self.db):
            row = self.db.execute(
                "SELECT id, messages_json FROM sessions WHERE source = ?", [source]
            ).fetchone()
            if row is None:
                session_id = os.urandom(16).hex()
                first = stamped[0]["at"] if stamped else _now()
                last = stamped[-1]["at"] if stamped else first
                self.db.execute(
                    "INSERT INTO sessions(id, agent, created_at, updated_at, messages_json,"
                    " source) VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        session_id,
                        agent,
                        first,
                        last,
                        json.dumps(stamped, ensure_ascii=False),
                        source,
                    ],
                )
                return session_id, len(stamped)
            session_id, raw = row
            had = json.loads(raw)
            same = [(m["role"], m["content"]) for m in had]
            if [(m["role"], m["content"]) for m in stamped[: len(had)]] != same:
                raise TranscriptChangedError(
                    f"{source} no longer begins with the {len(had)} messages imported from it;"
                    " nothing was changed"
                )
            added = stamped[len(had) :]
            if added:
                self.db.execute(
                    "UPDATE sessions SET messages_json = ?, updated_at = ? WHERE id = ?",
                    [dump_messages(had + added), added[-1]["at"], session_id],
                )
            return session_id, len(added)

    def recent(self, agent: str | None, limit: int) -> list[SessionInfo]:
        """The sessions (of one agent, or all), the most recently active first."""
        where, args = ("", []) if agent is None else (" WHERE agent = ?", [agent])
        rows = self.db.execute(
            "SELECT id, agent, created_at, updated_at, json_array_length(messages_json)"
            f" FROM sessions{where} ORDER BY updated_at DESC, rowid DESC LIMIT ?",
            [*args, limit],
        )
        return [SessionInfo(*row) for row in rows]

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        row = self.db.execute(
            "SELECT messages_json FROM sessions WHERE id = ?", [session_id]
        ).fetchone()
        if row is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        messages: list[dict[str, Any]] = json.loads(row[0])
        return messages

    def history(self, session_id: str, turns: int) -> list[dict[str, Any]]:
        return turns_tail(self.messages(session_id), turns)


@dataclass(frozen=True)
class ToolRecord:
    """One tool call as tool_invocations keeps it (``at``: local time, to the second)."""

    tool: str
    agent: str
    session: str | None
    input: dict[str, Any]
    output: Any
    ok: bool
    ms: float
    at: str


def tool_record(
    tool: str,
    agent: str,
    session: str | None,
    input: dict[str, Any],
    output: Any,
    ok: bool,
    ms: float,
) -> ToolRecord:
    """The record of a call that ends now."""
    return ToolRecord(tool, agent, session, input, output, ok, ms, _now())


def insert_tool_records(db: Database, records: Sequence[ToolRecord]) -> None:
    """Into tool_invocations, in the caller's write transaction."""
    insert_values(
        db,
        "INSERT INTO tool_invocations(tool, agent, session, input, output, ok, ms, at)",
        [
            (
                r.tool,
                r.agent,
                r.session,
                json.dumps(r.input, ensure_ascii=False),
                json.dumps(r.output, ensure_ascii=False),
                int(r.ok),
                r.ms,
                r.at,
            )
            for r in records
        ],
    )
