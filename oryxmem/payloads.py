"""The JSON shapes of results, shared by the CLI's --json and the socket API."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oryxmem.store.format import Entry
from oryxmem.workspace import AgentRef

if TYPE_CHECKING:  # the CLI's daemon path imports this module, and never the service
    from oryxmem.index.episodes import EpisodeHit
    from oryxmem.service import (
        AgentSummary,
        MemoryService,
        MemoryView,
        RecallResult,
        SaveResult,
        SearchResult,
    )
    from oryxmem.service.results import Page, Placed
    from oryxmem.store.sessions import SessionInfo
    from oryxmem.sync.edits import Edited


def agent_data(ref: AgentRef) -> dict[str, Any]:
    return {"agent": ref.agent, "requested": ref.requested, "fallback": ref.fallback_reason}


def entry_data(entry: Entry) -> dict[str, Any]:
    return {
        "id": entry.entry_id,
        "scope": entry.scope,
        "ts": entry.ts,
        "content": entry.content,
        "line": entry.render(),
    }


def save_data(result: SaveResult) -> dict[str, Any]:
    return {
        **agent_data(result.agent),
        "entry": entry_data(result.entry),
        "deferred": result.deferred,
    }


def recall_data(result: RecallResult) -> dict[str, Any]:
    return {
        **agent_data(result.agent),
        "keyword": result.keyword,
        "strategy": result.strategy,
        "lines": result.lines,
    }


def search_data(result: SearchResult) -> dict[str, Any]:
    return {
        **agent_data(result.agent),
        "query": result.query,
        "mode": result.mode,
        "unembedded": result.unembedded,
        "pending": {"words": result.words_pending, "meaning": result.unembedded},
        "note": result.note,
        "hits": [
            {**entry_data(hit.entry), "score": hit.score, "arms": list(hit.arms)}
            for hit in result.hits
        ],
    }


def memory_data(view: MemoryView) -> dict[str, Any]:
    return {
        **agent_data(view.agent),
        "core": [entry_data(entry) for entry in view.core],
        "archival": [entry_data(entry) for entry in view.archival],
        "markdown": view.markdown,
    }


def page_data(page: Page, order: str) -> dict[str, Any]:
    return {
        **agent_data(page.agent),
        "scope": page.scope,
        "order": order,
        "offset": page.offset,
        "total": page.total,
        "version": page.version,
        "entries": [placed_data(placed) for placed in page.entries],
    }


def placed_data(placed: Placed) -> dict[str, Any]:
    at, entry, source = placed
    return {**entry_data(entry), "position": at, "source": source}


def found_entry_data(ref: AgentRef, placed: Placed) -> dict[str, Any]:
    return {**agent_data(ref), "entry": placed_data(placed)}


def forgotten_data(edited: Edited, ref: AgentRef) -> dict[str, Any]:
    return {**agent_data(ref), "forgotten": [entry_data(entry) for entry in edited.removed]}


def edited_data(edited: Edited, ref: AgentRef) -> dict[str, Any]:
    (was,), (entry,) = edited.replaced, edited.written
    return {**agent_data(ref), "was": entry_data(was), "entry": entry_data(entry)}


def sessions_data(sessions: list[SessionInfo]) -> list[dict[str, Any]]:
    return [session.__dict__ for session in sessions]


def agents_data(summaries: list[AgentSummary]) -> list[dict[str, Any]]:
    return [
        {
            "agent": s.name,
            "core": s.core,
            "archival": s.archival,
            "problem": s.problem,
            "last_saved": s.last_saved,
        }
        for s in summaries
    ]


def context_data(
    service: MemoryService,
    agent: str | None,
    session: str | None = None,
    query: str | None = None,
) -> dict[str, Any]:
    ref = service.resolve(agent)
    return {**agent_data(ref), "context": service.build_context(ref.agent, session, query)}


def prompt_data(
    service: MemoryService,
    agent: str | None,
    session: str | None = None,
    turns: int | None = None,
    query: str | None = None,
) -> dict[str, Any]:
    ref = service.resolve(agent)
    return {**agent_data(ref), **service.build_prompt(ref.agent, session, turns, query).data()}


def episodes_data(ref: AgentRef, hits: list[EpisodeHit]) -> dict[str, Any]:
    return {
        **agent_data(ref),
        "episodes": [
            {
                "session": hit.session,
                "round": hit.round,
                "at": hit.at,
                "text": hit.text,
                "score": hit.score,
                "arms": list(hit.arms),
            }
            for hit in hits
        ],
    }
