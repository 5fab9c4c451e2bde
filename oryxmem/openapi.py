"""The memory API as an OpenAPI 3.1 document, made from the operations table: what
``GET /api/v1/openapi.json`` serves. Every reply is the envelope ``{code, message, data,
timestamp}``; an operation's result schema is the schema of its ``data``."""

from __future__ import annotations

from typing import Any

from oryxmem import __version__
from oryxmem.errors import ERROR_KINDS
from oryxmem.operations import OPERATIONS, PREFIXES, Operation, Param


def openapi_document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for operation in OPERATIONS:
        for path in operation.paths():
            entry = _operation(operation, per_agent_path=path.startswith(PREFIXES[0]))
            paths.setdefault(path, {})[operation.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "oryxmem",
            "version": __version__,
            "description": (
                "The memory API of an oryxmem daemon, over HTTP/1.1 on its Unix socket."
                " Every reply is the envelope {code, message, data, timestamp}: code 0 and"
                " the result in data, or an error's code and message (the HTTP status"
                " gives its class)."
            ),
        },
        "servers": [{"url": "http://localhost", "description": "the daemon's Unix socket"}],
        "paths": paths,
        "components": {"schemas": {"Envelope": _envelope({})}},
    }


def _operation(operation: Operation, per_agent_path: bool) -> dict[str, Any]:
    suffix = "" if not per_agent_path or not operation.per_agent else "_of_agent"
    parameters = [_parameter(param) for param in operation.params if param.where != "body"]
    if per_agent_path:
        parameters.insert(
            0,
            {
                "name": "name",
                "in": "path",
                "required": True,
                "description": "The agent (without it: the global memory file).",
                "schema": {"type": "string"},
            },
        )
    entry: dict[str, Any] = {
        "operationId": operation.name + suffix,
        "summary": operation.summary,
        "parameters": parameters,
        "responses": {
            "200": {
                "description": "done: code 0, the result in data",
                "content": {"application/json": {"schema": _envelope(operation.result)}},
            },
            "default": {
                "description": _errors(operation),
                "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}
                },
            },
        },
    }
    body = operation.of("body")
    if body:
        entry["requestBody"] = {
            "required": any(param.required for param in body),
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "properties": {param.wire: param.schema() for param in body},
                        "required": [param.wire for param in body if param.required],
                    }
                }
            },
        }
    return entry


def _parameter(param: Param) -> dict[str, Any]:
    return {
        "name": param.wire,
        "in": param.where,
        "required": param.required or param.where == "path",
        "description": param.doc,
        "schema": {k: v for k, v in param.schema().items() if k != "description"},
    }


def _envelope(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "code": {"type": "integer"},
            "message": {"type": "string"},
            "data": data,
            "timestamp": {"type": "integer", "description": "milliseconds since the epoch"},
        },
        "required": ["code", "message", "data", "timestamp"],
    }


def _errors(operation: Operation) -> str:
    """The error codes the operation may answer, one per line."""
    codes = {error.code for error in operation.errors}
    kinds = [kind for kind in ERROR_KINDS if kind.code in codes]
    lines = [f"{kind.code} {kind.name} (HTTP {kind.http_status}): {kind.summary}" for kind in kinds]
    return "an error: code and message in the envelope, data null or details.\n\n" + "\n".join(
        lines
    )
