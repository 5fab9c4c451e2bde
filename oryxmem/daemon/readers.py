"""The daemon's reader threads: searches and recalls by meaning, off the memory thread.

A search takes milliseconds (the query's embedding, a matrix product, BM25 over a
large memory) and, with an embedding server, as long as that server takes to
answer: none of it may hold up a save. So the memory thread only brings the rows
up to every acknowledged save and the keyword indexes up to the rows, and only when
they lag (api.ranked: when nothing is pending the search comes straight here), and
the ranking runs here, on one of READER_THREADS threads. Each has its own MemoryService and
connection (WAL: a reader never blocks the writer); they share the process's one
copy of each agent's vectors and of the model. A reader writes nothing: the
memory thread keeps the keyword indexes current, the indexer the vectors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from oryxmem.config import Config
from oryxmem.service import MemoryService
from oryxmem.store.markdown import MarkdownFiles
from oryxmem.workspace import Workspace

READER_THREADS = 2  # searches ranked side by side (2 cores here)


class Readers:
    def __init__(self, workspace: Workspace, config: Config, files: MarkdownFiles) -> None:
        self.workspace = workspace
        self.config = config
        self.files = files
        self._pool = ThreadPoolExecutor(READER_THREADS, thread_name_prefix="oryxmem-reader")
        self._local = threading.local()
        self._services: list[MemoryService] = []
        self._lock = threading.Lock()

    def call(self, work: Callable[[MemoryService], Any]) -> Future[Any]:
        return self._pool.submit(self._run, work)

    def _run(self, work: Callable[[MemoryService], Any]) -> Any:
        service: MemoryService | None = getattr(self._local, "service", None)
        if service is None:
            service = MemoryService(self.workspace, self.config, files=self.files, in_daemon=True)
            self._local.service = service
            with self._lock:
                self._services.append(service)
        return work(service)

    def stop(self) -> None:
        """After the requests have drained: let the threads finish, close their services."""
        self._pool.shutdown(wait=True)
        with self._lock:
            for service in self._services:
                service.close()
            self._services.clear()
