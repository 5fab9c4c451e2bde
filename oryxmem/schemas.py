"""The agent tools (save_memory, recall_memory) as JSON Schema, made from their entries
in the operations table: what an agent loop may call (POST /api/v1/tools/<name>); the
tools block of a prompt, and GET /api/v1/tools, also in the OpenAI and Anthropic
``tools`` shapes. tools.py says what a call means."""

from __future__ import annotations

from typing import Any

from oryxmem.operations import OPERATIONS, Operation


def tool_schema(operation: Operation) -> dict[str, Any]:
    """An agent tool's description and parameters (agent and session are the caller's,
    not the agent's, to give)."""
    params = [param for param in operation.params if param.in_tool]
    return {
        "description": operation.summary,
        "parameters": {
            "type": "object",
            "properties": {param.name: param.schema() for param in params},
            "required": [p.name for p in params if p.required or p.tool_requires],
            "additionalProperties": False,
        },
    }


SCHEMAS: dict[str, dict[str, Any]] = {
    operation.name: tool_schema(operation) for operation in OPERATIONS if operation.tool
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
