"""A loopback server with a self-hosted mem0 server's routes over a real, embedded
``mem0.Memory`` (mem0's own server needs PostgreSQL with pgvector and is not on PyPI):
POST /memories, GET /memories?agent_id=, POST /search, PUT and DELETE /memories/{id}.
It is also the "other mem0 client" of the tests: they add and delete through it.

With MEM0_SERVER_URL set, ``mem0_endpoint`` is that real mem0 server instead (and the
tests look at it through oryxmem's http link)."""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from oryxmem.backends.mem0_link import PAGE, EmbeddedLink, HttpLink, Mem0Link
from oryxmem.config import Config
from oryxmem.workspace import Workspace
from support.loopback import JsonHandler, serving


@contextmanager
def mem0_server(folder: Path) -> Iterator[tuple[str, EmbeddedLink]]:
    (folder / ".oryxos").mkdir(parents=True, exist_ok=True)
    link = EmbeddedLink(Workspace(folder), Config.defaults())
    memory = link.memory

    class Handler(JsonHandler):
        def _answer(self, status: int, body: Any) -> None:
            self.send_json(status, json.dumps(body).encode())

        def _body(self) -> Any:
            return json.loads(
                self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"
            )

        def do_POST(self) -> None:
            body = self._body()
            with link._lock:
                if self.path == "/memories":
                    done = memory.add(
                        body["messages"],
                        agent_id=body.get("agent_id"),
                        metadata=body.get("metadata"),
                        infer=False,  # no LLM runs here: every add is stored verbatim
                    )
                    return self._answer(200, done)
                if self.path == "/search":
                    found = memory.search(
                        body["query"],
                        filters={"agent_id": body.get("agent_id")},
                        top_k=int(body.get("top_k") or 10),
                    )
                    return self._answer(200, found)
            self._answer(404, {"detail": "Not Found"})

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            if url.path != "/memories" or "agent_id" not in query:
                return self._answer(400, {"detail": "At least one identifier is required."})
            with link._lock:
                found = memory.get_all(filters={"agent_id": query["agent_id"][0]}, top_k=PAGE)
            self._answer(200, found)

        def _id(self) -> str | None:
            parts = self.path.split("/")
            return (
                urllib.parse.unquote(parts[2])
                if len(parts) == 3 and parts[1] == "memories"
                else None
            )

        def do_PUT(self) -> None:
            memory_id, body = self._id(), self._body()
            with link._lock:
                if memory_id is None or memory.get(memory_id) is None:
                    return self._answer(404, {"detail": "Memory not found"})
                memory.update(memory_id, metadata=body.get("metadata"))
            self._answer(200, {"message": "Memory updated successfully!"})

        def do_DELETE(self) -> None:
            memory_id = self._id()
            with link._lock:
                if memory_id is None or memory.get(memory_id) is None:
                    return self._answer(404, {"detail": "Memory not found"})
                memory.delete(memory_id)
            self._answer(200, {"message": "Memory deleted successfully"})

    try:
        with serving(Handler) as url:
            yield url, link
    finally:
        link.close()


@contextmanager
def mem0_endpoint(folder: Path) -> Iterator[tuple[str, Mem0Link]]:
    """MEM0_SERVER_URL's server when it is set, else the loopback one: its URL, and a
    link to look at it (and add or delete as another client would)."""
    url = os.environ.get("MEM0_SERVER_URL", "").rstrip("/")
    if not url:
        with mem0_server(folder) as (loopback, link):
            yield loopback, link
        return
    config = Config(None, {"mem0.url": url, "mem0.api_key_env": "MEM0_API_KEY"})
    yield url, HttpLink(config)
