"""Reading: an agent's whole memory, and every agent with its counts, as the configured
backend (``memory.backend``) answers them."""

from __future__ import annotations

from oryxmem.errors import EntryNotFoundError, OryxError
from oryxmem.fileio import file_stat
from oryxmem.service.results import AgentSummary, MemoryView, Page, Placed
from oryxmem.service.shared import Shared
from oryxmem.store.db import select_in
from oryxmem.store.format import CORE, Entry, new_file_text
from oryxmem.workspace import AgentRef


class Reading:
    def __init__(self, shared: Shared) -> None:
        self.shared = shared

    def get(self, agent: str | None) -> MemoryView:
        """Both sections, every entry, and the file's text."""
        shared = self.shared
        ref = shared.resolve(agent)
        core, archival = shared.reader(ref).entries()
        markdown = shared.files.get(ref.agent).document().text or new_file_text()
        return MemoryView(ref, core, archival, markdown)

    def page(self, agent: str | None, scope: str, offset: int, limit: int, newest: bool) -> Page:
        """A page of one section: ``limit`` entries from ``offset`` on, counted from the
        newest (the end of the section) or the oldest; positions count from the oldest."""
        shared = self.shared
        ref = shared.resolve(agent)
        core, archival = shared.reader(ref).entries()
        section = core if scope == CORE else archival
        total = len(section)
        if newest:
            stop = max(total - offset, 0)
            start = max(stop - limit, 0)
            positions = range(stop, start, -1)
        else:
            positions = range(offset + 1, min(offset + limit, total) + 1)
        entries = self._with_sources(ref, [(at, section[at - 1]) for at in positions])
        stat = file_stat(shared.workspace.memory_path(ref.agent))
        version = "none" if stat is None else "-".join(map(str, stat))
        return Page(ref, scope, offset, total, entries, version)

    def find(self, agent: str | None, entry_id: str) -> tuple[AgentRef, Placed]:
        """The entry with this id as the file has it now, with its position and source;
        EntryNotFoundError when it is not there (it changed or went)."""
        ref = self.shared.resolve(agent)
        reader = self.shared.reader(ref)
        core, archival = reader.entries()
        at = reader.archival_positions(archival).get(entry_id)
        if at is not None:
            return ref, self._with_sources(ref, [(at + 1, archival[at])])[0]
        for position, entry in enumerate(core, 1):
            if entry.entry_id == entry_id:
                return ref, self._with_sources(ref, [(position, entry)])[0]
        raise EntryNotFoundError(
            f"no entry {entry_id} in MEMORY.md: it changed or went since it was read",
            data={"missing": [entry_id]},
        )

    def _with_sources(self, ref: AgentRef, chosen: list[tuple[int, Entry]]) -> list[Placed]:
        """Each entry with the source its row names (None: no row yet)."""
        sources = dict(
            select_in(
                self.shared.db,
                "SELECT entry_id, source FROM memory_entries WHERE agent = ?"
                " AND entry_id IN ({marks})",
                [entry.entry_id for _, entry in chosen],
                [ref.agent],
            )
        )
        return [(at, entry, sources.get(entry.entry_id)) for at, entry in chosen]

    def agents(self) -> list[AgentSummary]:
        """The global file and every agent directory, with entry counts."""
        shared = self.shared
        _ = shared.backend  # one that cannot be loaded is the answer, not a problem per agent
        summaries = []
        for name in ["", *shared.workspace.agent_names()]:
            try:
                core, archival = shared.reader(AgentRef(name, name)).entries()
            except OryxError as error:
                summaries.append(AgentSummary(name, None, None, error.message))
                continue
            newest = max((e.ts for e in (*core[-1:], *archival[-1:]) if e.ts), default=None)
            summaries.append(AgentSummary(name, len(core), len(archival), None, newest))
        return summaries
