"""The agent tools (save_memory, recall_memory) as JSON Schema: what an agent loop may
call (POST /api/v1/tools/<name>); the tools block of a prompt, and GET /api/v1/tools,
also in the OpenAI and Anthropic ``tools`` shapes. tools.py says what a call means."""

from __future__ import annotations

from typing import Any

MAX_RESULTS = 100  # the most entries one search or recall call returns

SCHEMAS: dict[str, dict[str, Any]] = {
    "save_memory": {
        "description": (
            "Save something worth remembering beyond this conversation: a preference of"
            " the user, a decision, a fact about the project, what you did. Saved at once,"
            " durably, with the time. core: facts that always matter; archival: the rest."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "content": {
                    "type": "string",
                    "description": "The memory: one self-contained sentence.",
                },
                "scope": {
                    "type": "string",
                    "enum": ["archival", "core"],
                    "default": "archival",
                    "description": "archival (default): dated notes; core: lasting facts.",
                },
            },
            "required": ["content"],
            "additionalProperties": False,
        },
    },
    "recall_memory": {
        "description": (
            "The memories that hold a word or phrase (case-insensitive), each with its time;"
            " with the workspace's default (memory.recall = hybrid) also those close to it"
            " in meaning, best first."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "keyword": {
                    "type": "string",
                    "description": "A word, a phrase or a question the memory may answer.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_RESULTS,
                    "description": "At most this many memories.",
                },
            },
            "required": ["keyword"],
            "additionalProperties": False,
        },
    },
}


def tool_schemas() -> dict[str, list[dict[str, Any]]]:
    """The tools as plain JSON Schema, and in the OpenAI and Anthropic ``tools`` shapes."""
    plain = [{"name": name, **schema} for name, schema in SCHEMAS.items()]
    return {
        "tools": plain,
        "openai": [{"type": "function", "function": dict(tool)} for tool in plain],
        "anthropic": [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in plain
        ],
    }
