"""Sessions: conversations kept in the database (store/sessions.py), transcripts brought
in from elsewhere, and the record of tool calls that came through the socket."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from oryxmem.service.shared import Shared
from oryxmem.store.db import write_transaction
from oryxmem.store.sessions import SessionInfo, SessionStore, ToolRecord, insert_tool_records
from oryxmem.store.transcripts import read_transcript, transcript_files


class Sessions:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    @property
    def store(self) -> SessionStore:
        return SessionStore(self.shared.db)

    def create_session(self, agent: str | None) -> SessionInfo:
        return self.store.create(self.shared.resolve(agent).agent)

    def recent(self, agent: str | None, limit: int) -> list[SessionInfo]:
        name = None if agent is None else self.shared.resolve(agent).agent
        return self.store.recent(name, limit)

    def append_message(self, session_id: str, role: str, content: str) -> int:
        return self.store.append(session_id, role, content)

    def history(self, session_id: str, turns: int | None = None) -> list[dict[str, Any]]:
        return self.store.history(session_id, turns or self.shared.config.max_history_turns)

    def import_sessions(self, paths: Sequence[Path], agent: str | None) -> list[dict[str, Any]]:
        """Transcripts (JSONL, Claude Code session files, or folders of them) as sessions of
        the agent; each again adds only what it gained. Every file is read before any is
        written: one that cannot be read imports nothing."""
        ref = self.shared.resolve(agent)
        transcripts = [
            (path, read_transcript(path))
            for given in paths
            for path in transcript_files(Path(given))
        ]
        report = []
        for path, transcript in transcripts:
            session, added = None, 0
            if transcript.messages:
                session, added = self.store.import_messages(
                    ref.agent, transcript.key, transcript.messages
                )
            report.append(
                {
                    "file": str(path),
                    "source": transcript.key,
                    "added": added,
                    "session": session,
                    "kind": transcript.kind,
                }
            )
        return report

    def record_tool(self, record: ToolRecord) -> None:
        """Record one tool call in ``tool_invocations`` (with no daemon: at once)."""
        with write_transaction(self.shared.db):
            insert_tool_records(self.shared.db, [record])
