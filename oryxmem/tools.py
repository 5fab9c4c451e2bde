"""The seed's agent tools, save_memory and recall_memory: what a call's body means, how
its answer is found, and how it is recorded in tool_invocations.

The daemon's /api/v1/tools routes and a caller with no daemon (the MCP server, the
hooks) read a call the same way here; the daemon only spreads the steps over its
threads (a save through group commit, a ranked recall on a reader thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oryxmem.errors import InvalidContentError, InvalidFieldError, OryxError
from oryxmem.operations import MAX_RESULTS
from oryxmem.payloads import recall_data, save_data
from oryxmem.service import MemoryService, SaveRequest
from oryxmem.store.format import ARCHIVAL, has_lone_surrogate
from oryxmem.store.sessions import ToolRecord, tool_record

log = logging.getLogger("oryxmem.tools")


def text_field(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if value is None:
        raise InvalidFieldError(f"{name!r} is required")
    if not isinstance(value, str):
        raise InvalidFieldError(f"{name!r} must be a string, not {type(value).__name__}")
    return value


@dataclass(frozen=True)
class ToolCall:
    """One call as an agent made it: the agent and session named in the body (or the
    X-OryxOS-Agent / X-OryxOS-Session headers), and the input as recorded."""

    tool: str
    body: dict[str, Any]
    agent: str | None
    session: str | None
    started: float

    @classmethod
    def of(
        cls, tool: str, body: dict[str, Any], agent: str | None = None, session: str | None = None
    ) -> ToolCall:
        named = body.get("agent", agent)
        if named is not None and not isinstance(named, str):
            raise InvalidFieldError("'agent' must be a string")
        in_session = body.get("session", session)
        for value in (named, in_session):
            if isinstance(value, str) and has_lone_surrogate(value):
                raise InvalidContentError("the agent or session holds a lone surrogate")
        return cls(tool, body, named, in_session, time.perf_counter())

    @property
    def input(self) -> dict[str, Any]:
        return {k: v for k, v in self.body.items() if k not in ("agent", "session")}

    def recorded(self, output: Any, ok: bool) -> ToolRecord:
        """What tool_invocations keeps of this call, answered now with ``output``."""
        served = str(output.get("agent", self.agent or "")) if ok else self.agent or ""
        ms = (time.perf_counter() - self.started) * 1000
        return tool_record(self.tool, served, self.session, self.input, output, ok, ms)

    def record(self, service: MemoryService, output: Any, ok: bool) -> None:
        """Into tool_invocations at once. A record that cannot be written (the database
        locked past its timeout, a full disk) is logged: it never turns a call that was
        carried out, a save above all, into a reported failure."""
        try:
            service.record_tool(self.recorded(output, ok))
        except Exception as error:  # the call stands; its record is what is missing
            log.warning("the %s call was not recorded in tool_invocations: %s", self.tool, error)

    def failure(self, error: OryxError) -> dict[str, Any]:
        return {"code": error.code, "message": error.message}


def save_request(body: dict[str, Any], source: str) -> SaveRequest:
    """save_memory {content, scope}."""
    return SaveRequest(text_field(body, "content"), text_field(body, "scope", ARCHIVAL), source)


@dataclass(frozen=True)
class RecallArgs:
    """recall_memory {keyword}: recall as memory.recall says; {query}: the best entries
    for a question, by meaning and words. "limit" caps either (at most MAX_RESULTS)."""

    words: str
    by_meaning: bool
    limit: int | None

    @classmethod
    def of(cls, body: dict[str, Any]) -> RecallArgs:
        by_meaning = body.get("query") is not None
        words = text_field(body, "query" if by_meaning else "keyword")
        limit = body.get("limit")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RESULTS
        ):
            raise InvalidFieldError(f"'limit' must be a whole number from 1 to {MAX_RESULTS}")
        return cls(words, by_meaning, limit)

    def ranks(self, service: MemoryService) -> bool:
        """Is the answer ranked (so the daemon finds it on a reader thread)?"""
        return self.by_meaning or service.recall_ranks

    def answer(self, service: MemoryService, agent: str | None) -> dict[str, Any]:
        if self.by_meaning:
            return recall_data(service.recall_by_meaning(agent, self.words, self.limit))
        data = recall_data(service.recall(agent, self.words))
        data["lines"] = data["lines"][: self.limit]
        return data


def run_tool(service: MemoryService, call: ToolCall, source: str) -> dict[str, Any]:
    """A tool call with no daemon: the stores directly (the same locks), recorded."""
    steps: dict[str, Callable[[], dict[str, Any]]] = {
        "save_memory": lambda: save_data(
            service.save_one(service.resolve(call.agent), save_request(call.body, source))
        ),
        "recall_memory": lambda: RecallArgs.of(call.body).answer(service, call.agent),
    }
    try:
        output = steps[call.tool]()
    except OryxError as error:
        call.record(service, call.failure(error), False)
        raise
    call.record(service, output, True)
    return output
