"""The memory API over HTTP/1.1 (docs/design.md §8): thin aiohttp handlers.

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
import re
import time
import urllib.parse
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from http import HTTPStatus
from typing import Any

from aiohttp import web, web_protocol, web_server
from aiohttp.web_request import BaseRequest

from oryxmem.daemon.arguments import BODY, CLIENT_TIMEOUT, arguments
from oryxmem.daemon.readers import Readers
from oryxmem.daemon.sockets import peer_uid
from oryxmem.daemon.worker import MemoryWorker
from oryxmem.errors import (
    BodyTooLargeError,
    ForbiddenError,
    InternalError,
    InvalidFieldError,
    MalformedRequestError,
    MethodNotAllowedError,
    NotFoundError,
    OryxError,
    RequestTimeoutError,
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
Handler = Callable[[web.Request], Awaitable[Any]]
WORKER: web.AppKey[MemoryWorker] = web.AppKey("worker", MemoryWorker)
READERS: web.AppKey[Readers] = web.AppKey("readers", Readers)
HEALTH: web.AppKey[Callable[[], dict[str, Any]]] = web.AppKey("health")
ROOT = web.AppKey("root", str)  # the workspace served, as realpath


def envelope(code: int, message: str, data: Any) -> dict[str, Any]:
    return {"code": code, "message": message, "data": data, "timestamp": int(time.time() * 1000)}


def error_response(error: OryxError) -> web.Response:
    body = envelope(error.code, error.message, error.data or None)
    return web.json_response(body, status=error.http_status, dumps=_dumps)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


_HTTP_ERRORS: dict[int, Callable[[str], OryxError]] = {
    404: NotFoundError,
    405: MethodNotAllowedError,
    413: BodyTooLargeError,
}


# Connections whose peer was checked to be this user: once per connection, not per request.
_TRUSTED: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()


def check_peer(request: web.Request) -> None:
    transport = request.transport
    if transport is None or transport in _TRUSTED:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None and peer_uid(sock) != os.getuid():
        raise ForbiddenError("this socket serves only the user who runs the daemon")
    _TRUSTED.add(transport)


@web.middleware
async def wrap_in_envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse other users, and give every reply (errors too) the envelope."""
    try:
        check_peer(request)
        check_workspace(request)
        data = await handler(request)
    except OryxError as error:
        response = error_response(error)
        if isinstance(error, RequestTimeoutError):
            response.force_close()  # the rest of that body must not be read as a request
        return response
    except web.HTTPException as http_error:
        make = _HTTP_ERRORS.get(http_error.status)
        if make is None:
            make = InvalidFieldError if http_error.status < 500 else InternalError
        if http_error.status == 405:
            detail = f"{request.method} is not allowed on {request.path}"
        elif http_error.status == 404:
            detail = f"no route {request.method} {request.path}"
        elif http_error.status == 413:
            detail = f"the request body is larger than {MAX_BODY_BYTES} bytes"
        else:
            detail = http_error.reason
        return error_response(make(detail))
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return error_response(InternalError("an unexpected error; see the daemon log"))
    return web.json_response(envelope(0, "ok", data), dumps=_dumps)


def check_workspace(request: web.Request) -> None:
    """A client that names the workspace it means (X-OryxOS-Workspace, percent-encoded)
    is refused by a daemon that serves another: its save must not land elsewhere."""
    meant = request.headers.get(WORKSPACE_HEADER)
    if meant is None:
        return
    served = request.app[ROOT]
    if os.path.realpath(urllib.parse.unquote(meant)) != served:
        raise WrongWorkspaceError(
            f"the daemon on this socket serves {served}, not {urllib.parse.unquote(meant)};"
            " check ORYXMEM_SOCKET or daemon.socket"
        )


class EnvelopeRequestHandler(web_protocol.RequestHandler):
    """aiohttp's connection handler, but a request its HTTP parser refuses (two
    Content-Lengths, a 64 KiB header, garbage bytes) gets the envelope like every other
    reply, and the log one line: no traceback, and none of the request's bytes (they
    may be someone's memory)."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        reason = str(getattr(exc, "message", "") or message or HTTPStatus(status).phrase)
        # Only aiohttp's words: what it quotes of the request (b'...') stays out.
        reason = re.split(r"""\s*b['"]""", reason.strip() or "bad request")[0]
        reason = reason.splitlines()[0].rstrip(": ")[:120] if reason.strip() else "bad request"
        log.warning("refused a malformed request (%s): %s", status, reason)
        error = MalformedRequestError(f"malformed HTTP request: {reason}")
        response = web.json_response(
            envelope(error.code, error.message, None), status=status, dumps=_dumps
        )
        response.force_close()
        return response


def use_envelope_handler(server: web_server.Server) -> None:
    """Have this aiohttp server make its connections with EnvelopeRequestHandler."""
    server.__class__ = _EnvelopeServer


class _EnvelopeServer(web_server.Server):
    def __call__(self) -> web_protocol.RequestHandler:
        return EnvelopeRequestHandler(self, loop=self._loop, **self._kwargs)


def path_agent(request: web.Request) -> AgentRef:
    """The agent named in the URL; an unsafe name there is an error, not a fallback.

    Only the name is checked here; whether its folder is a symbolic link is asked on
    the memory thread (MemoryService.check_folder), by run_for or by the save's group.
    """
    name = request.match_info.get("name")
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


async def run(request: web.Request, work: Callable[[MemoryService], Any]) -> Any:
    return await asyncio.wrap_future(request.app[WORKER].call(work))


async def ranked(
    request: web.Request, ref: AgentRef | None, work: Callable[[MemoryService], Any]
) -> Any:
    """A search (or a recall by meaning) on a reader thread (readers.py says why). The
    rows must hold every save acknowledged before this request and the keyword indexes
    every row, unless they have a backlog to take in (which the indexer does meanwhile;
    the search says how much); and the agent named in the URL must be found safe. When
    the rows hold them and the reader finds the indexes current, it answers at once;
    else the memory thread brings them up first (a save just answered, a reconcile)."""
    readers = request.app[READERS]
    if request.app[WORKER].saving.every_answered_save_in_rows:
        answer = await asyncio.wrap_future(readers.call(partial(_if_current, ref, work)))
        if answer is not _BEHIND:
            return answer
    if ref is None:
        await run(request, _follow_saves)
    else:
        await run_for(request, ref, _follow_saves)
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


async def run_for(request: web.Request, ref: AgentRef, work: Callable[[MemoryService], Any]) -> Any:
    """run() for the agent named in the URL, once its folder is found safe."""

    def checked(service: MemoryService) -> Any:
        service.check_folder(ref)
        return work(service)

    return await run(request, checked)


Args = dict[str, Any]
OperationHandler = Callable[[web.Request, Args], Awaitable[Any]]
HANDLERS: dict[str, OperationHandler] = {}


def handles(name: str) -> Callable[[OperationHandler], OperationHandler]:
    """Register the handler of the operation ``name`` of the table."""

    def register(handler: OperationHandler) -> OperationHandler:
        assert name in BY_NAME, f"no operation {name!r} in the table"
        HANDLERS[name] = handler
        return handler

    return register


# --- handlers -------------------------------------------------------------------


@handles("health")
async def health(request: web.Request, args: Args) -> Any:
    def summary(service: MemoryService) -> dict[str, Any]:
        # rows_waiting: the agents whose answered saves the mirror this call began with
        # could not put in the rows (the database was locked a moment)
        indexes, waiting = service.index_summary(), service.saving.unmirrored_agents
        return {"sync": sync_summary(service.db), "indexes": indexes, "rows_waiting": waiting}

    data = request.app[HEALTH]()
    rates = data.pop("index_rates", {})
    try:  # health answers even while the memory thread is held up (say, by a lock)
        data.update(await asyncio.wait_for(asyncio.shield(run(request, summary)), 2.0))
    except TimeoutError:
        data["sync"] = data["indexes"] = "unknown: the memory thread is busy"
    else:  # each index's backlog, and the pace the indexer takes it in at (rows/s)
        for name, index in data["indexes"].items():
            index["rate"] = round(rates.get(name, 0.0), 1)
    return data


@handles("openapi")
async def openapi(request: web.Request, args: Args) -> Any:
    return openapi_document()


@handles("agents")
async def list_agents(request: web.Request, args: Args) -> Any:
    return await run(request, lambda s: agents_data(s.agents()))


@handles("memory")
async def get_memory(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    return await run_for(request, ref, lambda s: memory_data(s.get(ref.agent)))


# Who a change is recorded as coming from in history: "socket", or what the client says
# of itself in X-OryxOS-Source when that is one of these.
SOURCE_HEADER = "X-OryxOS-Source"
NAMED_SOURCES = frozenset({"console"})


def source_of(request: web.Request) -> str:
    said = request.headers.get(SOURCE_HEADER)
    return said if said in NAMED_SOURCES else "socket"


@handles("entries")
async def entries(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    scope, offset, limit, order = args["scope"], args["offset"], args["limit"], args["order"]

    def page(service: MemoryService) -> dict[str, Any]:
        return page_data(service.page(ref.agent, scope, offset, limit, order == "newest"), order)

    return await run_for(request, ref, page)


@handles("entry")
async def entry(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    return await run_for(request, ref, lambda s: found_entry_data(*s.find(ref.agent, args["id"])))


@handles("forget")
async def forget(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    ids, source, purge = args["ids"], source_of(request), bool(args.get("purge"))

    def remove(service: MemoryService) -> dict[str, Any]:
        edited = service.forget(ref.agent, ids, purge=purge, source=source)
        return forgotten_data(edited, service.resolve(ref.agent))

    data = await run_for(request, ref, remove)
    request.app[WORKER].on_mirrored()  # the indexes let the entries go
    return data


@handles("edit")
async def edit(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    change, source = {args["id"]: args["content"]}, source_of(request)

    def rewrite(service: MemoryService) -> dict[str, Any]:
        edited = service.edit(ref.agent, (), change, source=source)
        return edited_data(edited, service.resolve(ref.agent))

    data = await run_for(request, ref, rewrite)
    request.app[WORKER].on_mirrored()  # the indexes take the new text in
    return data


@handles("save")
async def save(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    saving = SaveRequest(args["content"], args["scope"], source_of(request))
    return save_data(await request.app[WORKER].save_on_loop(ref, saving))


@handles("recall")
async def recall(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)

    def answer(service: MemoryService) -> dict[str, Any]:
        return recall_data(service.recall(ref.agent, args["keyword"]))

    ranks = request.app[WORKER].service.recall_ranks
    return await (ranked if ranks else run_for)(request, ref, answer)


@handles("search")
async def search(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    least = RECALL_MIN_SIMILARITY if args["relevant"] else None

    def answer(service: MemoryService) -> dict[str, Any]:
        found = service.search(
            ref.agent, args["query"], limit=args["limit"], mode=args["mode"], min_similarity=least
        )
        return search_data(found)

    return await ranked(request, ref, answer)


@handles("reindex")
async def reindex(request: web.Request, args: Args) -> Any:
    data = await run(request, lambda s: s.start_reindex(args["agent"]))
    request.app[WORKER].on_mirrored()  # the indexer thread embeds what is to be done again
    return data


@handles("context")
async def context(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    session, query = args["session"], args["query"]

    def build(service: MemoryService) -> dict[str, Any]:
        data = context_data(service, ref.agent, session, query)
        if session:
            data["history"] = service.history(session, args["turns"])
        return data

    if query is None:
        return await run_for(request, ref, build)
    return await ranked(request, ref, build)  # a search: on a reader thread


@handles("prompt")
async def prompt(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)

    def build(service: MemoryService) -> dict[str, Any]:
        return prompt_data(service, ref.agent, args["session"], args["turns"], args["query"])

    if args["query"] is None:
        return await run_for(request, ref, build)
    return await ranked(request, ref, build)  # a search: on a reader thread


@handles("history")
async def history(request: web.Request, args: Args) -> Any:
    agent = query_agent(args)
    return await run(request, lambda s: s.audit_log(agent, args["limit"]))


@handles("tools")
async def list_tools(request: web.Request, args: Args) -> Any:
    return tool_schemas()


@handles("trigger")
async def trigger(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)
    worker = request.app[WORKER]
    limit = worker.service.config.footprint_max_chars
    footprint = SaveRequest.footprint(args["user_message"], args["reply"], limit, "socket")
    return save_data(await worker.save_on_loop(ref, footprint))


@handles("save_memory")
async def tool_save_memory(request: web.Request, args: Args) -> Any:
    call = tool_call(request, "save_memory", request[BODY])

    async def save(service: MemoryService) -> Any:
        # On a reader: on the memory thread it would wait for a mirror of earlier saves.
        ref = await asyncio.wrap_future(request.app[READERS].call(lambda s: s.resolve(call.agent)))
        saving = save_request(call.body, "socket")
        return save_data(await request.app[WORKER].save_on_loop(ref, saving))

    return await _tool(request, call, save)


@handles("recall_memory")
async def tool_recall_memory(request: web.Request, args: Args) -> Any:
    call = tool_call(request, "recall_memory", request[BODY])

    async def recall(service: MemoryService) -> Any:
        recall_args = RecallArgs.of(call.body)
        if recall_args.ranks(service):
            return await ranked(request, None, lambda s: recall_args.answer(s, call.agent))
        return await run(request, lambda s: recall_args.answer(s, call.agent))

    return await _tool(request, call, recall)


def tool_call(request: web.Request, tool: str, body: dict[str, Any]) -> ToolCall:
    """A tool call names its agent in the body or the X-OryxOS-Agent header."""
    headers = request.headers
    return ToolCall.of(tool, body, headers.get("X-OryxOS-Agent"), headers.get("X-OryxOS-Session"))


async def _tool(
    request: web.Request, call: ToolCall, do: Callable[[MemoryService], Awaitable[Any]]
) -> Any:
    """Run a tool exactly as an agent calls it; its record goes to tool_invocations with
    the memory thread's next mirror, never between the call and its answer."""
    worker = request.app[WORKER]
    try:
        output = await do(worker.service)
    except OryxError as error:
        worker.record_tool(call.recorded(call.failure(error), False))
        raise
    worker.record_tool(call.recorded(output, True))
    return output


@handles("create_session")
async def create_session(request: web.Request, args: Args) -> Any:
    info = await run(request, lambda s: s.create_session(args["agent"]))
    return info.__dict__


@handles("sessions")
async def sessions(request: web.Request, args: Args) -> Any:
    agent = query_agent(args)
    return await run(request, lambda s: sessions_data(s.recent_sessions(agent, args["limit"])))


@handles("append_message")
async def append_message(request: web.Request, args: Args) -> Any:
    session, role, content = args["session"], args["role"], args["content"]
    count = await run(request, lambda s: s.append_message(session, role, content))
    request.app[WORKER].on_mirrored()  # the indexer takes the round in (episodes)
    return {"session": session, "messages": count}


@handles("episodes_search")
async def search_episodes(request: web.Request, args: Args) -> Any:
    ref = path_agent(request)

    def answer(service: MemoryService) -> dict[str, Any]:
        hits = service.search_episodes(ref.agent, args["query"], args["limit"], args["exclude"])
        return episodes_data(ref, hits)

    return await ranked(request, ref, answer)


@handles("session_messages")
async def session_history(request: web.Request, args: Args) -> Any:
    session = args["session"]
    messages = await run(request, lambda s: s.history(session, args["turns"]))
    return {"session": session, "messages": messages}


def _route(operation: Operation) -> Handler:
    handler = HANDLERS[operation.name]

    async def served(request: web.Request) -> Any:
        return await handler(request, await arguments(request, operation))

    return served


def make_app(
    worker: MemoryWorker,
    readers: Readers,
    health_data: Callable[[], dict[str, Any]],
    client_timeout: float,
) -> web.Application:
    app = web.Application(middlewares=[wrap_in_envelope], client_max_size=MAX_BODY_BYTES)
    app[WORKER] = worker
    app[READERS] = readers
    app[HEALTH] = health_data
    app[CLIENT_TIMEOUT] = client_timeout
    app[ROOT] = os.path.realpath(worker.service.workspace.root)
    routes = [
        web.route(operation.method, path, _route(operation))
        for operation in OPERATIONS
        for path in operation.paths()
    ]
    app.add_routes(routes)
    return app
