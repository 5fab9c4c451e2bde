"""The console's pages: server-rendered HTML (Jinja2, every value escaped, memory text
revealed as visible.py reveals it), readable without JavaScript; console.js only keeps an
open agent page live and asks before a Forget.

Every change is a form POST (guard.py checks its Origin and CSRF token) answered by a
redirect to the page it came from (post, redirect, get), or by a page that says why
nothing was changed."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import jinja2
from aiohttp import web

from oryxmem.console.access import ConsoleMemory
from oryxmem.console.guard import GUARD
from oryxmem.errors import EntryNotFoundError, OryxError
from oryxmem.visible import revealed, revealed_text
from oryxmem.workspace import agent_name_problem

log = logging.getLogger("oryxmem.console")

PAGE_SIZE = 100
HITS = 20  # a search shows the best this many
MEMORY = web.AppKey("memory", ConsoleMemory)
WORKSPACE = web.AppKey("workspace", str)
routes = web.RouteTableDef()


class BadRequest(Exception):
    """A page asked for with arguments it cannot take (a word for a number, an unsafe
    agent name): 400, and nothing read."""


def _shown_lines(text: str) -> str:
    return "\n".join(revealed(line) for line in str(text).splitlines())


TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("oryxmem.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.filters["shown"] = lambda text: revealed_text(str(text))
TEMPLATES.filters["shown_lines"] = _shown_lines
TEMPLATES.globals["agent_label"] = lambda name: name or "(global)"
TEMPLATES.globals["agent_url"] = lambda name: "/agent?name=" + urllib.parse.quote(name or "")
TEMPLATES.globals["page_size"] = PAGE_SIZE


async def render(
    request: web.Request, template: str, status: int = 200, **values: Any
) -> web.Response:
    read_only = not request.app[MEMORY].daemon_answered  # as the page's data came
    html = TEMPLATES.get_template(template).render(
        workspace=request.app[WORKSPACE],
        read_only=read_only,
        csrf=request.app[GUARD].csrf,
        notice=values.pop("notice", None),
        **values,
    )
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def agent_arg(query: Mapping[str, str], key: str = "name") -> str | None:
    """The agent a page is about: a safe name, or None for the global file."""
    name = query.get(key) or None
    problem = agent_name_problem(name) if name else None
    if problem:
        raise BadRequest(f"unsafe agent name {name!r}: {problem}")
    return name


def number_arg(query: Mapping[str, str], key: str) -> int:
    text = query.get(key) or "0"
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise BadRequest(f"?{key}= must be a whole number")
    return int(text)


def text_arg(query: Mapping[str, str], key: str) -> str | None:
    text = (query.get(key) or "").strip()
    return text or None


# --- reading ------------------------------------------------------------------------


@routes.get("/")
async def agents(request: web.Request) -> web.Response:
    def gather(memory: ConsoleMemory) -> list[dict[str, Any]]:
        listed, sync = memory.agents(), memory.sync()
        problems = {p["agent"]: p["status"] for p in sync["problems"]}
        for agent in listed:
            name = agent["agent"]
            agent["sync"] = problems.get(name, "ok")
            agent["kept"] = sum(1 for kept in sync["kept_lines"] if kept["agent"] == name)
            agent["repairs"] = sum(1 for r in sync["repairs"] if r["agent"] == name)
        return listed

    listed = await request.app[MEMORY].run(gather)
    return await render(request, "agents.html", title="Agents", agents=listed)


def _memory_view(
    memory: ConsoleMemory, agent: str | None, query: Mapping[str, str]
) -> dict[str, Any]:
    """The two tables of an agent's page, each a page of its section."""
    order = "oldest" if query.get("order") == "oldest" else "newest"
    core_at, archival_at = number_arg(query, "coff"), number_arg(query, "aoff")
    core = memory.page(agent, "core", core_at, PAGE_SIZE, order)
    archival = memory.page(agent, "archival", archival_at, PAGE_SIZE, order)
    return {"core": core, "archival": archival, "version": archival["version"]}


TABLE_ARGS = ("coff", "aoff", "order")  # where each table's page starts, and its order


def _page_query(
    agent: str | None, query: Mapping[str, str], keys: tuple[str, ...]
) -> dict[str, str]:
    return {"name": agent or "", **{k: query[k] for k in keys if query.get(k)}}


def _here(agent: str | None, query: Mapping[str, str]) -> Callable[..., str]:
    """A link to this agent page with some of its arguments changed."""

    def link(**changed: Any) -> str:
        merged = {**_page_query(agent, query, ("q", *TABLE_ARGS)), **changed}
        return "/agent?" + urllib.parse.urlencode({k: str(v) for k, v in merged.items()})

    return link


@routes.get("/agent")
async def agent_page(request: web.Request) -> web.Response:
    query = request.query
    agent, q = agent_arg(query), text_arg(query, "q")

    memory = request.app[MEMORY]
    tables = memory.run(lambda m: _memory_view(m, agent, query))
    if q:  # the search and the tables, asked together
        view, found = await asyncio.gather(tables, memory.run(lambda m: m.search(agent, q, HITS)))
        view["found"] = found
    else:
        view = {**await tables, "found": None}
    fragment = urllib.parse.urlencode(_page_query(agent, query, TABLE_ARGS))
    return await render(
        request,
        "agent.html",
        title=agent or "(global)",
        agent=agent or "",
        q=q,
        here=_here(agent, query),
        live_url="/live?" + fragment,
        fragment_url="/agent/rows?" + fragment,
        notice=NOTICES.get(query.get("done", "")),
        **view,
    )


@routes.get("/agent/rows")
async def agent_rows(request: web.Request) -> web.Response:
    """The two tables alone: what console.js puts in place when the memory changed."""
    query = request.query
    agent = agent_arg(query)
    view = await request.app[MEMORY].run(lambda m: _memory_view(m, agent, query))
    response = await render(
        request, "rows.html", agent=agent or "", here=_here(agent, query), **view
    )
    response.headers["X-Memory-Version"] = view["version"]
    return response


@routes.get("/live")
async def live(request: web.Request) -> web.Response:
    """The version of an agent's memory (its file's stat): console.js asks every second
    and fetches the tables again when it moved."""
    agent = agent_arg(request.query)
    page = await request.app[MEMORY].run(lambda m: m.page(agent, "archival", 0, 1, "newest"))
    return web.json_response({"version": page["version"]})


@routes.get("/sees")
async def sees(request: web.Request) -> web.Response:
    agent, q = agent_arg(request.query), text_arg(request.query, "q")

    def gather(memory: ConsoleMemory) -> tuple[dict[str, Any], dict[str, Any]]:
        return memory.context(agent, q), memory.prompt(agent, q)

    context, prompt = await request.app[MEMORY].run(gather)
    parts = prompt_parts(prompt)
    return await render(
        request,
        "sees.html",
        title="What it sees",
        agent=agent or "",
        q=q,
        parts=parts,
        total=sum(part["chars"] for part in parts),
        notes=prompt.get("notes", []),
        context=context["context"],
        prompt_text=prompt["text"],
    )


def prompt_parts(prompt: dict[str, Any]) -> list[dict[str, Any]]:
    """The budget of a prompt: each part and the characters it takes."""
    parts = [{"name": "system", "chars": len(prompt["system"])}]
    parts += [{"name": f"file {f['name']}", "chars": len(f["text"])} for f in prompt["files"]]
    parts.append({"name": "memory", "chars": len(prompt["memory"])})
    history = sum(len(m["content"]) for m in prompt["history"])
    parts.append({"name": "history", "chars": history})
    parts.append({"name": "tools", "chars": len(json.dumps(prompt["tools"], ensure_ascii=False))})
    return parts


@routes.get("/sessions")
async def sessions(request: web.Request) -> web.Response:
    agent, q = agent_arg(request.query), text_arg(request.query, "q")

    def gather(memory: ConsoleMemory) -> tuple[list[dict[str, Any]], list[Any] | None]:
        found = memory.episodes(agent, q, 10)["episodes"] if q else None
        return memory.sessions(agent, PAGE_SIZE), found

    listed, episodes = await request.app[MEMORY].run(gather)
    return await render(
        request,
        "sessions.html",
        title="Sessions",
        agent=agent or "",
        q=q,
        sessions=listed,
        episodes=episodes,
    )


@routes.get("/session")
async def session(request: web.Request) -> web.Response:
    session_id = text_arg(request.query, "id")
    if session_id is None:
        raise BadRequest("?id= names the session")
    messages = await request.app[MEMORY].run(lambda m: m.messages(session_id))
    return await render(
        request, "session.html", title="Session", session=session_id, messages=messages
    )


@routes.get("/history")
async def history(request: web.Request) -> web.Response:
    every = request.query.get("name", "*") == "*"
    agent = None if every else agent_arg(request.query)

    def gather(memory: ConsoleMemory) -> tuple[list[dict[str, Any]], list[str]]:
        # the global file's history alone is asked for by its name, ''
        events = memory.history(None if every else agent or "", 500)
        return events, [a["agent"] for a in memory.agents()]

    events, names = await request.app[MEMORY].run(gather)
    return await render(
        request,
        "history.html",
        title="History",
        agent=None if every else agent or "",
        agent_names=names,
        events=events,
    )


HEALTH_FACTS = (
    "uptime_seconds",
    "watching",
    "watcher_alive",
    "reconciles",
    "event_overflows",
    "last_sync_error",
    "saves",
    "memory_thread_alive",
    "indexer_alive",
    "last_index_error",
    "rows_waiting",
)


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    def gather(memory: ConsoleMemory) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        return memory.health(), memory.sync()

    data, sync = await request.app[MEMORY].run(gather)
    facts, indexes = [], []
    if data is not None:
        facts = [(key, str(data[key])) for key in HEALTH_FACTS if key in data]
        if isinstance(data.get("indexes"), dict):
            indexes = sorted(data["indexes"].items())
    return await render(
        request,
        "health.html",
        title="Health",
        health=data,
        facts=facts,
        indexes=indexes,
        sync=sync,
        health_json=json.dumps(data, indent=2, ensure_ascii=False),
    )


# --- changing -----------------------------------------------------------------------

NOTICES = {"saved": "Saved.", "forgotten": "Forgotten.", "edited": "Edited."}


async def _form(request: web.Request) -> dict[str, str]:
    form = await request.post()
    return {key: value for key, value in form.items() if isinstance(value, str)}


def _back(agent: str | None, done: str) -> web.Response:
    target = "/agent?" + urllib.parse.urlencode({"name": agent or "", "done": done})
    return web.Response(status=303, headers={"Location": target})


@routes.post("/agent/add")
async def add(request: web.Request) -> web.Response:
    form = await _form(request)
    agent, content = agent_arg(form), form.get("content", "")
    scope = "core" if form.get("scope") == "core" else "archival"
    await request.app[MEMORY].run(lambda m: m.save(agent, content, scope))
    return _back(agent, "saved")


@routes.post("/agent/forget")
async def forget(request: web.Request) -> web.Response:
    form = await _form(request)
    agent, entry_id = agent_arg(form), form.get("id", "")
    if form.get("confirmed") != "1":  # the confirmation, as a page (console.js asks first)
        entry = await request.app[MEMORY].run(lambda m: m.entry(agent, entry_id))
        return await render(request, "forget.html", title="Forget", agent=agent or "", entry=entry)
    await request.app[MEMORY].run(lambda m: m.forget(agent, entry_id))
    return _back(agent, "forgotten")


@routes.get("/agent/edit")
async def edit_form(request: web.Request) -> web.Response:
    agent, entry_id = agent_arg(request.query), request.query.get("id", "")
    entry = await request.app[MEMORY].run(lambda m: m.entry(agent, entry_id))
    return await render(request, "edit.html", title="Edit", agent=agent or "", entry=entry)


@routes.post("/agent/edit")
async def edit(request: web.Request) -> web.Response:
    form = await _form(request)
    agent, entry_id, content = agent_arg(form), form.get("id", ""), form.get("content", "")
    await request.app[MEMORY].run(lambda m: m.edit(agent, entry_id, content))
    return _back(agent, "edited")


# --- errors -------------------------------------------------------------------------


@web.middleware
async def error_pages(request: web.Request, handler: Any) -> web.StreamResponse:
    """What refused a request, as a page: the error's one line, with its HTTP status."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except BadRequest as error:
        return await _error_page(request, 400, "Bad request", str(error))
    except EntryNotFoundError as error:
        asked = await request.post() if request.method == "POST" else request.query
        agent = asked.get("name")
        return await render(
            request,
            "edit.html",
            409,
            title="Changed",
            agent=agent if isinstance(agent, str) else "",
            entry=None,
            conflict=error.message.rstrip(".") + ". Nothing was overwritten.",
        )
    except OryxError as error:
        heading = "Nothing was changed" if request.method == "POST" else "Could not read that"
        return await _error_page(request, error.http_status, heading, error.message)
    except web.HTTPException:
        raise  # aiohttp's own answers (no such page, a method not allowed)
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        message = "an unexpected error; the console's output says more"
        return await _error_page(request, 500, "Something went wrong", message)


async def _error_page(
    request: web.Request, status: int, heading: str, message: str
) -> web.Response:
    return await render(
        request, "error.html", status, title=heading, heading=heading, message=message
    )
