"""mem0 as one more side of the mirror: the rows of ``memory_entries`` and mem0 agree.

MEMORY.md and the rows are kept equal by sync (the file is the truth); this keeps the
rows and mem0 equal, for every agent, whatever the backend reads from. What both sides
held at the last pass is remembered in ``mem0_agreed`` (agent, entry id, mem0 id), so a
difference can be told apart as an addition on one side or a removal on the other:

- an entry of the rows mem0 does not hold: new here (not agreed): added to mem0 with
  its id, scope and time in the metadata; agreed before: another mem0 client deleted
  it, so its row is deleted (and sync takes the line out of MEMORY.md, into history);
- a memory of oryxmem's (it carries ``oryxmem_id``) whose entry the rows no longer hold:
  agreed before: removed here, so it is deleted from mem0; never agreed: brought in;
- a memory another mem0 client added (no ``oryxmem_id``): saved, through the one write
  path, to MEMORY.md (source ``mem0``), then tagged with the entry's id;
- two memories of one entry (a crash between an add and its record): one is kept.

Every step is recorded before it is made (an add's row in ``mem0_agreed`` before the
add, with no mem0 id yet), so a crash at any point is finished by the next pass: an
intent with no memory is added again, a memory found for an intent is adopted, an
import whose save landed is recognised by its text and never saved twice. Nothing
here holds up a save: the daemon runs passes on a thread of their own, every
``mem0.poll_seconds``, and before a read through the mem0 backend.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from oryxmem.backends.mem0_link import Mem0Link, Mem0Memory, metadata_of
from oryxmem.store.db import write_transaction
from oryxmem.store.format import SCOPES, Entry
from oryxmem.store.rows import ENTRY_COLUMNS, entry_from_row

if TYPE_CHECKING:
    from oryxmem.store.db import Database

log = logging.getLogger("oryxmem.mem0")
# An agent's memories all gone from mem0 at once, more than this many: a wiped (or made
# again) store, not a client deleting them; they are added again, not deleted here.
WIPE_LEAST = 3

# (agent, content, scope) -> the entry a save made of it, durable in MEMORY.md and in the
# rows when it returns (the one write path)
Save = Callable[[str, str, str], Entry]
_PASSES: dict[str, threading.Lock] = {}  # one pass at a time per workspace, in a process
_PASSES_LOCK = threading.Lock()


def pass_lock(owner: str) -> threading.Lock:
    with _PASSES_LOCK:
        return _PASSES.setdefault(owner, threading.Lock())


@dataclass
class MirrorReport:
    agent: str
    added: int = 0  # entries added to mem0
    deleted: int = 0  # memories deleted from mem0 (their entries were removed here)
    brought_in: int = 0  # memories another client added, now in MEMORY.md
    removed: int = 0  # entries another client deleted in mem0, now out of the rows
    doubles: int = 0  # second memories of one entry, deleted
    # mem0's memories of the agent as the pass found them, when it changed none of them
    memories: list[Mem0Memory] | None = None

    @property
    def changed(self) -> bool:
        return bool(self.added or self.deleted or self.brought_in or self.removed)


@dataclass
class _Step:
    """One pass's view of one agent: mem0's memories of entries of ours, the rows, what
    was agreed, and the report."""

    agent: str
    ours: dict[str, list[Mem0Memory]]
    rows: dict[str, Entry]
    agreed: dict[str, str | None]
    report: MirrorReport


class Mem0Mirror:
    """``save`` None: push only (mem0 brought up to the rows; what other clients did is
    left for a full pass, the daemon's)."""

    def __init__(self, db: Database, link: Mem0Link, owner: str, save: Save | None) -> None:
        self.db = db
        self.link = link
        self.save = save
        self.lock = pass_lock(owner)
        with write_transaction(db):  # its tables: the backend's migrations (mem0_tables.py)
            known = db.execute("SELECT store_id FROM mem0_store").fetchone()
            if known is None or known[0] != link.store_id:  # another store: nothing agreed
                db.execute("DELETE FROM mem0_agreed")
                db.execute("DELETE FROM mem0_store")
                db.execute("INSERT INTO mem0_store VALUES (?)", [link.store_id])

    def _rows(self, agent: str) -> dict[str, Entry]:
        rows = self.db.execute(
            f"SELECT {ENTRY_COLUMNS} FROM memory_entries e WHERE e.agent = ?"
            " AND e.entry_id IS NOT NULL ORDER BY e.scope, e.seq",
            [agent],
        )
        return {entry.entry_id: entry for entry in map(entry_from_row, rows)}

    def _agreed(self, agent: str) -> dict[str, str | None]:
        rows = self.db.execute("SELECT entry_id, mem0_id FROM mem0_agreed WHERE agent = ?", [agent])
        return {entry_id: mem0_id for entry_id, mem0_id in rows}

    def _record(self, agent: str, entry_id: str, mem0_id: str | None) -> None:
        with write_transaction(self.db):
            self.db.execute(
                "INSERT INTO mem0_agreed(agent, entry_id, mem0_id) VALUES (?, ?, ?)"
                " ON CONFLICT(agent, entry_id) DO UPDATE SET mem0_id = excluded.mem0_id",
                [agent, entry_id, mem0_id],
            )

    def _forget(self, agent: str, entry_id: str) -> None:
        with write_transaction(self.db):
            self.db.execute(
                "DELETE FROM mem0_agreed WHERE agent = ? AND entry_id = ?", [agent, entry_id]
            )

    def pass_agent(self, agent: str) -> MirrorReport:
        """One pass for one agent: afterwards the rows and mem0 hold the same entries."""
        with self.lock:
            return self._pass(agent)

    def _pass(self, agent: str) -> MirrorReport:
        report = MirrorReport(agent)
        rows = self._rows(agent)
        agreed = self._agreed(agent)
        memories = self.link.memories(agent)
        ours, foreign = self._sort_out(memories, rows, agreed)
        if self.save is not None:  # first: an entry they bring is then the rows' and ours
            for memory in foreign:
                entry_id = self._bring_in(agent, memory, rows, self.save)
                ours.setdefault(entry_id, []).append(memory)
                report.brought_in += 1
            rows = self._rows(agent)
            agreed = self._agreed(agent)
        step = _Step(agent, ours, rows, agreed, report)
        self._settle_ours(step)
        step.agreed = agreed = self._unless_wiped(step)
        self._mirror_rows(step)
        for entry_id in set(agreed) - set(rows) - set(ours):  # gone on both sides
            self._forget(agent, entry_id)
        if not (report.changed or report.doubles):
            report.memories = memories
        return report

    @staticmethod
    def _sort_out(
        memories: list[Mem0Memory], rows: dict[str, Entry], agreed: dict[str, str | None]
    ) -> tuple[dict[str, list[Mem0Memory]], list[Mem0Memory]]:
        """mem0's memories of entries of ours (by entry id), and the others'."""
        ours: dict[str, list[Mem0Memory]] = {}
        foreign: list[Mem0Memory] = []
        by_mem0_id = {mem0_id: entry_id for entry_id, mem0_id in agreed.items() if mem0_id}
        for memory in memories:
            own = memory.oryxmem_id or by_mem0_id.get(memory.id)  # (a tag not read back)
            if own is None or (own not in rows and own not in agreed):
                foreign.append(memory)  # another client's (or another workspace's) memory
            else:
                ours.setdefault(own, []).append(memory)
        return ours, foreign

    def _settle_ours(self, step: _Step) -> None:
        """One memory per entry of ours; an entry removed here leaves mem0 too."""
        agent, ours, rows, agreed = step.agent, step.ours, step.rows, step.agreed
        report = step.report
        for entry_id, held in ours.items():
            keep, *extra = held
            for memory in extra:  # one entry, two memories: a crash between add and record
                self.link.delete(memory.id)
                report.doubles += 1
            if entry_id in rows:
                if agreed.get(entry_id) != keep.id:
                    self._record(agent, entry_id, keep.id)  # adopted
            else:  # agreed, and removed here: out of mem0 too
                self.link.delete(keep.id)
                self._forget(agent, entry_id)
                report.deleted += 1

    def _unless_wiped(self, step: _Step) -> dict[str, str | None]:
        """The agreed memories, or none when mem0 lost all of them at once (a store made
        again: its entries are added again rather than deleted here)."""
        agent, ours, rows, agreed = step.agent, step.ours, step.rows, step.agreed
        vanished = [e for e in rows if e not in ours and agreed.get(e)]
        if len(vanished) <= WIPE_LEAST or ours:
            return agreed
        log.warning(
            "mem0 holds none of the %d memories of %s it held: taken for a store made"
            " again, they are added again (delete them one by one to delete them)",
            len(vanished),
            agent or "(global)",
        )
        with write_transaction(self.db):
            self.db.execute("DELETE FROM mem0_agreed WHERE agent = ?", [agent])
        return {}

    def _mirror_rows(self, step: _Step) -> None:
        """Each row mem0 lacks: added to mem0, or (deleted in mem0) removed here."""
        agent, ours, rows, agreed = step.agent, step.ours, step.rows, step.agreed
        report = step.report
        for entry_id, entry in rows.items():
            if entry_id in ours:
                continue
            if entry_id in agreed and agreed[entry_id] is not None:  # deleted in mem0
                if self.save is not None:
                    self._delete_row(agent, entry_id)
                    report.removed += 1
                continue
            self._record(agent, entry_id, None)  # the intent first: a crash re-adds it
            mem0_id = self.link.add(agent, entry.content, metadata_of(entry))
            self._record(agent, entry_id, mem0_id)
            report.added += 1

    def _delete_row(self, agent: str, entry_id: str) -> None:
        with write_transaction(self.db):
            self.db.execute(
                "DELETE FROM memory_entries WHERE agent = ? AND entry_id = ?", [agent, entry_id]
            )
            self.db.execute(
                "DELETE FROM mem0_agreed WHERE agent = ? AND entry_id = ?", [agent, entry_id]
            )

    def _bring_in(self, agent: str, memory: Mem0Memory, rows: dict[str, Entry], save: Save) -> str:
        """Save another client's memory to MEMORY.md (once), then tag it with the entry;
        the entry's id."""
        scope = memory.metadata.get("scope")
        scope = scope if scope in SCOPES else "archival"
        pending = self.db.execute(
            "SELECT content FROM mem0_imports WHERE mem0_id = ?", [memory.id]
        ).fetchone()
        entry = None
        if pending is not None:  # a save may have landed before a crash: find it
            entry = next((e for e in rows.values() if e.content == pending[0]), None)
        if entry is None:
            with write_transaction(self.db):
                self.db.execute(
                    "INSERT OR REPLACE INTO mem0_imports(mem0_id, agent, content) VALUES (?, ?, ?)",
                    [memory.id, agent, memory.text.strip()],
                )
            entry = save(agent, memory.text, scope)
        self._record(agent, entry.entry_id, memory.id)
        self.link.tag(memory.id, {**memory.metadata, **metadata_of(entry)})
        with write_transaction(self.db):
            self.db.execute("DELETE FROM mem0_imports WHERE mem0_id = ?", [memory.id])
        return entry.entry_id
