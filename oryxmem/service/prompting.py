"""The prompt builder: the memory block, and the four-part prompt (prompt.py says how).

Without a query the block is core whole and the newest archival entries that fit, read
from the backend alone: no index, no model. With the user's message it also holds the
entries most relevant to it (finding.py), a digest of the older ones, and relevant
rounds of the agent's other sessions. oryxmem never writes AGENT.md or USER.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oryxmem.digest import folds_for
from oryxmem.errors import EmptyKeywordError, InvalidContentError
from oryxmem.prompt import (
    ArchivalPart,
    Prompt,
    archival_for_query,
    episodes_part,
    memory_block,
    omitted_note,
    read_prompt_file,
)
from oryxmem.schemas import tool_schemas
from oryxmem.service.shared import Shared
from oryxmem.workspace import AgentRef

if TYPE_CHECKING:
    from oryxmem.index.episodes import EpisodeHit
    from oryxmem.service.finding import Finding
    from oryxmem.store.format import Entry

# How many ranked entries a prompt's relevant part is filled from (each taken if it fits).
RELEVANT_POOL = 60
EPISODES_SHOWN = 5  # rounds of other sessions a block with a query may show


class Prompting:
    def __init__(
        self,
        shared: Shared,
        finding: Callable[[], Finding],
        history: Callable[[str, int | None], list[dict[str, Any]]],
    ) -> None:
        """``finding`` gives the finding room when a query needs it (it loads the
        indexes and the model); ``history`` a session's last turns."""
        self.shared = shared
        self._finding = finding
        self._history = history

    def build_context(
        self, agent: str | None, session: str | None = None, query: str | None = None
    ) -> str:
        """The memory block of the prompt: core whole, both headings always; archival the
        newest that fit, or with a query the most relevant beside them."""
        shared = self.shared
        ref = shared.resolve(agent)
        if query is None or not query.strip():
            snapshot = shared.reader(ref).load()
            omitted = snapshot.archival.omitted
            part = ArchivalPart([omitted_note(omitted)] if omitted else [])
            part.lines += snapshot.archival.lines
            return memory_block(snapshot.core, part)
        core, archival = shared.reader(ref).entries()  # one copy of a long list, not two
        part = self.archival_part(ref, query, archival)
        episodes = self.relevant_episodes(ref, query, session)
        return memory_block(core, part, episodes_part(episodes, shared.config.episodic_max_chars))

    def archival_part(
        self, ref: AgentRef, query: str, archival: Sequence[Entry] | None = None
    ) -> ArchivalPart:
        """The archival part of a block built for a query (prompt.archival_for_query), of
        the agent's archival entries (read here when not given)."""
        from oryxmem.summarize import Server, model_lines  # only with a query

        shared = self.shared
        store = shared.reader(ref)
        if archival is None:
            _, archival = store.entries()
        owner = str(shared.workspace.db_path)
        server = Server.of(shared.config)
        return archival_for_query(
            archival,
            self._finding().relevant_entries(ref.agent, query, RELEVANT_POOL),
            shared.config.archival_limit_chars,
            digest_share=int(shared.config.get("summarize.digest_percent")) / 100,
            folds=lambda upto: folds_for(owner, ref.agent, archival, upto),
            rewrite=None if server is None else partial(model_lines, server),
            positions=store.archival_positions(archival),
        )

    def relevant_episodes(self, ref: AgentRef, query: str, session: str | None) -> list[EpisodeHit]:
        """The rounds of the agent's other sessions best for a query (a block's third part)."""
        try:
            return self._finding().search_episodes(
                ref.agent or None, query, EPISODES_SHOWN, session
            )
        except (EmptyKeywordError, InvalidContentError):
            return []

    def build_prompt(
        self,
        agent: str | None,
        session: str | None = None,
        turns: int | None = None,
        query: str | None = None,
    ) -> Prompt:
        """The four blocks: AGENT.md and the bootstrap files, the memory block (with a
        query, the relevant entries beside the newest), the session's last turns, the
        tools."""
        shared = self.shared
        ref = shared.resolve(agent)
        notes: list[str] = []
        files = []
        if ref.agent:
            path = shared.workspace.memory_dir(ref.agent) / "AGENT.md"
            files.append(read_prompt_file(path, "AGENT.md", notes))
        for name in shared.config.bootstrap_files:
            parts = Path(name).parts
            if Path(name).is_absolute() or ".." in parts or not parts:
                notes.append(f"{name} left out: bootstrap files are paths inside .oryxos/")
                continue
            files.append(read_prompt_file(shared.workspace.os_dir / name, name, notes))
        memory = self.build_context(ref.agent, session, query)
        history = self._history(session, turns) if session else []
        tools = tool_schemas()["tools"]
        return Prompt([f for f in files if f is not None], memory, history, tools, notes)
