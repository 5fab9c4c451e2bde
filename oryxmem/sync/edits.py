"""Changing entries that are there already: forgetting some, writing others anew.

A save only ever adds; these take entries out or rewrite them, so they go through the
file and the rows together: under the agent's file lock and one write transaction the
file is edited (one atomic rewrite), the rows follow, history records each change with
who asked (``source``), and the agreed state moves to the file as written. The edit is
planned on both sides agreeing (a reconcile first takes in what others wrote), and it
names the entries it changes by id: an id that is not in the file any more (someone
changed or removed that entry since the caller read it) refuses the whole edit, and
nothing is written.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oryxmem.config import Config
from oryxmem.errors import (
    ContentTooLongError,
    EntryNotFoundError,
    FileBusyError,
    MemoryFileConflictedError,
)
from oryxmem.fileio import ConcurrentChange, retry_on_change
from oryxmem.secrets import checked_content
from oryxmem.store import rows
from oryxmem.store.db import write_transaction
from oryxmem.store.format import Entry, MemoryDocument, NewEntry, normalize_content
from oryxmem.sync.engine import (
    RECONCILE_ATTEMPTS,
    SyncEngine,
    kept_lines,
)

if TYPE_CHECKING:
    from oryxmem.store.db import Database
    from oryxmem.store.markdown import MarkdownMemoryStore


@dataclass(frozen=True)
class Edited:
    """What an edit did: the entries it took out, those it wrote anew as they were, and
    as they are now (with their new ids)."""

    agent: str
    removed: list[Entry]
    replaced: list[Entry]
    written: list[Entry]


def edit_entries(
    engine: SyncEngine,
    agent: str,
    removals: Sequence[str],
    replacements: Mapping[str, str],
    source: str,
) -> Edited:
    """Take the entries ``removals`` names out of the agent's memory, and write each entry
    ``replacements`` names with its new content (same section, same time, same place).
    Raises EntryNotFoundError, naming the ids, when any is not in the file."""
    store = engine.files.get(agent)
    texts = _checked(replacements, engine.config)  # before any lock

    def attempt() -> Edited:
        engine.reconcile_agent(agent)  # both sides agree first: what others wrote is in
        return _edit_once(engine, agent, store, removals, texts, source)

    try:
        return retry_on_change(RECONCILE_ATTEMPTS, attempt)
    except ConcurrentChange:
        raise FileBusyError(
            "MEMORY.md kept changing while the edit was planned (or git is mid-operation);"
            " nothing was changed: try again"
        ) from None


def _edit_once(
    engine: SyncEngine,
    agent: str,
    store: MarkdownMemoryStore,
    removals: Sequence[str],
    replacements: Mapping[str, str],
    source: str,
) -> Edited:
    db = engine.db
    with store.lock.hold():
        doc, key = store.current_locked()
        if not doc.parseable:
            raise MemoryFileConflictedError("MEMORY.md has git conflict markers; resolve them")
        by_id = _present(doc, [*removals, *replacements])
        with write_transaction(db):
            state = rows.read_state(db, agent)
            if state is None or not rows.is_current(db, state, key):
                raise ConcurrentChange(store.path)  # others wrote since: agree, plan again
            new = {
                entry_id: NewEntry(by_id[entry_id].scope, by_id[entry_id].ts, text)
                for entry_id, text in replacements.items()
            }
            store.edit_locked((), removals, based_on=key, replacements=new)
            after, after_key = store.current_locked()
            written = _written(doc, after, removals, list(replacements))
            removed = [by_id[entry_id] for entry_id in removals]
            _follow_in_rows(engine, agent, removed, written, source, by_id, list(replacements))
            agreed = list(after.entry_lines)
            # Tombstones before the new agreed state: a crash between writes them again.
            # agreed: the file read, so what went is what was removed or replaced
            gone = set(state.agreed).difference(agreed)
            store.tombstones.add((i, _time_of(doc, by_id, i)) for i in sorted(gone))
            store.tombstones.lift(entry.entry_id for entry in written)  # written on purpose
            path = str(engine.workspace.memory_path(agent))
            sha = after.lines.sha256()
            new_state = rows.agreed_state(
                db, agent, path, after_key, sha, agreed, kept_lines(after)
            )
            rows.write_state(db, new_state, state.agreed)
    return Edited(agent, removed, [by_id[entry_id] for entry_id in replacements], written)


def _checked(replacements: Mapping[str, str], config: Config) -> dict[str, str]:
    """Each new content as a save would store it (stripped, no controls, in bounds, no
    credential unless memory.secrets allows it)."""
    checked = {}
    limit = config.max_content_chars
    for entry_id, content in replacements.items():
        text = normalize_content(checked_content(content, str(config.get("memory.secrets"))))
        if len(text) > limit:
            raise ContentTooLongError(f"content is {len(text)} characters; the limit is {limit}")
        checked[entry_id] = text
    return checked


def _present(doc: MemoryDocument, wanted: Sequence[str]) -> dict[str, Entry]:
    """The wanted entries by id; EntryNotFoundError when any is not in the file."""
    found = {entry_id: doc.entry(entry_id) for entry_id in dict.fromkeys(wanted)}
    missing = [entry_id for entry_id, entry in found.items() if entry is None]
    if missing:
        raise EntryNotFoundError(
            f"no entry {', '.join(missing)} in MEMORY.md: it changed or went since it was"
            " read; read it again",
            data={"missing": missing},
        )
    return {entry_id: entry for entry_id, entry in found.items() if entry is not None}


def _time_of(doc: MemoryDocument, by_id: dict[str, Entry], entry_id: str) -> str | None:
    """The time of an entry the edit took from the file. Not always one it names: alike
    entries are numbered in file order (X, X-1), so when X goes the id that leaves the
    file is the last of them."""
    entry = by_id.get(entry_id) or doc.entry(entry_id)
    return None if entry is None else entry.ts


def _written(
    before: MemoryDocument, after: MemoryDocument, removals: Sequence[str], replaced: list[str]
) -> list[Entry]:
    """The entries that took the replaced ones' lines, read back from the file written: a
    replaced line keeps its place, moved up by the removed lines above it."""
    removed_lines = sorted(before.entry_lines[entry_id] for entry_id in removals)
    written = []
    for entry_id in replaced:
        index = before.entry_lines[entry_id]
        entry = after.entry_at_line(index - bisect.bisect_left(removed_lines, index))
        if entry is None:
            raise ValueError(f"the line written for {entry_id} holds no entry")
        written.append(entry)
    return written


def _follow_in_rows(
    engine: SyncEngine,
    agent: str,
    removed: list[Entry],
    written: list[Entry],
    source: str,
    before: Mapping[str, Entry],
    replaced: list[str],
) -> None:
    """The rows and the history follow the file: removed rows go, rewritten rows take
    their new content (keeping their place in the section)."""
    db = engine.db
    db.conn.executemany(
        "DELETE FROM memory_entries WHERE agent = ? AND entry_id = ?",
        [[agent, entry.entry_id] for entry in removed],
    )
    db.conn.executemany(
        "UPDATE memory_entries SET content = ?, entry_id = ? WHERE agent = ? AND entry_id = ?",
        [
            [new.content, new.entry_id, agent, old]
            for old, new in zip(replaced, written, strict=True)
        ],
    )
    events = [rows.history_row(agent, "remove", source, entry) for entry in removed]
    for old, new in zip(replaced, written, strict=True):
        events.append(rows.history_row(agent, "remove", source, before[old], "edited"))
        events.append(rows.history_row(agent, "add", source, new, "edited"))
    rows.record_history_rows(db, events)


def purge_history(db: Database, agent: str, entry_ids: Sequence[str]) -> None:
    """History keeps that these entries were, not what they said (oryxmem forget --purge)."""
    with write_transaction(db):
        db.conn.executemany(
            "UPDATE memory_history SET content = NULL, detail = 'purged' WHERE agent = ?"
            " AND entry_id = ?",
            [[agent, entry_id] for entry_id in entry_ids],
        )
