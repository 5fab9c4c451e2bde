"""How oryxmem talks to mem0: a ``mem0.Memory`` inside this process, or a mem0 server.

``[mem0] transport`` chooses: ``embedded`` (default) keeps a ``mem0.Memory`` whose
vector store (Qdrant, on disk) and history live under ``.oryxos/mem0/``; ``http``
speaks to a self-hosted mem0 server at ``mem0.url`` (``POST /memories``, ``POST
/search``, ``GET /memories?agent_id=``, ``DELETE /memories/{id}``), its API key read
from the variable ``mem0.api_key_env`` names.

Offline, always: mem0 is imported with its telemetry off (``MEM0_TELEMETRY=False``)
and its folder (``MEM0_DIR``) inside the workspace. mem0 always builds an LLM and an
embedder from its config; both are given a dead loopback URL and a dummy key, every
add is ``infer=False`` (stored verbatim: no LLM call), and the embedder is replaced by
oryxmem's own (the offline MiniLM, or recall.embedder's server). The embedded store
allows one client per folder: the daemon holds it; another process is told so.

Every memory oryxmem writes carries its entry's id, scope and time in mem0's
metadata (``oryxmem_id``, ``scope``, ``ts``): the mapping survives restarts.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oryxmem.config import Config
from oryxmem.errors import BackendUnavailableError, InvalidConfigError
from oryxmem.store.format import Entry
from oryxmem.workspace import Workspace

if TYPE_CHECKING:
    from oryxmem.embed import Embedder

log = logging.getLogger("oryxmem.mem0")
DEAD_URL = "http://127.0.0.1:9/v1"  # discard: nothing listens, nothing leaves the machine
PAGE = 100_000  # get_all and search truncate at top_k (mem0#3751): ask for everything
HTTP_TIMEOUT_SECONDS = 30.0
COLLECTION = "oryxmem"


@dataclass(frozen=True)
class Mem0Memory:
    """One memory as mem0 holds it."""

    id: str
    text: str
    metadata: dict[str, Any]
    created_at: str | None  # ISO 8601, as mem0 gives it

    @property
    def oryxmem_id(self) -> str | None:
        value = self.metadata.get("oryxmem_id")
        return value if isinstance(value, str) else None

    @property
    def local_time(self) -> str | None:
        """created_at as entries are stamped (local "YYYY-MM-DD HH:MM:SS")."""
        if not self.created_at:
            return None
        try:
            moment = datetime.fromisoformat(self.created_at.replace("Z", "+00:00"))
        except ValueError:
            return None
        if moment.tzinfo is not None:
            moment = moment.astimezone()
        return moment.strftime("%Y-%m-%d %H:%M:%S")

    @classmethod
    def of(cls, item: dict[str, Any]) -> Mem0Memory:
        metadata = item.get("metadata")
        return cls(
            str(item["id"]),
            str(item.get("memory", "")),
            metadata if isinstance(metadata, dict) else {},
            item.get("created_at"),
        )


def metadata_of(entry: Entry) -> dict[str, str]:
    """What an entry's memory carries in mem0, so the mapping survives restarts."""
    return {"oryxmem_id": entry.entry_id, "scope": entry.scope, "ts": entry.ts or ""}


class Mem0Link(ABC):
    """The calls oryxmem makes of mem0, whichever way it is reached."""

    store_id = ""  # which store: one made again (a deleted .oryxos/mem0/) is another

    @abstractmethod
    def add(self, agent: str, text: str, metadata: dict[str, Any]) -> str:
        """Store text verbatim for the agent; returns its mem0 id."""

    @abstractmethod
    def memories(self, agent: str) -> list[Mem0Memory]:
        """Every memory of the agent (none left out)."""

    @abstractmethod
    def delete(self, memory_id: str) -> None:
        """Delete one memory (one already gone is no error)."""

    @abstractmethod
    def search(self, agent: str, query: str, limit: int) -> list[tuple[Mem0Memory, float]]:
        """The agent's memories by meaning, best first, with mem0's score."""

    @abstractmethod
    def tag(self, memory_id: str, metadata: dict[str, Any]) -> None:
        """Set a memory's metadata (its text stays)."""

    def close(self) -> None:  # noqa: B027 (the http link holds nothing)
        """Let go of what the link holds."""


def agent_id(agent: str) -> str:
    """The mem0 agent_id of an oryxmem agent (the global file: "oryxmem-global")."""
    return agent or "oryxmem-global"


# --- embedded ---------------------------------------------------------------------


def offline_mem0(home: Path) -> Any:
    """mem0's Memory class, imported with its telemetry off and its folder in the
    workspace (it writes config.json there at import). Set before the import, and again
    after it, should something have imported mem0 first."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(home)
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    for noisy in ("mem0", "qdrant_client"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    try:
        import mem0.memory.main
        import mem0.memory.telemetry
    except ImportError:
        raise BackendUnavailableError(
            "memory.backend = mem0 needs mem0: pip install 'oryxmem[mem0]'"
        ) from None
    mem0.memory.telemetry.MEM0_TELEMETRY = False
    mem0.memory.main.MEM0_TELEMETRY = False
    return mem0.memory.main.Memory


class EmbeddedLink(Mem0Link):
    """A mem0.Memory in this process, its files under .oryxos/mem0/."""

    def __init__(self, workspace: Workspace, config: Config) -> None:
        folder = workspace.os_dir / "mem0"
        folder.mkdir(mode=0o700, exist_ok=True)
        Memory = offline_mem0(folder / "home")
        embedder = _embedder(config)
        dims = len(embedder.query_vector("dimensions"))
        settings = {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "path": str(folder / "qdrant"),
                    "collection_name": COLLECTION,
                    "embedding_model_dims": dims,
                    "on_disk": True,
                },
            },
            "llm": {"provider": "openai", "config": _dead("model")},
            "embedder": {
                "provider": "openai",
                "config": {**_dead("model"), "embedding_dims": dims},
            },
            "history_db_path": str(folder / "history.db"),
        }
        try:
            self.memory = Memory.from_config(settings)
        except RuntimeError as error:  # Qdrant: "Storage folder ... is already accessed"
            raise BackendUnavailableError(
                f"the embedded mem0 store in {folder} is held by another process (the"
                f" daemon): go through it, or stop it ({error})"
            ) from None
        self.memory.embedding_model = _embedding(embedder)
        self._lock = threading.Lock()  # one call at a time into the local Qdrant

    def add(self, agent: str, text: str, metadata: dict[str, Any]) -> str:
        with self._lock:
            done = self.memory.add(
                [{"role": "user", "content": text}],
                agent_id=agent_id(agent),
                metadata=metadata,
                infer=False,
            )
        return str(done["results"][0]["id"])

    def memories(self, agent: str) -> list[Mem0Memory]:
        with self._lock:
            found = self.memory.get_all(filters={"agent_id": agent_id(agent)}, top_k=PAGE)
        return [Mem0Memory.of(item) for item in found["results"]]

    def delete(self, memory_id: str) -> None:
        with self._lock, contextlib.suppress(ValueError, KeyError):  # gone: as meant
            self.memory.delete(memory_id)

    def search(self, agent: str, query: str, limit: int) -> list[tuple[Mem0Memory, float]]:
        with self._lock:
            found = self.memory.search(query, filters={"agent_id": agent_id(agent)}, top_k=limit)
        return [(Mem0Memory.of(item), float(item.get("score", 0.0))) for item in found["results"]]

    def tag(self, memory_id: str, metadata: dict[str, Any]) -> None:
        with self._lock:
            self.memory.update(memory_id, metadata=metadata)

    def close(self) -> None:
        client = getattr(self.memory.vector_store, "client", None)
        if client is not None:
            client.close()


_EMBEDDERS: dict[str, Embedder] = {}  # one model per process, whatever the links


def _embedder(config: Config) -> Embedder:
    from oryxmem.embed import load_embedder

    key = f"{config.get('recall.embedder')}\n{config.get('recall.embedder_url')}"
    with _LINKS_LOCK:
        embedder = _EMBEDDERS.get(key)
        if embedder is None:
            loaded = load_embedder(config)
            if loaded is None:
                raise InvalidConfigError(
                    "memory.backend = mem0 needs an embedder (recall.embedder is none)"
                )
            embedder = _EMBEDDERS[key] = loaded
        return embedder


def _dead(model: str) -> dict[str, Any]:
    return {"api_key": "oryxmem-offline", "openai_base_url": DEAD_URL, "model": model}


def _embedding(embedder: Embedder) -> Any:
    """oryxmem's embedder as mem0's EmbeddingBase."""
    from mem0.embeddings.base import EmbeddingBase

    class OryxmemEmbedding(EmbeddingBase):  # type: ignore[misc]
        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            if memory_action == "search":
                return [float(x) for x in embedder.query_vector(text)]
            return [float(x) for x in embedder.embed([text], "passage")[0]]

        def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
            return [[float(x) for x in row] for row in embedder.embed(list(texts), "passage")]

    return OryxmemEmbedding()


# --- http -------------------------------------------------------------------------


class HttpLink(Mem0Link):
    """A self-hosted mem0 server."""

    def __init__(self, config: Config) -> None:
        self.url = str(config.get("mem0.url")).rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise InvalidConfigError("mem0.transport = http needs mem0.url (http://...)")
        key_env = str(config.get("mem0.api_key_env"))
        self._key = os.environ.get(key_env, "") if key_env else ""
        self.store_id = self.url

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Token {self._key}"
            headers["X-API-Key"] = self._key
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as error:
            if method == "DELETE" and error.code == 404:
                return None
            raise BackendUnavailableError(
                f"the mem0 server {self.url} answered {method} {path} with {error.code}"
            ) from None
        except OSError as error:
            raise BackendUnavailableError(
                f"the mem0 server {self.url} is unreachable: {error}"
            ) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise BackendUnavailableError(
                f"the mem0 server {self.url} sent no JSON for {method} {path}"
            ) from None

    @staticmethod
    def _results(answer: Any) -> list[dict[str, Any]]:
        items = answer.get("results", []) if isinstance(answer, dict) else answer
        if not isinstance(items, list):
            raise BackendUnavailableError("the mem0 server sent no list of memories")
        return [item for item in items if isinstance(item, dict) and "id" in item]

    def add(self, agent: str, text: str, metadata: dict[str, Any]) -> str:
        body = {
            "messages": [{"role": "user", "content": text}],
            "agent_id": agent_id(agent),
            "metadata": metadata,
            "infer": False,
        }
        results = self._results(self._call("POST", "/memories", body))
        if not results:
            raise BackendUnavailableError("the mem0 server stored nothing for an add")
        return str(results[0]["id"])

    def memories(self, agent: str) -> list[Mem0Memory]:
        query = urllib.parse.urlencode({"agent_id": agent_id(agent), "limit": PAGE})
        return [
            Mem0Memory.of(item) for item in self._results(self._call("GET", f"/memories?{query}"))
        ]

    def delete(self, memory_id: str) -> None:
        self._call("DELETE", f"/memories/{urllib.parse.quote(memory_id, safe='')}")

    def tag(self, memory_id: str, metadata: dict[str, Any]) -> None:
        path = f"/memories/{urllib.parse.quote(memory_id, safe='')}"
        self._call("PUT", path, {"metadata": metadata})

    def search(self, agent: str, query: str, limit: int) -> list[tuple[Mem0Memory, float]]:
        body = {"query": query, "agent_id": agent_id(agent), "limit": limit, "top_k": limit}
        return [
            (Mem0Memory.of(item), float(item.get("score", 0.0)))
            for item in self._results(self._call("POST", "/search", body))
        ]


# --- one link per workspace in a process --------------------------------------------

_LINKS: dict[str, Mem0Link] = {}
_LINKS_LOCK = threading.Lock()


def link_for(workspace: Workspace, config: Config) -> Mem0Link:
    """The workspace's link, made on first use and shared by the process's threads."""
    transport = str(config.get("mem0.transport"))
    key = f"{workspace.root}\n{transport}"
    with _LINKS_LOCK:
        link = _LINKS.get(key)
    if link is None:
        made = EmbeddedLink(workspace, config) if transport == "embedded" else HttpLink(config)
        with _LINKS_LOCK:
            if not _LINKS:
                atexit.register(close_links)  # before the interpreter tears Qdrant down
            link = _LINKS.setdefault(key, made)
    return link


def close_links() -> None:
    with _LINKS_LOCK:
        for link in _LINKS.values():
            link.close()
        _LINKS.clear()
