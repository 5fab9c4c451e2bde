"""Every extension point, registered by name in one place: backends, indexes, strategies.

An entry names the class that implements it as ``"module:Class"``, so knowing the
names (config checks its values against them) imports nothing: the embedding
model, numpy or mem0 are imported only when an entry is used. A built-in is
registered exactly as an addition would be: one file, and one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oryxmem.errors import BackendUnavailableError


@dataclass(frozen=True)
class Registry:
    """Named implementations of one kind of thing."""

    kind: str  # what an entry is, for messages: "memory backend", "index", ...
    entries: dict[str, str]  # name -> "module:attribute"
    # name -> the pip extra it needs, for the message when it is not installed
    extras: Mapping[str, str] = field(default_factory=dict)

    def names(self) -> tuple[str, ...]:
        return tuple(self.entries)

    def register(self, name: str, target: str) -> None:
        """Add an implementation: what the lines below do for the built-in ones (a plugin,
        or a script, may call it before the first MemoryService is made)."""
        if ":" not in target:
            raise ValueError(f"{target!r} is not 'module:attribute'")
        self.entries[name] = target

    def load(self, name: str) -> Any:
        """The implementation registered as ``name``, imported now."""
        try:
            target = self.entries[name]
        except KeyError:
            known = ", ".join(self.entries)
            raise BackendUnavailableError(f"no {self.kind} {name!r}; known: {known}") from None
        module_name, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            extra = self.extras.get(name)
            hint = f"; install it with: pip install 'oryxmem[{extra}]'" if extra else ""
            raise BackendUnavailableError(
                f"the {self.kind} {name!r} cannot be loaded ({error}){hint}"
            ) from None
        return getattr(module, attribute)


# Where long-term memory is read from (memory.backend). Every save lands in MEMORY.md
# first, whatever the backend; the others are mirrors of it that answer reads.
BACKENDS = Registry(
    "memory backend",
    {
        "markdown": "oryxmem.store.markdown:MarkdownMemoryStore",
        "sqlite": "oryxmem.backends.sqlite:SqliteMemoryStore",
        "mem0": "oryxmem.backends.mem0:Mem0MemoryStore",
    },
    extras={"mem0": "mem0"},
)

# What the daemon runs beside a backend that needs it, by backend name: a daemon.background
# thread made from (its own MemoryService, the memory thread).
BACKEND_WORK = Registry(
    "backend's background work",
    {"mem0": "oryxmem.daemon.mem0sync:Mem0Sync"},
    extras={"mem0": "mem0"},
)

# Derived indexes over the rows of memory_entries (DESIGN section 11), each fed from
# memory_changes through its own cursor; see oryxmem/index/__init__.py.
INDEXES = Registry(
    "index",
    {
        "keyword": "oryxmem.index.keyword:KeywordIndex",
        "bm25": "oryxmem.index.bm25:BM25Index",
        "vectors": "oryxmem.index.vectors:VectorIndex",
    },
)

# The indexes that do not take a save's rows in with the save (the daemon's indexer, or a
# search alone, fills them): a save loads only the others, never the model or numpy.
SLOW_INDEXES = frozenset({"vectors"})

# What turns text into vectors for the semantic arm (recall.embedder; 'none' turns it off).
EMBEDDERS = Registry(
    "embedder",
    {
        "minilm": "oryxmem.embed.minilm:MiniLM",
        "openai-compatible": "oryxmem.embed.remote:OpenAICompatible",
    },
)
