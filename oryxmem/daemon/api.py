"""The memory API over HTTP/1.1 (DESIGN section 8): thin aiohttp handlers.

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
from http import HTTPStatus
from typing import Any

from aiohttp import web, web_protocol, web_server
from aiohttp.web_request import BaseRequest

from oryxmem.daemon.readers import Readers
from oryxmem.daemon.sockets import peer_uid
from oryxmem.daemon.worker import MemoryWorker
from oryxmem.errors import (
    BodyTooLargeError,
    EmptyKeywordError,
    ForbiddenError,
    InternalError,
    InvalidContentError,
    InvalidFieldError,
    InvalidJsonError,
    MalformedRequestError,
    MethodNotAllowedError,
    NotFoundError,
    OryxError,
    RequestTimeoutError,
    UnsafeAgentNameError,
    WrongWorkspaceError,
)
from oryxmem.payloads import (
    agents_data,
    context_data,
    episodes_data,
    memory_data,
    prompt_data,
    recall_data,
    save_data,
    search_data,
)
from oryxmem.schemas import MAX_RESULTS, tool_schemas
from oryxmem.service import MemoryService, SaveRequest
from oryxmem.service.finding import RECALL_MIN_SIMILARITY
from oryxmem.store.format import ARCHIVAL, has_lone_surrogate
from oryxmem.store.rows import sync_summary
from oryxmem.tools import RecallArgs, ToolCall, save_request, text_field
from oryxmem.workspace import GLOBAL_AGENT, WORKSPACE_HEADER, AgentRef, agent_name_problem

log = logging.getLogger("oryxmem.daemon")

MAX_BODY_BYTES = 1024 * 1024
Handler = Callable[[web.Request], Awaitable[Any]]
WORKER: web.AppKey[MemoryWorker] = web.AppKey("worker", MemoryWorker)
READERS: web.AppKey[Readers] = web.AppKey("readers", Readers)
HEALTH: web.AppKey[Callable[[], dict[str, Any]]] = web.AppKey("health")
CLIENT_TIMEOUT = web.AppKey("client_timeout", float)
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


# --- request parsing ------------------------------------------------------------


async def json_body(request: web.Request) -> dict[str, Any]:
    if request.content.is_eof():
        raw = await request.read()  # all here already (the usual case): no timer needed
    else:
        try:
            raw = await asyncio.wait_for(request.read(), request.app[CLIENT_TIMEOUT])
        except TimeoutError:
            raise RequestTimeoutError(
                f"the body did not arrive within {request.app[CLIENT_TIMEOUT]} s; closing"
            ) from None
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


async def run(request: web.Request, work: Callable[[MemoryService], Any]) -> Any:
    return await asyncio.wrap_future(request.app[WORKER].call(work))


async def ranked(
    request: web.Request, ref: AgentRef | None, work: Callable[[MemoryService], Any]
) -> Any:
    """A search (or a recall by meaning) on a reader thread (readers.py says why). First,
    on the memory thread, the rows take in every save acknowledged before this request
    and the keyword indexes every row (and the agent named in the URL is found safe)."""
    if ref is None:
        await run(request, MemoryService.catch_up_indexes)
    else:
        await run_for(request, ref, MemoryService.catch_up_indexes)
    return await asyncio.wrap_future(request.app[READERS].call(work))


async def run_for(request: web.Request, ref: AgentRef, work: Callable[[MemoryService], Any]) -> Any:
    """run() for the agent named in the URL, once its folder is found safe."""

    def checked(service: MemoryService) -> Any:
        service.check_folder(ref)
        return work(service)

    return await run(request, checked)


# --- handlers -------------------------------------------------------------------


async def health(request: web.Request) -> Any:
    def summary(service: MemoryService) -> dict[str, Any]:
        return {"sync": sync_summary(service.db), "indexes": service.index_summary()}

    data = request.app[HEALTH]()
    try:  # health answers even while the memory thread is held up (say, by a lock)
        data.update(await asyncio.wait_for(asyncio.shield(run(request, summary)), 2.0))
    except TimeoutError:
        data["sync"] = data["indexes"] = "unknown: the memory thread is busy"
    return data


async def list_agents(request: web.Request) -> Any:
    return await run(request, lambda s: agents_data(s.agents()))


async def get_memory(request: web.Request) -> Any:
    ref = path_agent(request)
    return await run_for(request, ref, lambda s: memory_data(s.get(ref.agent)))


async def save(request: web.Request) -> Any:
    ref = path_agent(request)
    body = await json_body(request)
    content = text_field(body, "content")
    scope = text_field(body, "scope", ARCHIVAL)
    result = await request.app[WORKER].save_on_loop(ref, SaveRequest(content, scope, "socket"))
    return save_data(result)


async def recall(request: web.Request) -> Any:
    ref = path_agent(request)
    keyword = request.query.get("keyword", "")
    if not keyword.strip():
        raise EmptyKeywordError("give ?keyword= a word to look for")

    def answer(service: MemoryService) -> dict[str, Any]:
        return recall_data(service.recall(ref.agent, keyword))

    ranks = request.app[WORKER].service.recall_ranks
    return await (ranked if ranks else run_for)(request, ref, answer)


async def search(request: web.Request) -> Any:
    ref = path_agent(request)
    query = request.query.get("q", "")
    if not query.strip():
        raise EmptyKeywordError("give ?q= a question or words to look for")
    limit = _int_query(request, "k", MAX_RESULTS)
    mode = request.query.get("mode", "hybrid")
    # relevant=1: only hits the words found, or close enough in meaning (as recall's)
    least = RECALL_MIN_SIMILARITY if request.query.get("relevant") in ("1", "true") else None

    def answer(service: MemoryService) -> dict[str, Any]:
        found = service.search(ref.agent, query, limit=limit, mode=mode, min_similarity=least)
        return search_data(found)

    return await ranked(request, ref, answer)


async def reindex(request: web.Request) -> Any:
    body = await json_body(request)
    agent = body.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise InvalidFieldError("'agent' must be a string")
    worker = request.app[WORKER]
    data = await run(request, lambda s: s.start_reindex(agent))
    worker.on_mirrored()  # the indexer thread embeds what is to be done again
    return data


async def context(request: web.Request) -> Any:
    ref = path_agent(request)
    session = request.query.get("session")
    turns = _int_query(request, "turns")
    query = request.query.get("query") or None

    def build(service: MemoryService) -> dict[str, Any]:
        data = context_data(service, ref.agent, session, query)
        if session:
            data["history"] = service.history(session, turns)
        return data

    if query is None:
        return await run_for(request, ref, build)
    return await ranked(request, ref, build)  # a search: on a reader thread


async def prompt(request: web.Request) -> Any:
    ref = path_agent(request)
    session = request.query.get("session") or None
    turns = _int_query(request, "turns")
    query = request.query.get("query") or None

    def build(service: MemoryService) -> dict[str, Any]:
        return prompt_data(service, ref.agent, session, turns, query)

    if query is None:
        return await run_for(request, ref, build)
    return await ranked(request, ref, build)  # a search: on a reader thread


async def list_tools(request: web.Request) -> Any:
    return tool_schemas()


async def trigger(request: web.Request) -> Any:
    ref = path_agent(request)
    body = await json_body(request)
    user_message = text_field(body, "user_message", "")
    reply = text_field(body, "reply", "")

    worker = request.app[WORKER]
    limit = worker.service.config.footprint_max_chars
    footprint = SaveRequest.footprint(user_message, reply, limit, "socket")
    return save_data(await worker.save_on_loop(ref, footprint))


async def tool_save_memory(request: web.Request) -> Any:
    body = await json_body(request)
    call = tool_call(request, "save_memory", body)

    async def save(service: MemoryService) -> Any:
        ref = await run(request, lambda s: s.resolve(call.agent))
        saving = save_request(call.body, "socket")
        return save_data(await request.app[WORKER].save_on_loop(ref, saving))

    return await _tool(request, call, save)


async def tool_recall_memory(request: web.Request) -> Any:
    body = await json_body(request)
    call = tool_call(request, "recall_memory", body)

    async def recall(service: MemoryService) -> Any:
        args = RecallArgs.of(call.body)
        if args.ranks(service):
            return await ranked(request, None, lambda s: args.answer(s, call.agent))
        return await run(request, lambda s: args.answer(s, call.agent))

    return await _tool(request, call, recall)


def tool_call(request: web.Request, tool: str, body: dict[str, Any]) -> ToolCall:
    """A tool call names its agent in the body or the X-OryxOS-Agent header."""
    headers = request.headers
    return ToolCall.of(tool, body, headers.get("X-OryxOS-Agent"), headers.get("X-OryxOS-Session"))


async def _tool(
    request: web.Request, call: ToolCall, do: Callable[[MemoryService], Awaitable[Any]]
) -> Any:
    """Run a tool exactly as an agent calls it, and record the call in tool_invocations."""
    readers = request.app[READERS]  # the record never queues a save behind a lock
    try:
        output = await do(request.app[WORKER].service)
    except OryxError as error:
        failure = call.failure(error)
        await asyncio.wrap_future(readers.call(lambda s: call.record(s, failure, False)))
        raise
    await asyncio.wrap_future(readers.call(lambda s: call.record(s, output, True)))
    return output


async def create_session(request: web.Request) -> Any:
    body = await json_body(request)
    agent = body.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise InvalidFieldError("'agent' must be a string")
    info = await run(request, lambda s: s.create_session(agent))
    return info.__dict__


async def append_message(request: web.Request) -> Any:
    session = request.match_info["session"]
    body = await json_body(request)
    role, content = text_field(body, "role"), text_field(body, "content")
    count = await run(request, lambda s: s.append_message(session, role, content))
    request.app[WORKER].on_mirrored()  # the indexer takes the round in (episodes)
    return {"session": session, "messages": count}


async def search_episodes(request: web.Request) -> Any:
    ref = path_agent(request)
    query = request.query.get("q", "")
    if not query.strip():
        raise EmptyKeywordError("give ?q= a question or words to look for")
    k = _int_query(request, "k", MAX_RESULTS) or 5
    exclude = request.query.get("exclude") or None

    def answer(service: MemoryService) -> dict[str, Any]:
        return episodes_data(ref, service.search_episodes(ref.agent, query, k, exclude))

    return await ranked(request, ref, answer)


async def session_history(request: web.Request) -> Any:
    session = request.match_info["session"]
    turns = _int_query(request, "turns")
    messages = await run(request, lambda s: s.history(session, turns))
    return {"session": session, "messages": messages}


def _int_query(request: web.Request, name: str, most: int | None = None) -> int | None:
    value = request.query.get(name)
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 9:
        raise InvalidFieldError(f"?{name}= must be a whole number")
    number = int(value)
    if number < 1 or (most is not None and number > most):
        upper = f" and at most {most}" if most is not None else ""
        raise InvalidFieldError(f"?{name}= must be at least 1{upper}")
    return number


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
        web.get("/api/v1/health", health),
        web.get("/api/v1/agents", list_agents),
        web.get("/api/v1/tools", list_tools),
        web.post("/api/v1/tools/save_memory", tool_save_memory),
        web.post("/api/v1/tools/recall_memory", tool_recall_memory),
        web.post("/api/v1/sessions", create_session),
        web.post("/api/v1/reindex", reindex),
        web.post("/api/v1/sessions/{session}/messages", append_message),
        web.get("/api/v1/sessions/{session}/history", session_history),
    ]
    for prefix in ("/api/v1/agents/{name}", "/api/v1"):
        routes += [
            web.get(f"{prefix}/memory", get_memory),
            web.post(f"{prefix}/memory", save),
            web.get(f"{prefix}/memory/recall", recall),
            web.get(f"{prefix}/memory/search", search),
            web.get(f"{prefix}/context", context),
            web.get(f"{prefix}/prompt", prompt),
            web.get(f"{prefix}/episodes/search", search_episodes),
            web.post(f"{prefix}/triggers", trigger),
        ]
    app.add_routes(routes)
    return app
