"""The memory API over HTTP/1.1 (docs/design.md §8): the socket's application
(httpserver.py serves it) and a thin handler for each operation of the table.

Every reply, errors included, is the envelope ``{code, message, data,
timestamp}``; ``code`` comes from the one table in errors.py and the HTTP
status gives its class. Handlers parse and check the request, hand the work to
the memory thread, and wrap what comes back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any

from oryxmem.daemon.arguments import arguments
from oryxmem.daemon.httpserver import Call, Reply
from oryxmem.daemon.readers import Readers
from oryxmem.daemon.worker import MemoryWorker
from oryxmem.errors import (
    InternalError,
    MethodNotAllowedError,
    NotFoundError,
    OryxError,
    UnsafeAgentNameError,
    WrongWorkspaceError,
)
from oryxmem.openapi import openapi_document
from oryxmem.operations import BY_NAME, OPERATIONS, Operation
from oryxmem.payloads import (
    agents_data,
    context_data,
    edited_data,
    episodes_data,
    forgotten_data,
    found_entry_data,
    memory_data,
    page_data,
    prompt_data,
    recall_data,
    save_data,
    search_data,
    sessions_data,
)
from oryxmem.schemas import tool_schemas
from oryxmem.service import MemoryService, SaveRequest
from oryxmem.service.finding import RECALL_MIN_SIMILARITY
from oryxmem.store.rows import sync_summary
from oryxmem.tools import RecallArgs, ToolCall, save_request
from oryxmem.workspace import GLOBAL_AGENT, WORKSPACE_HEADER, AgentRef, agent_name_problem

log = logging.getLogger("oryxmem.daemon")

MAX_BODY_BYTES = 1024 * 1024
Args = dict[str, Any]
OperationHandler = Callable[["Api", Call, Args], Awaitable[Any]]
HANDLERS: dict[str, OperationHandler] = {}


def envelope(code: int, message: str, data: Any) -> dict[str, Any]:
    return {"code": code, "message": message, "data": data, "timestamp": int(time.time() * 1000)}


_JSON = json.JSONEncoder(ensure_ascii=False)  # one encoder: made per call, it costs more


def _reply(status: int, value: dict[str, Any]) -> Reply:
    return Reply(status, _JSON.encode(value).encode())


class Routes:
    """The operations by method and path: each path a list of segments, a ``{name}``
    segment matching any one segment (percent-decoded into the argument)."""

    def __init__(self, operations: Iterable[Operation]) -> None:
        self.paths: dict[str, dict[str, Operation]] = {}  # path -> method -> operation
        self.static: dict[str, dict[str, Operation]] = {}
        self.templated: dict[int, list[tuple[list[str], dict[str, Operation]]]] = {}
        for operation in operations:
            for path in operation.paths():
                self.paths.setdefault(path, {})[operation.method] = operation
        for path, methods in self.paths.items():
            if "{" not in path:
                self.static[path] = methods
            else:
                parts = path.split("/")
                self.templated.setdefault(len(parts), []).append((parts, methods))

    def routes(self) -> set[tuple[str, str]]:
        """(method, path) of every route."""
        return {(method, path) for path, methods in self.paths.items() for method in methods}

    def find(self, method: str, raw_path: str) -> tuple[Operation, dict[str, str]]:
        """The operation and its path arguments; NotFoundError or MethodNotAllowedError."""
        parts = raw_path.split("/")
        if "%" in raw_path:
            parts = [urllib.parse.unquote(part) for part in parts]
        path = "/".join(parts)
        methods = self.static.get(path)
        values: dict[str, str] | None = None
        if methods is None:
            for template, candidate in self.templated.get(len(parts), ()):
                values = _matched(template, parts)
                if values is not None:
                    methods = candidate
                    break
        if methods is None:
            raise NotFoundError(f"no route {method} {path}")
        # HEAD is GET's answer without its body (the server leaves the body out)
        operation = methods.get("GET" if method == "HEAD" else method)
        if operation is None:
            raise MethodNotAllowedError(f"{method} is not allowed on {path}")
        return operation, values or {}


def _matched(template: list[str], parts: list[str]) -> dict[str, str] | None:
    values: dict[str, str] = {}
    for want, part in zip(template, parts, strict=True):
        if want.startswith("{"):
            if not part:
                return None
            values[want[1:-1]] = part
        elif want != part:
            return None
    return values


class Api:
    """The memory API as the socket's application: a request is routed by the operations
    table, its arguments checked, its handler run; every reply, errors too, is the
    envelope."""

    def __init__(
        self,
        worker: MemoryWorker,
        readers: Readers,
        health: Callable[[], dict[str, Any]],
    ) -> None:
        self.worker = worker
        self.readers = readers
        self.health = health
        self.root = os.path.realpath(worker.service.workspace.root)  # the workspace served
        self.routes = Routes(OPERATIONS)

    async def answer(self, call: Call) -> Reply:
        try:
            self.check_workspace(call)
            operation, call.path_args = self.routes.find(call.method, call.path)
            data = await HANDLERS[operation.name](self, call, arguments(call, operation))
        except OryxError as error:
            return self.refusal(error)
        except Exception:
            log.exception("%s %s failed", call.method, call.path)
            return self.refusal(InternalError("an unexpected error; see the daemon log"))
        return _reply(200, envelope(0, "ok", data))

    def refusal(self, error: OryxError) -> Reply:
        return _reply(error.http_status, envelope(error.code, error.message, error.data or None))

    def check_workspace(self, call: Call) -> None:
        """A client that names the workspace it means (X-OryxOS-Workspace, percent-encoded)
        is refused by a daemon that serves another: its save must not land elsewhere."""
        meant = call.header(WORKSPACE_HEADER)
        if meant is None:
            return
        if os.path.realpath(urllib.parse.unquote(meant)) != self.root:
            raise WrongWorkspaceError(
                f"the daemon on this socket serves {self.root}, not {urllib.parse.unquote(meant)};"
                " check ORYXMEM_SOCKET or daemon.socket"
            )


def path_agent(request: Call) -> AgentRef:
    """The agent named in the URL; an unsafe name there is an error, not a fallback.

    Only the name is checked here; whether its folder is a symbolic link is asked on
    the memory thread (MemoryService.check_folder), by run_for or by the save's group.
    """
    name = request.path_args.get("name")
    if name is None:
        return AgentRef(None, GLOBAL_AGENT)
    problem = agent_name_problem(name)
    if problem:
        raise UnsafeAgentNameError(f"unsafe agent name {name!r}: {problem}")
    return AgentRef(name, name)


def query_agent(args: Args) -> str | None:
    """The agent a listing is narrowed to (?agent=); an unsafe name is an error."""
    agent: str | None = args["agent"]
    problem = agent_name_problem(agent) if agent else None
    if problem:
        raise UnsafeAgentNameError(f"unsafe agent name {agent!r}: {problem}")
    return agent


async def run(api: Api, work: Callable[[MemoryService], Any]) -> Any:
    return await asyncio.wrap_future(api.worker.call(work))


async def ranked(api: Api, ref: AgentRef | None, work: Callable[[MemoryService], Any]) -> Any:
    """A search (or a recall by meaning) on a reader thread (readers.py says why). The
    rows must hold every save acknowledged before this request and the keyword indexes
    every row, unless they have a backlog to take in (which the indexer does meanwhile;
    the search says how much); and the agent named in the URL must be found safe. When
    the rows hold them and the reader finds the indexes current, it answers at once;
    else the memory thread brings them up first (a save just answered, a reconcile)."""
    readers = api.readers
    if api.worker.saving.every_answered_save_in_rows:
        answer = await asyncio.wrap_future(readers.call(partial(_if_current, ref, work)))
        if answer is not _BEHIND:
            return answer
    if ref is None:
        await run(api, _follow_saves)
    else:
        await run_for(api, ref, _follow_saves)
    return await asyncio.wrap_future(readers.call(work))


_BEHIND = object()  # the keyword indexes have rows to take in


def _if_current(
    ref: AgentRef | None, work: Callable[[MemoryService], Any], service: MemoryService
) -> Any:
    """work(), on a reader, when the indexes that follow saves have every row."""
    if ref is not None:
        service.check_folder(ref)
    if not service.upkeep.words_caught_up():
        return _BEHIND
    return work(service)


def _follow_saves(service: MemoryService) -> int:
    return service.upkeep.follow_saves()


async def run_for(api: Api, ref: AgentRef, work: Callable[[MemoryService], Any]) -> Any:
    """run() for the agent named in the URL, once its folder is found safe."""

    def checked(service: MemoryService) -> Any:
        service.check_folder(ref)
        return work(service)

    return await run(api, checked)


def handles(name: str) -> Callable[[OperationHandler], OperationHandler]:
    """Register the handler of the operation ``name`` of the table."""

    def register(handler: OperationHandler) -> OperationHandler:
        assert name in BY_NAME, f"no operation {name!r} in the table"
        HANDLERS[name] = handler
        return handler

    return register


# --- handlers -------------------------------------------------------------------


@handles("health")
async def health(api: Api, request: Call, args: Args) -> Any:
    def summary(service: MemoryService) -> dict[str, Any]:
        # rows_waiting: the agents whose answered saves the mirror this call began with
        # could not put in the rows (the database was locked a moment)
        indexes, waiting = service.index_summary(), service.saving.unmirrored_agents
        return {"sync": sync_summary(service.db), "indexes": indexes, "rows_waiting": waiting}

    data = api.health()
    rates = data.pop("index_rates", {})
    try:  # health answers even while the memory thread is held up (say, by a lock)
        data.update(await asyncio.wait_for(asyncio.shield(run(api, summary)), 2.0))
    except TimeoutError:
        data["sync"] = data["indexes"] = "unknown: the memory thread is busy"
    else:  # each index's backlog, and the pace the indexer takes it in at (rows/s)
        for name, index in data["indexes"].items():
            index["rate"] = round(rates.get(name, 0.0), 1)
    return data


@handles("openapi")
async def openapi(api: Api, request: Call, args: Args) -> Any:
    return openapi_document()


@handles("agents")
async def list_agents(api: Api, request: Call, args: Args) -> Any:
    return await run(api, lambda s: agents_data(s.agents()))


@handles("memory")
async def get_memory(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    return await run_for(api, ref, lambda s: memory_data(s.get(ref.agent)))


# Who a change is recorded as coming from in history: "socket", or what the client says
# of itself in X-OryxOS-Source when that is one of these.
SOURCE_HEADER = "X-OryxOS-Source"
NAMED_SOURCES = frozenset({"console"})


def source_of(request: Call) -> str:
    said = request.header(SOURCE_HEADER)
    return said if said in NAMED_SOURCES else "socket"


@handles("entries")
async def entries(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    scope, offset, limit, order = args["scope"], args["offset"], args["limit"], args["order"]

    def page(service: MemoryService) -> dict[str, Any]:
        return page_data(service.page(ref.agent, scope, offset, limit, order == "newest"), order)

    return await run_for(api, ref, page)


@handles("entry")
async def entry(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    return await run_for(api, ref, lambda s: found_entry_data(*s.find(ref.agent, args["id"])))


@handles("forget")
async def forget(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    ids, source, purge = args["ids"], source_of(request), bool(args.get("purge"))

    def remove(service: MemoryService) -> dict[str, Any]:
        edited = service.forget(ref.agent, ids, purge=purge, source=source)
        return forgotten_data(edited, service.resolve(ref.agent))

    data = await run_for(api, ref, remove)
    api.worker.on_mirrored()  # the indexes let the entries go
    return data


@handles("edit")
async def edit(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    change, source = {args["id"]: args["content"]}, source_of(request)

    def rewrite(service: MemoryService) -> dict[str, Any]:
        edited = service.edit(ref.agent, (), change, source=source)
        return edited_data(edited, service.resolve(ref.agent))

    data = await run_for(api, ref, rewrite)
    api.worker.on_mirrored()  # the indexes take the new text in
    return data


@handles("save")
async def save(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    saving = SaveRequest(args["content"], args["scope"], source_of(request))
    return save_data(await api.worker.save_on_loop(ref, saving))


@handles("recall")
async def recall(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)

    def answer(service: MemoryService) -> dict[str, Any]:
        return recall_data(service.recall(ref.agent, args["keyword"]))

    ranks = api.worker.service.recall_ranks
    return await (ranked if ranks else run_for)(api, ref, answer)


@handles("search")
async def search(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    least = RECALL_MIN_SIMILARITY if args["relevant"] else None

    def answer(service: MemoryService) -> dict[str, Any]:
        found = service.search(
            ref.agent, args["query"], limit=args["limit"], mode=args["mode"], min_similarity=least
        )
        return search_data(found)

    return await ranked(api, ref, answer)


@handles("reindex")
async def reindex(api: Api, request: Call, args: Args) -> Any:
    data = await run(api, lambda s: s.start_reindex(args["agent"]))
    api.worker.on_mirrored()  # the indexer thread embeds what is to be done again
    return data


@handles("context")
async def context(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    session, query = args["session"], args["query"]

    def build(service: MemoryService) -> dict[str, Any]:
        data = context_data(service, ref.agent, session, query)
        if session:
            data["history"] = service.history(session, args["turns"])
        return data

    if query is None:
        return await run_for(api, ref, build)
    return await ranked(api, ref, build)  # a search: on a reader thread


@handles("prompt")
async def prompt(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)

    def build(service: MemoryService) -> dict[str, Any]:
        return prompt_data(service, ref.agent, args["session"], args["turns"], args["query"])

    if args["query"] is None:
        return await run_for(api, ref, build)
    return await ranked(api, ref, build)  # a search: on a reader thread


@handles("history")
async def history(api: Api, request: Call, args: Args) -> Any:
    agent = query_agent(args)
    return await run(api, lambda s: s.audit_log(agent, args["limit"]))


@handles("tools")
async def list_tools(api: Api, request: Call, args: Args) -> Any:
    return tool_schemas()


@handles("trigger")
async def trigger(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)
    worker = api.worker
    limit = worker.service.config.footprint_max_chars
    footprint = SaveRequest.footprint(args["user_message"], args["reply"], limit, "socket")
    return save_data(await worker.save_on_loop(ref, footprint))


@handles("save_memory")
async def tool_save_memory(api: Api, request: Call, args: Args) -> Any:
    call = tool_call(request, "save_memory", request.json)

    async def save(service: MemoryService) -> Any:
        # On a reader: on the memory thread it would wait for a mirror of earlier saves.
        ref = await asyncio.wrap_future(api.readers.call(lambda s: s.resolve(call.agent)))
        saving = save_request(call.body, "socket")
        return save_data(await api.worker.save_on_loop(ref, saving))

    return await _tool(api, call, save)


@handles("recall_memory")
async def tool_recall_memory(api: Api, request: Call, args: Args) -> Any:
    call = tool_call(request, "recall_memory", request.json)

    async def recall(service: MemoryService) -> Any:
        recall_args = RecallArgs.of(call.body)
        if recall_args.ranks(service):
            return await ranked(api, None, lambda s: recall_args.answer(s, call.agent))
        return await run(api, lambda s: recall_args.answer(s, call.agent))

    return await _tool(api, call, recall)


def tool_call(request: Call, tool: str, body: dict[str, Any]) -> ToolCall:
    """A tool call names its agent in the body or the X-OryxOS-Agent header."""
    agent, session = request.header("X-OryxOS-Agent"), request.header("X-OryxOS-Session")
    return ToolCall.of(tool, body, agent, session)


async def _tool(api: Api, call: ToolCall, do: Callable[[MemoryService], Awaitable[Any]]) -> Any:
    """Run a tool exactly as an agent calls it; its record goes to tool_invocations with
    the memory thread's next mirror, never between the call and its answer."""
    worker = api.worker
    try:
        output = await do(worker.service)
    except OryxError as error:
        worker.record_tool(call.recorded(call.failure(error), False))
        raise
    worker.record_tool(call.recorded(output, True))
    return output


@handles("create_session")
async def create_session(api: Api, request: Call, args: Args) -> Any:
    info = await run(api, lambda s: s.create_session(args["agent"]))
    return info.__dict__


@handles("sessions")
async def sessions(api: Api, request: Call, args: Args) -> Any:
    agent = query_agent(args)
    return await run(api, lambda s: sessions_data(s.recent_sessions(agent, args["limit"])))


@handles("append_message")
async def append_message(api: Api, request: Call, args: Args) -> Any:
    session, role, content = args["session"], args["role"], args["content"]
    count = await run(api, lambda s: s.append_message(session, role, content))
    api.worker.on_mirrored()  # the indexer takes the round in (episodes)
    return {"session": session, "messages": count}


@handles("episodes_search")
async def search_episodes(api: Api, request: Call, args: Args) -> Any:
    ref = path_agent(request)

    def answer(service: MemoryService) -> dict[str, Any]:
        hits = service.search_episodes(ref.agent, args["query"], args["limit"], args["exclude"])
        return episodes_data(ref, hits)

    return await ranked(api, ref, answer)


@handles("session_messages")
async def session_history(api: Api, request: Call, args: Args) -> Any:
    session = args["session"]
    messages = await run(api, lambda s: s.history(session, args["turns"]))
    return {"session": session, "messages": messages}
