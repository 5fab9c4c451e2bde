"""Reading: an agent's whole memory, and every agent with its counts, as the configured
backend (``memory.backend``) answers them."""

from __future__ import annotations

from oryxmem.errors import OryxError
from oryxmem.service.results import AgentSummary, MemoryView
from oryxmem.service.shared import Shared
from oryxmem.store.format import new_file_text
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
            summaries.append(AgentSummary(name, len(core), len(archival), None))
        return summaries
