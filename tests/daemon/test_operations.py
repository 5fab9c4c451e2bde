"""The operations table (oryxmem/operations.py) against every surface: the routes the
daemon serves, GET /api/v1/openapi.json, the results a real daemon gives, the Python
Client, the CLI's options, the agent tools and the MCP tools."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import jsonschema
import pytest
from openapi_spec_validator import validate
from support.daemon import RunningDaemon, daemon

from oryxmem.agents.mcp import MemoryTools, build_server
from oryxmem.cli import cli
from oryxmem.client import Client
from oryxmem.daemon import api
from oryxmem.errors import InvalidFieldError
from oryxmem.operations import BY_NAME, OPERATIONS, Operation
from oryxmem.reach import Reach
from oryxmem.schemas import tool_schemas
from oryxmem.workspace import Workspace

# The Client method of each operation it offers (save_memory_tool and recall_memory_tool
# send an agent's body as it is, so they have no arguments of their own to check).
CLIENT_METHODS = {
    "health": "health",
    "openapi": "openapi",
    "agents": "agents",
    "memory": "memory",
    "entries": "entries",
    "entry": "entry",
    "forget": "forget",
    "edit": "edit",
    "sessions": "sessions",
    "save": "save",
    "recall": "recall",
    "search": "search",
    "context": "context",
    "prompt": "prompt",
    "episodes_search": "search_episodes",
    "trigger": "trigger",
    "reindex": "reindex",
    "history": "history",
    "tools": "tools",
    "create_session": "create_session",
    "append_message": "append_message",
    "session_messages": "session_messages",
}
# The MCP tools, the operation each carries out, and the arguments only MCP has (paging
# a long answer for the model).
MCP_TOOLS = {
    "save_memory": ("save_memory", set()),
    "recall_memory": ("recall_memory", {"offset"}),
    "search_memory": ("search", {"offset"}),
    "memory_block": ("context", {"offset"}),
}


@pytest.fixture
def running(workspace: Workspace, tmp_path: Path) -> Iterator[RunningDaemon]:
    with daemon(workspace, tmp_path / "daemon.log") as proc:
        yield proc


def served_routes() -> set[tuple[str, str]]:
    """(method, path) of every route the daemon's app serves."""
    worker = SimpleNamespace(service=SimpleNamespace(workspace=SimpleNamespace(root="/")))
    return api.Api(worker, None, dict).routes.routes()  # type: ignore[arg-type]


def test_every_operation_has_one_handler_and_every_handler_an_operation() -> None:
    assert set(api.HANDLERS) == set(BY_NAME)
    assert len(BY_NAME) == len(OPERATIONS)


def test_the_openapi_document_is_valid_and_holds_every_served_route() -> None:
    document = api.openapi_document()
    validate(document)  # OpenAPI 3.1, by openapi-spec-validator
    documented = {
        (method.upper(), path) for path, entry in document["paths"].items() for method in entry
    }
    assert documented == served_routes()
    operation_ids = [
        entry[method]["operationId"] for entry in document["paths"].values() for method in entry
    ]
    assert len(operation_ids) == len(set(operation_ids))


def test_the_validator_refuses_a_broken_document() -> None:
    """The check above can fail: a document missing what 3.1 requires is refused."""
    document = api.openapi_document()
    del document["info"]
    with pytest.raises(Exception, match="info"):
        validate(document)


def test_every_operation_answers_with_the_shape_the_table_says(running: RunningDaemon) -> None:
    with Client(running.socket, timeout=60) as client:
        session = client.call("create_session", agent="coder")["id"]
        arguments: dict[str, dict[str, Any]] = {
            "save": {"content": "The user drinks green tea.", "scope": "core"},
            "recall": {"keyword": "tea"},
            "search": {"query": "what does the user drink", "relevant": True, "limit": 3},
            "context": {"session": session, "turns": 2, "query": "tea"},
            "prompt": {"session": session, "query": "tea"},
            "episodes_search": {"query": "tea"},
            "trigger": {"user_message": "hi", "reply": "hello"},
            "reindex": {"agent": "coder"},
            "history": {"agent": "coder", "limit": 5},
            "save_memory": {"content": "Prefers dark mode."},
            "recall_memory": {"keyword": "dark"},
            "create_session": {"agent": "coder"},
            "append_message": {"session": session, "role": "user", "content": "tea?"},
            "session_messages": {"session": session, "turns": 5},
        }
        for agent in ("coder", None):  # an entry each, to edit and then forget
            client.save(agent, "The user drinks black coffee.", "core")

        def by_entry(operation: Operation, agent: str | None) -> dict[str, Any]:
            """The arguments; an edit and a forget name the agent's first core entry."""
            if operation.name not in ("entry", "edit", "forget"):
                return arguments.get(operation.name, {})
            entry = client.entries(agent, "core", order="oldest")["entries"][0]["id"]
            if operation.name == "entry":
                return {"id": entry}
            if operation.name == "edit":
                return {"id": entry, "content": "The user drinks green tea, no sugar."}
            return {"ids": [entry]}

        for operation in OPERATIONS:
            args = arguments.get(operation.name, {})
            if operation.per_agent:  # the agent's route, and the global file's
                data = client.call(operation.name, agent="coder", **by_entry(operation, "coder"))
                jsonschema.validate(
                    client.call(operation.name, **by_entry(operation, None)), operation.result
                )
            else:
                data = client.call(operation.name, **args)
            jsonschema.validate(data, operation.result)


def test_an_argument_is_checked_as_the_table_says(running: RunningDaemon) -> None:
    """Its limits (a k over 100), its type (a word for a number, a number for a string)."""
    with Client(running.socket, timeout=60) as client:
        for name, args, said in [
            ("search", {"query": "tea", "limit": 101}, "?k= must be at least 1 and at most 100"),
            ("history", {"limit": 0}, "?limit= must be at least 1"),
            ("save", {"content": 5}, "'content' must be a string, not int"),
            ("recall_memory", {"keyword": "x", "limit": "3"}, "'limit' must be a whole number"),
        ]:
            with pytest.raises(InvalidFieldError, match=said.replace("?", r"\?")):
                client.call(name, **args)
        status, reply = running.curl("http://x/api/v1/agents/coder/memory/search?q=tea&k=abc")
        assert (
            status == 400
            and reply["code"] == 1002
            and "?k= must be a whole number" in reply["message"]
        )
        status, reply = running.curl("http://x/api/v1/agents/coder/memory/search?q=x&relevant=no")
        assert status == 400 and reply["code"] == 1002


def test_the_openapi_route_serves_the_document(running: RunningDaemon) -> None:
    status, reply = running.curl("http://x/api/v1/openapi.json")
    assert status == 200 and reply["code"] == 0
    validate(reply["data"])
    assert "/api/v1/agents/{name}/memory/search" in reply["data"]["paths"]


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.name)
def test_the_client_method_takes_the_operations_arguments(operation: Operation) -> None:
    method_name = CLIENT_METHODS.get(operation.name)
    if method_name is None:
        assert operation.tool, f"no Client method for {operation.name}"
        return
    signature = inspect.signature(getattr(Client, method_name))
    taken = [name for name in signature.parameters if name != "self"]
    if operation.per_agent:
        assert taken[0] == "agent"
        taken = taken[1:]
    assert taken == [param.name for param in operation.params]
    for param in operation.params:
        default = signature.parameters[param.name].default
        if param.required:
            assert default is inspect.Parameter.empty, param.name
        elif param.default is not None and default is not inspect.Parameter.empty:
            assert default == param.default, param.name  # (or it asks for it: stricter)


def cli_command(path: str) -> click.Command:
    command: click.Command = cli
    for word in path.split():
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), word)
        assert found is not None, path
        command = found
    return command


@pytest.mark.parametrize("operation", [op for op in OPERATIONS if op.cli], ids=lambda op: op.name)
def test_the_cli_command_takes_the_operations_arguments(operation: Operation) -> None:
    assert operation.cli is not None
    options = {param.name: param for param in cli_command(operation.cli).params}
    if operation.per_agent:
        assert "agent" in options
    for param in operation.params:
        if not param.in_cli:
            continue
        assert param.name in options, f"oryxmem {operation.cli} lacks {param.name}"
        option = options[param.name]
        if param.type == "integer":
            assert isinstance(option.type, click.types.IntParamType), param.name
            if param.maximum is not None:
                assert getattr(option.type, "max", None) == param.maximum, param.name
        elif param.type == "boolean":
            assert isinstance(option, click.Option) and option.is_flag, param.name
        elif param.enum is not None:
            assert isinstance(option.type, click.Choice), param.name
            assert set(option.type.choices) == set(param.enum), param.name
        if param.default is not None and param.type != "boolean":
            assert option.default == param.default, param.name


def test_the_agent_tools_schemas_are_the_tables() -> None:
    tools = {tool["name"]: tool for tool in tool_schemas()["tools"]}
    assert set(tools) == {op.name for op in OPERATIONS if op.tool}
    for name, tool in tools.items():
        operation = BY_NAME[name]
        properties = tool["parameters"]["properties"]
        assert set(properties) == {p.name for p in operation.params if p.in_tool}
        for param in operation.params:
            if param.in_tool:
                assert properties[param.name]["type"] == param.type


def test_the_mcp_tools_take_the_arguments_of_their_operations(workspace: Workspace) -> None:
    server = build_server(MemoryTools(Reach(str(workspace.root)), None))
    listed = {tool.name: tool for tool in asyncio.run(server.list_tools())}
    assert set(listed) == set(MCP_TOOLS)
    for name, (operation_name, own) in MCP_TOOLS.items():
        operation = BY_NAME[operation_name]
        properties = listed[name].input_schema["properties"]
        params = {param.name: param for param in operation.params}
        assert set(properties) - own <= set(params), name
        for key in set(properties) - own:
            assert properties[key]["type"] == params[key].type, (name, key)
