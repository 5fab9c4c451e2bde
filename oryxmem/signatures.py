"""What an operation of the memory API is (its arguments, where they travel, the shape
of its result), and the result shapes several operations share. The table itself is
operations.py.

This module is data: it imports nothing of oryxmem but the error table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from oryxmem import errors as e

MAX_RESULTS = 100  # the most entries one search or recall call returns
PREFIXES = ("/api/v1/agents/{name}", "/api/v1")  # an agent's routes, and the global file's


class Param(NamedTuple):
    """One argument of an operation (a NamedTuple: of the record types, the cheapest to
    define, and every command that talks to the daemon imports this table)."""

    name: str  # as the Client, the CLI and the service call it
    type: str  # JSON Schema: "string", "integer", "boolean" or "array" (of strings)
    where: str  # "path", "query" or "body"
    doc: str
    required: bool = False
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None
    enum: tuple[str, ...] | None = None
    key: str | None = None  # its name on the wire, when that differs (?q= for query)
    blank: str | None = None  # the EmptyKeywordError message when it is missing or blank
    in_tool: bool = True  # part of an agent tool's schema (agent and session are not)
    tool_requires: bool = False  # required by the tool's schema though not by its route
    in_cli: bool = True  # a CLI option or argument of the same name

    @property
    def wire(self) -> str:
        return self.key or self.name

    def schema(self) -> dict[str, Any]:
        """Its JSON Schema."""
        schema: dict[str, Any] = {"type": self.type, "description": self.doc}
        if self.type == "array":
            schema["items"] = {"type": "string"}
        if self.enum is not None:
            schema["enum"] = list(self.enum)
        if self.default is not None:
            schema["default"] = self.default
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        return schema


@dataclass
class Operation:
    """One operation: what it does, where it is served, what it takes and gives."""

    name: str
    method: str
    path: str  # under each of PREFIXES when per_agent, else the whole path
    summary: str
    params: tuple[Param, ...] = ()
    result: dict[str, Any] = field(default_factory=dict)  # the JSON Schema of ``data``
    errors: tuple[type[e.OryxError], ...] = ()
    per_agent: bool = False
    tool: bool = False  # an agent tool (POST /api/v1/tools/<name>)
    cli: str | None = None  # the CLI command that carries it ("episodes search")

    def paths(self) -> list[str]:
        return [prefix + self.path for prefix in PREFIXES] if self.per_agent else [self.path]

    def of(self, where: str) -> tuple[Param, ...]:
        return self.placed.get(where, ())

    @cached_property
    def placed(self) -> dict[str, tuple[Param, ...]]:
        """The params by where they travel, sorted once: the Client asks on every call."""
        return {
            where: tuple(param for param in self.params if param.where == where)
            for where in {param.where for param in self.params}
        }

    @cached_property
    def names(self) -> frozenset[str]:
        return frozenset(param.name for param in self.params)

    @property
    def has_body(self) -> bool:
        return bool(self.of("body"))

    def param(self, name: str) -> Param:
        return next(param for param in self.params if param.name == name)


# --- the result shapes ------------------------------------------------------------


def object_schema(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required or properties)}


TEXT = {"type": "string"}
INT = {"type": "integer"}
OPTIONAL_TEXT = {"type": ["string", "null"]}
TEXTS = {"type": "array", "items": TEXT}
AGENT = {"agent": TEXT, "requested": OPTIONAL_TEXT, "fallback": OPTIONAL_TEXT}
ENTRY = object_schema(
    {
        "id": TEXT,
        "scope": {"type": "string", "enum": ["core", "archival"]},
        "ts": OPTIONAL_TEXT,
        "content": TEXT,
        "line": TEXT,
    }
)
# position 1: the section's first; source: who saved it (its row's source)
NUMBERED = object_schema({**ENTRY["properties"], "position": INT, "source": OPTIONAL_TEXT})
SAVED = object_schema({**AGENT, "entry": ENTRY, "deferred": OPTIONAL_TEXT})
RECALLED = object_schema({**AGENT, "keyword": TEXT, "strategy": {"type": "string"}, "lines": TEXTS})
ARMS = {"type": "array", "items": {"enum": ["exact", "keyword", "context", "semantic"]}}
FOUND = object_schema(
    {
        **AGENT,
        "query": TEXT,
        "mode": TEXT,
        "unembedded": INT,
        "pending": object_schema({"words": INT, "meaning": INT}),
        "note": OPTIONAL_TEXT,
        "hits": {
            "type": "array",
            "items": object_schema(
                {**ENTRY["properties"], "score": {"type": "number"}, "arms": ARMS}
            ),
        },
    }
)
MESSAGES = {
    "type": "array",
    "items": {"type": "object", "properties": {"role": TEXT, "content": TEXT}},
}
SESSION = object_schema(
    {"id": TEXT, "agent": TEXT, "created_at": TEXT, "updated_at": TEXT, "message_count": INT}
)
