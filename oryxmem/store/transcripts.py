"""Past sessions from elsewhere, read as messages (pure: no database, no network).

Two formats, told apart by their lines:

- a JSONL transcript: one ``{"role": ..., "content": ...[, "ts": ...]}`` per line
  (role user, assistant, system or tool; ts as "YYYY-MM-DD HH:MM:SS" or ISO 8601);
- Claude Code's own session files (``~/.claude/projects/<project>/<session>.jsonl``):
  a record per line with ``type`` ("user", "assistant", "system", "summary", ...),
  ``message`` (``role`` and ``content``: a string or content blocks), ``timestamp``
  (ISO 8601), ``sessionId``; ``isSidechain`` (a subagent's) and ``isMeta`` records are
  not the conversation. Only text is kept: a user record that holds only tool results,
  and an assistant's tool calls and thinking, are not messages.

Each transcript has a key that names it wherever the file is (the Claude session id,
or the JSONL file's path), so importing it again adds only what it gained since.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from oryxmem.errors import InvalidFieldError
from oryxmem.store.sessions import ROLES

TRANSCRIPT_MAX_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Transcript:
    key: str  # what names it: claude-code:<session id>, or jsonl:<path>
    kind: str  # "claude-code" or "jsonl"
    messages: list[dict[str, str]]  # role, content, at


def local_time(stamp: Any) -> str | None:
    """A timestamp as the sessions keep them (local "YYYY-MM-DD HH:MM:SS"); None when
    there is none or it cannot be read."""
    if not isinstance(stamp, str) or not stamp.strip():
        return None
    try:
        moment = datetime.fromisoformat(stamp.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone()
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def blocks_text(content: Any) -> str:
    """The text of a Claude message's content: a string, or its text blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str))


def is_claude_record(record: Any) -> bool:
    return (
        isinstance(record, dict)
        and "type" in record
        and ("message" in record or "sessionId" in record)
    )


def claude_message(record: dict[str, Any]) -> tuple[str, str] | None:
    """(role, text) of a Claude Code record that is part of the conversation."""
    if record.get("isSidechain") or record.get("isMeta"):
        return None
    kind = record.get("type")
    message = record.get("message")
    if kind not in ("user", "assistant") or not isinstance(message, dict):
        return None
    text = blocks_text(message.get("content")).strip()
    return (str(kind), text) if text else None


def read_transcript(path: Path) -> Transcript:
    """The messages of a transcript file. A line that is not JSON or not a message (in
    a JSONL transcript) is an error naming the line, wherever it is: nothing of the file
    is taken. Only a last line with no newline after it yet is left for the next import
    (a host is writing it)."""
    raw = path.read_bytes()
    if len(raw) > TRANSCRIPT_MAX_BYTES:
        raise InvalidFieldError(f"{path} is larger than {TRANSCRIPT_MAX_BYTES >> 20} MiB")
    lines = raw.decode("utf-8", errors="replace").splitlines()
    being_written = bool(raw) and not raw.endswith(b"\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError:
            if number == len(lines) and being_written:
                continue
            raise InvalidFieldError(f"{path}:{number}: not JSON") from None
    if any(is_claude_record(record) for _, record in records[:50]):
        return _claude(path, [record for _, record in records])
    return _jsonl(path, records)


def _claude(path: Path, records: list[Any]) -> Transcript:
    session = next(
        (
            r["sessionId"]
            for r in records
            if isinstance(r, dict)
            and isinstance(r.get("sessionId"), str)
            and not r.get("isSidechain")
        ),
        path.stem,
    )
    messages = []
    for record in records:
        if not isinstance(record, dict):
            continue
        found = claude_message(record)
        if found is not None:
            role, text = found
            at = local_time(record.get("timestamp")) or ""
            messages.append({"role": role, "content": text, "at": at})
    return Transcript(f"claude-code:{session}", "claude-code", messages)


def _jsonl(path: Path, records: list[tuple[int, Any]]) -> Transcript:
    messages = []
    for number, record in records:
        if not isinstance(record, dict):
            raise InvalidFieldError(f"{path}:{number}: not an object")
        role, content = record.get("role"), record.get("content")
        if role not in ROLES:
            raise InvalidFieldError(f"{path}:{number}: role must be one of {', '.join(ROLES)}")
        if not isinstance(content, str) or not content.strip():
            raise InvalidFieldError(f"{path}:{number}: content must be a non-empty string")
        at = record.get("ts", record.get("at"))
        messages.append({"role": role, "content": content, "at": local_time(at) or ""})
    return Transcript(f"jsonl:{path.resolve()}", "jsonl", messages)


def transcript_files(path: Path) -> list[Path]:
    """A file, or the .jsonl files of a folder (a Claude Code project), in name order."""
    if path.is_dir():
        return sorted(p for p in path.glob("*.jsonl") if p.is_file())
    return [path]


def claude_project_dir(root: Path, home: Path | None = None) -> Path:
    """Where Claude Code keeps the sessions of a project folder: its absolute path with
    every '/' (newer versions: every character but letters and digits) made '-'."""
    base = (home or Path.home()) / ".claude" / "projects"
    text = str(root.resolve())
    plain = base / text.replace("/", "-")
    if plain.is_dir():
        return plain
    return base / re.sub(r"[^A-Za-z0-9]", "-", text)
