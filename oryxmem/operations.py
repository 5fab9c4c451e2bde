"""Every operation of the memory API, declared once: its route, its arguments (types,
limits, where they travel), the shape of its result and the errors it may answer.

The daemon's routes and their argument checks (daemon/api.py), the Python ``Client``,
the agent tools' JSON Schemas (schemas.py) and ``GET /api/v1/openapi.json`` (openapi.py)
are made from this table; the CLI's options and the MCP tools are checked against it
(tests/daemon/test_operations.py). An argument is added here, and in the code that uses it.

This module is data: it imports nothing of oryxmem but the error table and what an
operation is (signatures.py).
"""

from __future__ import annotations

from oryxmem import errors as e
from oryxmem.signatures import (
    AGENT,
    ENTRY,
    FOUND,
    INT,
    MAX_RESULTS,
    MESSAGES,
    NUMBERED,
    OPTIONAL_TEXT,
    PREFIXES,
    RECALLED,
    SAVED,
    SESSION,
    TEXT,
    TEXTS,
    Operation,
    Param,
    object_schema,
)

__all__ = ["BY_NAME", "MAX_RESULTS", "OPERATIONS", "PREFIXES", "Operation", "Param"]

# --- the arguments shared by several operations -------------------------------------


def _query(name: str, doc: str, key: str | None = None, blank: str | None = None) -> Param:
    return Param(name, "string", "query", doc, required=blank is not None, key=key, blank=blank)


def _top_k(doc: str, default: int | None = None) -> Param:
    return Param(
        "limit", "integer", "query", doc, default=default, minimum=1, maximum=MAX_RESULTS, key="k"
    )


_SCOPE = Param(
    "scope",
    "string",
    "body",
    "archival (default): dated notes; core: lasting facts.",
    default="archival",
    enum=("archival", "core"),
)
_QUESTION = _query(
    "query",
    "A question or words to look for.",
    key="q",
    blank="give ?q= a question or words to look for",
)
_SESSION_ARG = _query("session", "The session whose messages are the history block.")
_TURNS = Param("turns", "integer", "query", "The last this many messages.", minimum=1)
_FOR_QUERY = _query("query", "The user's message: the entries most relevant to it are shown.")
_TOOL_AGENT = Param(
    "agent",
    "string",
    "body",
    "The agent (else the X-OryxOS-Agent header, else the global file).",
    in_tool=False,
)
_TOOL_SESSION = Param(
    "session", "string", "body", "The session the call is recorded under.", in_tool=False
)
_REQUEST_ERRORS = (e.InvalidFieldError, e.InvalidJsonError, e.UnsafeAgentNameError)
_SAVE_ERRORS = (
    *_REQUEST_ERRORS,
    e.InvalidScopeError,
    e.EmptyContentError,
    e.InvalidContentError,
    e.ContentTooLongError,
    e.StorageError,
    e.MemoryFileConflictedError,
    e.MemoryFileUnreadableError,
)

_EDIT_ERRORS = (
    *_REQUEST_ERRORS,
    e.EntryNotFoundError,
    e.FileBusyError,
    e.StorageError,
    e.MemoryFileConflictedError,
    e.MemoryFileUnreadableError,
)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "health",
        "GET",
        "/api/v1/health",
        "What the daemon is doing: its threads, the sync and the indexes' backlog.",
        result={"type": "object", "required": ["status", "version", "workspace", "pid"]},
        cli="status",
    ),
    Operation(
        "openapi",
        "GET",
        "/api/v1/openapi.json",
        "This API as an OpenAPI 3.1 document.",
        result={"type": "object", "required": ["openapi", "paths"]},
    ),
    Operation(
        "agents",
        "GET",
        "/api/v1/agents",
        "Every agent with a memory, and how many entries each section holds.",
        result={
            "type": "array",
            "items": object_schema(
                {
                    "agent": TEXT,
                    "core": INT,
                    "archival": INT,
                    "problem": OPTIONAL_TEXT,
                    "last_saved": OPTIONAL_TEXT,
                },
                "agent",
                "core",
                "archival",
                "problem",
            ),
        },
        cli="agents",
    ),
    Operation(
        "memory",
        "GET",
        "/memory",
        "An agent's memory: its core and archival entries, and the file as text.",
        result=object_schema(
            {
                **AGENT,
                "core": {"type": "array", "items": ENTRY},
                "archival": {"type": "array", "items": ENTRY},
                "markdown": TEXT,
            }
        ),
        errors=(e.UnsafeAgentNameError, e.MemoryFileConflictedError, e.MemoryFileUnreadableError),
        per_agent=True,
        cli="show",
    ),
    Operation(
        "save",
        "POST",
        "/memory",
        "Save an entry: answered once it is durable in MEMORY.md.",
        params=(
            Param("content", "string", "body", "The entry: one self-contained note.", True),
            _SCOPE,
        ),
        result=SAVED,
        errors=_SAVE_ERRORS,
        per_agent=True,
        cli="save",
    ),
    Operation(
        "entries",
        "GET",
        "/memory/entries",
        "A page of one section of an agent's memory (newest first by default) and the"
        " section's size: for a memory too large to take whole.",
        params=(
            Param(
                "scope",
                "string",
                "query",
                "archival (default) or core.",
                default="archival",
                enum=("archival", "core"),
            ),
            Param(
                "offset",
                "integer",
                "query",
                "Skip this many entries first.",
                default=0,
                minimum=0,
                maximum=100_000_000,
            ),
            Param(
                "limit",
                "integer",
                "query",
                "At most this many entries.",
                default=100,
                minimum=1,
                maximum=1000,
                key="k",
            ),
            Param(
                "order",
                "string",
                "query",
                "newest (default) or oldest first.",
                default="newest",
                enum=("newest", "oldest"),
            ),
        ),
        result=object_schema(
            {
                **AGENT,
                "scope": TEXT,
                "order": TEXT,
                "offset": INT,
                "total": INT,
                "version": TEXT,
                "entries": {"type": "array", "items": NUMBERED},
            }
        ),
        errors=(*_REQUEST_ERRORS, e.MemoryFileConflictedError, e.MemoryFileUnreadableError),
        per_agent=True,
    ),
    Operation(
        "entry",
        "GET",
        "/memory/entries/{id}",
        "One entry, by id, as the file has it now (its position and source too); 1022"
        " when it is not there any more.",
        params=(Param("id", "string", "path", "The entry's id, as it was read.", True),),
        result=object_schema({**AGENT, "entry": NUMBERED}),
        errors=(*_REQUEST_ERRORS, e.EntryNotFoundError, e.MemoryFileConflictedError),
        per_agent=True,
    ),
    Operation(
        "forget",
        "POST",
        "/memory/forget",
        "Take entries out of an agent's memory by id: out of MEMORY.md, the rows and every"
        " index, with a tombstone so that no git merge brings them back (history keeps that"
        " they went, and who asked). Refused, nothing changed, when any of them is not in"
        " the file any more.",
        params=(
            Param("ids", "array", "body", "The entries' ids (as GET /memory gives them).", True),
            Param(
                "purge",
                "boolean",
                "body",
                "Also take their text out of history (which keeps only that they went).",
            ),
        ),
        result=object_schema({**AGENT, "forgotten": {"type": "array", "items": ENTRY}}),
        errors=_EDIT_ERRORS,
        per_agent=True,
    ),
    Operation(
        "edit",
        "POST",
        "/memory/edit",
        "Write one entry anew: new content, in its place, with its time. Refused, nothing"
        " changed, when the entry is not as it was read (its id is gone).",
        params=(
            Param("id", "string", "body", "The entry's id, as it was read.", True),
            Param("content", "string", "body", "What it says now.", True),
        ),
        result=object_schema({**AGENT, "was": ENTRY, "entry": ENTRY}),
        errors=(*_EDIT_ERRORS, e.EmptyContentError, e.InvalidContentError, e.ContentTooLongError),
        per_agent=True,
    ),
    Operation(
        "recall",
        "GET",
        "/memory/recall",
        "The archival entries that hold a word (memory.recall = keyword, oldest first),"
        " or answer a question best (hybrid, best first).",
        params=(
            _query(
                "keyword",
                "A word, a phrase or a question.",
                blank="give ?keyword= a word to look for",
            ),
        ),
        result=RECALLED,
        errors=(*_REQUEST_ERRORS, e.EmptyKeywordError, e.InvalidContentError),
        per_agent=True,
        cli="recall",
    ),
    Operation(
        "search",
        "GET",
        "/memory/search",
        "An agent's entries ranked for a question, best first, with the score and the"
        " arms that found each.",
        params=(
            _QUESTION,
            _top_k("At most this many hits (default: recall.limit)."),
            Param(
                "mode",
                "string",
                "query",
                "hybrid (words and meaning), keyword or semantic.",
                default="hybrid",
                enum=("hybrid", "keyword", "semantic"),
            ),
            Param(
                "relevant",
                "boolean",
                "query",
                "Only hits the words found, or close enough in meaning (as recall's).",
                default=False,
            ),
        ),
        result=FOUND,
        errors=(
            *_REQUEST_ERRORS,
            e.EmptyKeywordError,
            e.InvalidContentError,
            e.SemanticSearchOffError,
            e.EmbedderUnavailableError,
        ),
        per_agent=True,
        cli="search",
    ),
    Operation(
        "context",
        "GET",
        "/context",
        "The memory block an agent is given: core, then archival (with a query, the"
        " entries most relevant to it beside the newest).",
        params=(_SESSION_ARG, _TURNS, _FOR_QUERY),
        result=object_schema({**AGENT, "context": TEXT, "history": MESSAGES}, *AGENT, "context"),
        errors=(*_REQUEST_ERRORS, e.SessionNotFoundError),
        per_agent=True,
        cli="context",
    ),
    Operation(
        "prompt",
        "GET",
        "/prompt",
        "The whole prompt: system, files, memory, history and tools, as one text and as parts.",
        params=(_SESSION_ARG, _TURNS, _FOR_QUERY),
        result=object_schema(
            {
                **AGENT,
                "text": TEXT,
                "system": TEXT,
                "files": {
                    "type": "array",
                    "items": object_schema({"name": TEXT, "text": TEXT}),
                },
                "memory": TEXT,
                "history": MESSAGES,
                "tools": {"type": "array", "items": {"type": "object"}},
                "notes": TEXTS,
            }
        ),
        errors=(*_REQUEST_ERRORS, e.SessionNotFoundError),
        per_agent=True,
        cli="prompt",
    ),
    Operation(
        "episodes_search",
        "GET",
        "/episodes/search",
        "The rounds of an agent's past sessions that best answer a question.",
        params=(
            _QUESTION,
            _top_k("At most this many rounds.", default=5),
            _query("exclude", "A session to leave out (the current one)."),
        ),
        result=object_schema(
            {
                **AGENT,
                "episodes": {
                    "type": "array",
                    "items": object_schema(
                        {
                            "session": TEXT,
                            "round": INT,
                            "at": OPTIONAL_TEXT,
                            "text": TEXT,
                            "score": {"type": "number"},
                            "arms": {"type": "array", "items": TEXT},
                        }
                    ),
                },
            }
        ),
        errors=(*_REQUEST_ERRORS, e.EmptyKeywordError, e.InvalidContentError),
        per_agent=True,
        cli="episodes search",
    ),
    Operation(
        "trigger",
        "POST",
        "/triggers",
        "A footprint of one exchange (the user's message and the reply) saved to archival.",
        params=(
            Param("user_message", "string", "body", "What the user said.", default=""),
            Param("reply", "string", "body", "What the agent answered.", default=""),
        ),
        result=SAVED,
        errors=_SAVE_ERRORS,
        per_agent=True,
    ),
    Operation(
        "reindex",
        "POST",
        "/api/v1/reindex",
        "Build the derived indexes again from the rows (of one agent, or all); the"
        " vectors are made in the background.",
        params=(Param("agent", "string", "body", "The agent (default: every agent)."),),
        result={"type": "object", "required": ["agent", "entries", "indexes"]},
        errors=_REQUEST_ERRORS,
        cli="reindex",
    ),
    Operation(
        "history",
        "GET",
        "/api/v1/history",
        "The audit log: every entry added and removed, when, and by which source.",
        params=(
            _query("agent", "Only this agent's (default: every agent's)."),
            Param(
                "limit",
                "integer",
                "query",
                "The newest this many events.",
                default=50,
                minimum=1,
                maximum=100_000,
            ),
        ),
        result={
            "type": "array",
            "items": object_schema(
                {
                    "at": TEXT,
                    "agent": TEXT,
                    "op": TEXT,
                    "source": TEXT,
                    "scope": OPTIONAL_TEXT,
                    "ts": OPTIONAL_TEXT,
                    "content": OPTIONAL_TEXT,
                    "detail": OPTIONAL_TEXT,
                }
            ),
        },
        errors=_REQUEST_ERRORS,
        cli="history",
    ),
    Operation(
        "tools",
        "GET",
        "/api/v1/tools",
        "The agent tools' schemas: plain JSON Schema, and the OpenAI and Anthropic shapes.",
        result=object_schema(
            {
                "tools": {"type": "array"},
                "openai": {"type": "array"},
                "anthropic": {"type": "array"},
            }
        ),
    ),
    Operation(
        "save_memory",
        "POST",
        "/api/v1/tools/save_memory",
        "Save something worth remembering beyond this conversation: a preference of the"
        " user, a decision, a fact about the project, what you did. Saved at once, durably,"
        " with the time. core: facts that always matter; archival: the rest.",
        params=(
            Param("content", "string", "body", "The memory: one self-contained sentence.", True),
            _SCOPE,
            _TOOL_AGENT,
            _TOOL_SESSION,
        ),
        result=SAVED,
        errors=_SAVE_ERRORS,
        tool=True,
    ),
    Operation(
        "recall_memory",
        "POST",
        "/api/v1/tools/recall_memory",
        "The memories that hold a word or phrase (case-insensitive), each with its time;"
        " with the workspace's default (memory.recall = hybrid) also those close to it in"
        " meaning, best first.",
        params=(
            Param(
                "keyword",
                "string",
                "body",
                "A word, a phrase or a question the memory may answer.",
                tool_requires=True,  # the route takes query instead (tools.RecallArgs)
            ),
            Param(
                "query",
                "string",
                "body",
                "Instead of keyword: a question, answered by meaning and words whatever"
                " memory.recall says.",
                in_tool=False,
            ),
            Param(
                "limit",
                "integer",
                "body",
                "At most this many memories.",
                minimum=1,
                maximum=MAX_RESULTS,
            ),
            _TOOL_AGENT,
            _TOOL_SESSION,
        ),
        result=RECALLED,
        errors=(*_REQUEST_ERRORS, e.EmptyKeywordError, e.InvalidContentError),
        tool=True,
    ),
    Operation(
        "create_session",
        "POST",
        "/api/v1/sessions",
        "Open a session: the messages of one conversation, kept for history and episodes.",
        params=(Param("agent", "string", "body", "The agent the session belongs to."),),
        result=SESSION,
        errors=_REQUEST_ERRORS,
    ),
    Operation(
        "sessions",
        "GET",
        "/api/v1/sessions",
        "The sessions, the most recently active first (of one agent, or all).",
        params=(
            _query("agent", "Only this agent's (default: every agent's)."),
            Param(
                "limit",
                "integer",
                "query",
                "At most this many.",
                default=50,
                minimum=1,
                maximum=1000,
            ),
        ),
        result={"type": "array", "items": SESSION},
        errors=_REQUEST_ERRORS,
    ),
    Operation(
        "append_message",
        "POST",
        "/api/v1/sessions/{session}/messages",
        "Add a message to a session.",
        params=(
            Param("session", "string", "path", "The session.", True),
            Param("role", "string", "body", "user, assistant, system or tool.", True),
            Param("content", "string", "body", "The message.", True),
        ),
        result=object_schema({"session": TEXT, "messages": INT}),
        errors=(*_REQUEST_ERRORS, e.SessionNotFoundError, e.InvalidRoleError),
    ),
    Operation(
        "session_messages",
        "GET",
        "/api/v1/sessions/{session}/history",
        "A session's messages, oldest first.",
        params=(Param("session", "string", "path", "The session.", True), _TURNS),
        result=object_schema({"session": TEXT, "messages": MESSAGES}),
        errors=(*_REQUEST_ERRORS, e.SessionNotFoundError),
    ),
)

BY_NAME: dict[str, Operation] = {operation.name: operation for operation in OPERATIONS}
