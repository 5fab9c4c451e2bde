"""Every extension point, by name: memory backends, derived indexes, embedders.

A plugin is a Python package that declares, under an entry point group
(``oryxmem.backends``, ``oryxmem.indexes``, ``oryxmem.embedders``), a ``Plugin``: where
its implementation is (``"module:Class"``) and what comes with it (a backend's
background work in the daemon and the migrations of its own tables; whether an
index follows saves and which search arm it is). oryxmem's own are declared the same
way, in pyproject.toml and below (a test checks the two agree).

Knowing a built-in's name imports nothing, and reading the installed packages'
entry points (about 30 ms) happens only for a name that is not built in: a plugin
backend named in ``memory.backend``, a plugin index named in ``index.plugins``. The
implementation (the model, numpy, mem0) is imported only when it is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from oryxmem.errors import BackendUnavailableError

BACKENDS_GROUP = "oryxmem.backends"
INDEXES_GROUP = "oryxmem.indexes"
EMBEDDERS_GROUP = "oryxmem.embedders"


class Plugin(NamedTuple):
    """What a plugin declares for one name (a NamedTuple: every command reads the
    built-in ones, and it is the cheapest record to define)."""

    target: str  # "module:attribute": the implementation
    # A backend's: what the daemon runs beside it, a daemon.background thread made from
    # (its own MemoryService, the memory thread); and "module:attribute" of a sequence of
    # migrations of its own tables, applied by the one migration runner (store/db.py).
    work: str | None = None
    migrations: str | None = None
    # A backend's keys in config.toml: "module:attribute" of a sequence of
    # oryxmem.settings.Setting, each under a section named for the backend ("mem0.url").
    settings: str | None = None
    # An index's: whether a save takes its rows in at once (else the daemon's indexer,
    # or a search alone, fills it: a save never loads it), and the search arm it is
    # ("words": ranked by its words; "meaning": scored by similarity), if any.
    follows_saves: bool = True
    arm: str | None = None
    # What an index is made from: "rows" (memory_entries, through the change log: an
    # oryxmem.index.DerivedIndex) or "sessions" (the messages of past sessions: an
    # oryxmem.index.SessionIndex, whose arm is "episodes").
    source: str = "rows"
    extra: str | None = None  # the pip extra it needs, for the message when it is missing


def load_target(target: str, what: str, extra: str | None = None) -> Any:
    """The attribute ``"module:attribute"`` names, imported now."""
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        hint = f"; install it with: pip install 'oryxmem[{extra}]'" if extra else ""
        raise BackendUnavailableError(f"the {what} cannot be loaded ({error}){hint}") from None
    return getattr(module, attribute)


@dataclass
class Registry:
    """Named implementations of one kind of thing: built in, or from installed plugins."""

    kind: str  # what an entry is, for messages: "memory backend", "index", ...
    group: str  # the entry point group plugins declare theirs under
    builtins: Mapping[str, Plugin]
    _added: dict[str, Plugin] = field(default_factory=dict)
    _installed: dict[str, Any] | None = None  # name -> entry point, read once when needed

    def names(self) -> tuple[str, ...]:
        """The built-in names and those registered by hand (not the installed plugins':
        reading them costs every command; ``installed()`` does)."""
        return (*self.builtins, *self._added)

    def installed(self) -> tuple[str, ...]:
        """The names every installed package declares under this group."""
        return tuple(self._entry_points())

    def __contains__(self, name: object) -> bool:
        if name in self.builtins or name in self._added:
            return True
        return isinstance(name, str) and name in self._entry_points()

    def register(self, name: str, plugin: Plugin) -> None:
        """Add an implementation by hand (a script, or a test), as a plugin would."""
        if ":" not in plugin.target:
            raise ValueError(f"{plugin.target!r} is not 'module:attribute'")
        self._added[name] = plugin

    def plugin(self, name: str) -> Plugin:
        """What is declared for ``name``: built in, registered, or an installed plugin's."""
        found = self.builtins.get(name) or self._added.get(name)
        if found is not None:
            return found
        point = self._entry_points().get(name)
        if point is None:
            known = ", ".join(sorted({*self.names(), *self._entry_points()}))
            raise BackendUnavailableError(f"no {self.kind} {name!r}; known: {known}")
        try:
            declared = point.load()
        except Exception as error:  # a broken plugin is its own error, not ours
            raise BackendUnavailableError(
                f"the {self.kind} plugin {name!r} ({point.value}) cannot be loaded: {error}"
            ) from None
        if not isinstance(declared, Plugin):
            raise BackendUnavailableError(
                f"the {self.kind} plugin {name!r} ({point.value}) is not an oryxmem Plugin"
            )
        return declared

    def load(self, name: str) -> Any:
        """The implementation registered as ``name``, imported now."""
        declared = self.plugin(name)
        return load_target(declared.target, f"{self.kind} {name!r}", declared.extra)

    def _entry_points(self) -> dict[str, Any]:
        if self._installed is None:
            from importlib.metadata import entry_points

            self._installed = {
                point.name: point
                for point in entry_points(group=self.group)
                if point.name not in self.builtins
            }
        return self._installed


# --- the built-ins (also declared in pyproject.toml, as any plugin would be) -------------

# Where long-term memory is read from (memory.backend). Every save lands in MEMORY.md
# first, whatever the backend; the others are mirrors of it that answer reads.
MARKDOWN = Plugin("oryxmem.store.markdown:MarkdownMemoryStore")
SQLITE = Plugin("oryxmem.backends.sqlite:SqliteMemoryStore")
MEM0 = Plugin(
    "oryxmem.backends.mem0:Mem0MemoryStore",
    work="oryxmem.daemon.mem0sync:Mem0Sync",
    migrations="oryxmem.backends.mem0_tables:MIGRATIONS",
    settings="oryxmem.backends.mem0_settings:SETTINGS",
    extra="mem0",
)
BACKENDS = Registry(
    "memory backend",
    BACKENDS_GROUP,
    {"markdown": MARKDOWN, "sqlite": SQLITE, "mem0": MEM0},
)

# Derived indexes over the rows of memory_entries, each fed from memory_changes through
# its own cursor; see oryxmem/index/__init__.py.
KEYWORD = Plugin("oryxmem.index.keyword:KeywordIndex")
BM25 = Plugin("oryxmem.index.bm25:BM25Index", arm="words")
VECTORS = Plugin("oryxmem.index.vectors:VectorIndex", follows_saves=False, arm="meaning")
EPISODES = Plugin(
    "oryxmem.index.episodes:EpisodeIndex", follows_saves=False, arm="episodes", source="sessions"
)
INDEXES = Registry(
    "index",
    INDEXES_GROUP,
    {"keyword": KEYWORD, "bm25": BM25, "vectors": VECTORS, "episodes": EPISODES},
)

# What turns text into vectors for the semantic arm (recall.embedder; 'none' turns it off).
MINILM = Plugin("oryxmem.embed.minilm:MiniLM")
OPENAI_COMPATIBLE = Plugin("oryxmem.embed.remote:OpenAICompatible")
EMBEDDERS = Registry(
    "embedder",
    EMBEDDERS_GROUP,
    {"minilm": MINILM, "openai-compatible": OPENAI_COMPATIBLE},
)


def backend_work(name: str) -> Any | None:
    """The class of what the daemon runs beside the backend ``name``, if it has any."""
    declared = BACKENDS.plugin(name)
    if declared.work is None:
        return None
    return load_target(declared.work, f"background work of the backend {name!r}", declared.extra)


def backend_migrations(name: str) -> tuple[str, list[Any]] | None:
    """(the migration set's name, its steps) of the backend ``name``'s own tables."""
    declared = BACKENDS.plugin(name)
    if declared.migrations is None:
        return None
    steps = load_target(declared.migrations, f"tables of the backend {name!r}", declared.extra)
    return f"oryxmem.backend.{name}", list(steps)


def backend_settings(name: str) -> list[Any]:
    """The settings the backend ``name`` declares (oryxmem.settings.Setting each)."""
    declared = BACKENDS.plugin(name)
    if declared.settings is None:
        return []
    return list(load_target(declared.settings, f"settings of the backend {name!r}"))


def index_names(plugins: str) -> tuple[str, ...]:
    """The indexes a workspace uses: the built-in ones, and the plugins ``index.plugins``
    names (separated by commas or spaces)."""
    chosen = [name for name in plugins.replace(",", " ").split() if name]
    return (*INDEXES.names(), *(name for name in chosen if name not in INDEXES.names()))


def indexes_of(names: tuple[str, ...], source: str) -> tuple[str, ...]:
    """Those of ``names`` made from ``source`` ("rows" or "sessions")."""
    return tuple(name for name in names if INDEXES.plugin(name).source == source)


def arm_index(names: tuple[str, ...], arm: str) -> str | None:
    """The one index of ``names`` that is the search arm ``arm``; two are an error."""
    giving = [name for name in names if INDEXES.plugin(name).arm == arm]
    if len(giving) > 1:
        raise BackendUnavailableError(
            f"the indexes {', '.join(giving)} are all the {arm!r} arm of search; use one"
        )
    return giving[0] if giving else None
