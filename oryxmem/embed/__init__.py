"""Embedders: texts to unit vectors, for the semantic arm of search (docs/design.md §11).

One small interface, chosen by ``recall.embedder`` among the names registered in
oryxmem/registry.py. The default runs offline from files installed by pip and
checked by their sha256; nothing is ever downloaded at run time.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

from oryxmem.config import Config
from oryxmem.registry import EMBEDDERS

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

Kind = Literal["query", "passage"]
QUERY_CACHE = 32
BACKLOG_PIECE = 64  # texts embedded between two looks at whether backlogs were stopped


class BacklogStopped(Exception):
    """A backlog's embedding was stopped part-way: the process is stopping, and no one
    waits on a backlog (what was embedded of it is dropped, made again next time)."""


class Embedder(ABC):
    """Turns texts into L2-normalised float32 vectors, one row per text."""

    name: ClassVar[str]

    def __init__(self, config: Config) -> None:
        self.config = config
        self._queries: dict[str, npt.NDArray[np.float32]] = {}
        self._queries_lock = threading.Lock()
        self._backlogs_stopped = threading.Event()

    @property
    @abstractmethod
    def model_id(self) -> str:
        """What the vectors carry: vectors of another model id are made again."""

    @abstractmethod
    def embed(self, texts: Sequence[str], kind: Kind) -> npt.NDArray[np.float32]:
        """Vectors for texts: a question to search with (``query``) or a memory to be
        found (``passage``); models trained with prefixes for each apply them here."""

    def embed_backlog(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """embed(texts, "passage") for a backlog no one waits on (the indexer's steps): an
        embedder may spread it over a core nothing else is using. Raises BacklogStopped
        once stop_backlogs was called (it looks every BACKLOG_PIECE texts)."""
        import numpy as np

        pieces = []
        for at in range(0, len(texts), BACKLOG_PIECE):
            self.check_backlogs()
            pieces.append(self.embed(texts[at : at + BACKLOG_PIECE], "passage"))
        return np.concatenate(pieces) if pieces else self.embed(texts, "passage")

    def stop_backlogs(self) -> None:
        """Stop every backlog being embedded, and any to come: the indexer's step, at
        nice 10, can take its time on a busy machine, and a process that is stopping does
        not wait for work no one waits on."""
        self._backlogs_stopped.set()

    def check_backlogs(self) -> None:
        """Raise BacklogStopped once stop_backlogs was called."""
        if self._backlogs_stopped.is_set():
            raise BacklogStopped("the process is stopping")

    def knows(self, query: str) -> bool:
        """Is this query's embedding remembered (query_vector answers at once)?"""
        with self._queries_lock:
            return query in self._queries

    def query_vector(self, query: str) -> npt.NDArray[np.float32]:
        """embed([query], "query")[0], remembered for the last QUERY_CACHE queries: a prompt
        built for a message searches the memories and the episodes with the same one."""
        with self._queries_lock:
            vector = self._queries.get(query)
        if vector is None:
            vector = self.embed([query], "query")[0]
            with self._queries_lock:
                if len(self._queries) >= QUERY_CACHE:
                    self._queries.pop(next(iter(self._queries)))
                self._queries[query] = vector
        return vector

    def close(self) -> None:  # noqa: B027 (most embedders hold nothing to let go of)
        """Let go of what the embedder holds (a model session, a connection)."""


def load_embedder(config: Config) -> Embedder | None:
    """The embedder recall.embedder names, loaded now (None: semantic search is off)."""
    name = str(config.get("recall.embedder"))
    if name == "none":
        return None
    embedder: Embedder = EMBEDDERS.load(name)(config)
    return embedder
