"""Mem0MemoryStore: long-term memory read from mem0 (memory.backend = "mem0").

A memory's scope and time are in its mem0 metadata (a memory another mem0 client
added has none: it is archival, stamped with its creation time). Entries come in
time order (mem0 keeps no order of its own), each section as the file orders it.
Recall is the exact keyword contract over the archival entries; ``search`` is mem0's
own search by meaning. The daemon mirrors MEMORY.md and mem0 both ways
(sync/mem0_mirror.py), and brings mem0 up to the rows before it reads through this
store, so a read after a save finds it.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("mem0") is None:  # not imported here: mem0_link imports it offline
    raise ModuleNotFoundError("No module named 'mem0'", name="mem0")

from oryxmem.backends.mem0_link import Mem0Link, Mem0Memory, link_for, metadata_of
from oryxmem.backends.mem0_mirror import Mem0Mirror
from oryxmem.clock import Clock
from oryxmem.store.base import LongTermMemoryStore, MemorySnapshot, StoreLimits, StoreResources
from oryxmem.store.format import (
    ARCHIVAL,
    CORE,
    SCOPES,
    Entry,
    EntryIds,
    EntryText,
)
from oryxmem.store.window import archival_window


def entries_of(memories: list[Mem0Memory]) -> tuple[list[Entry], list[Entry]]:
    """(core, archival) entries of mem0's memories, each section in time order; one of
    oryxmem's keeps its id, another client's is given the id its line would have."""
    ordered = sorted(
        memories,
        key=lambda m: (str(m.metadata.get("ts") or m.local_time or ""), m.created_at or ""),
    )
    sections: dict[str, list[Entry]] = {CORE: [], ARCHIVAL: []}
    ids = EntryIds()
    for memory in ordered:
        scope = memory.metadata.get("scope")
        scope = scope if scope in SCOPES else ARCHIVAL
        ts = _time(memory) or None
        made = ids.entry(scope, ts, memory.text)
        own = memory.oryxmem_id
        sections[scope].append(made._replace(entry_id=own) if own else made)
    return sections[CORE], sections[ARCHIVAL]


def _time(memory: Mem0Memory) -> str:
    return str(memory.metadata.get("ts") or memory.local_time or "")


class Mem0MemoryStore(LongTermMemoryStore):
    """``rows``: mem0 is first brought up to the rows of memory_entries before each read
    (a push of backends/mem0_mirror.py), so a read after a save finds it."""

    def __init__(
        self,
        link: Mem0Link,
        agent: str,
        *,
        clock: Clock,
        limits: StoreLimits,
        rows: Mem0Mirror | None = None,
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        self.link = link
        self.agent = agent
        self.rows = rows

    @classmethod
    def for_agent(cls, agent: str, resources: StoreResources) -> Mem0MemoryStore:
        link = link_for(resources.workspace, resources.config)
        push = Mem0Mirror(resources.database(), link, str(resources.workspace.root), None)
        return cls(link, agent, clock=resources.clock, limits=resources.limits, rows=push)

    def _append(self, addition: EntryText) -> Entry:
        core, archival = self.entries()
        ids = EntryIds.counting(e.entry_id for e in core + archival)
        entry = ids.entry(addition.scope, addition.ts, addition.content)
        self.link.add(self.agent, entry.content, metadata_of(entry))
        return entry

    def _push(self) -> list[Mem0Memory] | None:
        """mem0 brought up to the rows; its memories, when the push changed none."""
        return self.rows.pass_agent(self.agent).memories if self.rows is not None else None

    def entries(self) -> tuple[list[Entry], list[Entry]]:
        memories = self._push()
        return entries_of(memories if memories is not None else self.link.memories(self.agent))

    def load(self) -> MemorySnapshot:
        core, archival = self.entries()
        window = archival_window(archival, self.limits.archival_limit_chars)
        return MemorySnapshot(core, window, len(archival))

    def _recall(self, folded_keyword: str) -> list[Entry]:
        _, archival = self.entries()
        return [entry for entry in archival if folded_keyword in entry.content.casefold()]

    def search(self, query: str, limit: int = 10) -> list[tuple[Entry, float]]:
        """The agent's entries by meaning, through mem0's own search, best first."""
        self._push()
        found = self.link.search(self.agent, query, limit)
        core, archival = entries_of([memory for memory, _ in found])
        by_text = {(e.content, e.scope): e for e in core + archival}
        out = []
        for memory, score in found:
            scope = memory.metadata.get("scope")
            entry = by_text.get((memory.text, scope if scope in SCOPES else ARCHIVAL))
            if entry is not None:
                out.append((entry, score))
        return out
