"""A request's arguments, read and checked against the operations table: the JSON body,
the path and the query, each value by its entry (type, limits, choices)."""

from __future__ import annotations

import json
from typing import Any

from oryxmem.daemon.httpserver import Call
from oryxmem.errors import (
    EmptyKeywordError,
    InvalidContentError,
    InvalidFieldError,
    InvalidJsonError,
)
from oryxmem.operations import Operation, Param
from oryxmem.store.format import has_lone_surrogate


def json_body(raw: bytes) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except RecursionError:
        raise InvalidJsonError("the body is not valid JSON: nested too deeply") from None
    except ValueError as error:  # not UTF-8, not JSON, or a number of over 4,300 digits
        raise InvalidJsonError(f"the body is not valid JSON: {error}"[:300]) from None
    if not isinstance(value, dict):
        raise InvalidFieldError("the body must be a JSON object")
    if not raw.isascii() or b"\\u" in raw:  # else no string in it can hold a surrogate
        refuse_lone_surrogates(value)
    return value


def refuse_lone_surrogates(value: Any) -> None:
    """A string anywhere in the body holding half of a UTF-16 pair is not Unicode: it
    cannot be written to MEMORY.md nor recorded, so the request is refused up front."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if has_lone_surrogate(item):
                raise InvalidContentError("the body holds a lone surrogate (not Unicode)")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def arguments(call: Call, operation: Operation) -> dict[str, Any]:
    """The operation's arguments from the path, the query and the body, each checked
    against its entry in the table (type, limits, choices); absent ones are their
    default. The body is read only by an operation that takes one."""
    body = json_body(call.body) if operation.has_body else {}
    call.json = body  # as sent: an agent tool's call is recorded as it was made
    args: dict[str, Any] = {}
    for param in operation.params:
        if param.where == "body":
            args[param.name] = body_value(param, body)
        else:
            source = call.path_args if param.where == "path" else call.query
            args[param.name] = text_value(param, source.get(param.wire))
    return args


def body_value(param: Param, body: dict[str, Any]) -> Any:
    value = body.get(param.wire)
    if value is None:
        if param.required:
            raise InvalidFieldError(f"{param.wire!r} is required")
        return param.default
    if param.type == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidFieldError(f"{param.wire!r} must be a whole number")
        return _within(param, value, f"{param.wire!r}")
    if param.type == "boolean":
        if not isinstance(value, bool):
            raise InvalidFieldError(f"{param.wire!r} must be true or false")
        return value
    if param.type == "array":
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise InvalidFieldError(f"{param.wire!r} must be a list of strings")
        if param.required and not value:
            raise InvalidFieldError(f"{param.wire!r} must name at least one")
        return value
    if not isinstance(value, str):
        raise InvalidFieldError(f"{param.wire!r} must be a string, not {type(value).__name__}")
    return value


def text_value(param: Param, value: str | None) -> Any:
    """A path or query argument, from its text."""
    if param.blank is not None and not (value or "").strip():
        raise EmptyKeywordError(param.blank)
    if value is None or (value == "" and param.type != "string"):
        if param.required:
            raise InvalidFieldError(f"?{param.wire}= is required")
        return param.default
    if param.type == "integer":
        if not value.isascii() or not value.isdigit() or len(value) > 9:
            raise InvalidFieldError(f"?{param.wire}= must be a whole number")
        return _within(param, int(value), f"?{param.wire}=")
    if param.type == "boolean":
        if value not in ("1", "0", "true", "false"):
            raise InvalidFieldError(f"?{param.wire}= must be 1, 0, true or false")
        return value in ("1", "true")
    return value or param.default  # an empty ?session= is no session


def _within(param: Param, number: int, said: str) -> int:
    least = param.minimum if param.minimum is not None else number
    most = param.maximum if param.maximum is not None else number
    if not least <= number <= most:
        upper = f" and at most {param.maximum}" if param.maximum is not None else ""
        raise InvalidFieldError(f"{said} must be at least {param.minimum}{upper}")
    return number
