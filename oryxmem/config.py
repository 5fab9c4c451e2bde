"""``.oryxos/config.toml``, read and written with tomlkit so comments survive.

Every key has a default, a type and a check; ``get`` and ``set`` speak in
dotted keys (``memory.archival_limit_chars``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oryxmem.errors import InvalidConfigError
from oryxmem.fileio import atomic_write
from oryxmem.registry import BACKENDS, EMBEDDERS, Registry, backend_settings
from oryxmem.settings import Setting, not_negative, one_of, positive


def _known(registry: Registry) -> Callable[[Any], str | None]:
    """A check that the value names one of the registry's (built in, or a plugin's)."""

    def check(value: Any) -> str | None:
        if value in registry:
            return None
        return f"must be one of {', '.join(registry.names())}, or an installed plugin's"

    return check


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "memory.backend",
        "markdown",
        str,
        "what answers reads of long-term memory (saves always land in MEMORY.md first):"
        f" {', '.join(BACKENDS.names())}, or a plugin's (entry points {BACKENDS.group})",
        _known(BACKENDS),
        restart=True,
    ),
    Setting(
        "memory.archival_limit_chars",
        4000,
        int,
        "characters of the newest archival entries injected into a prompt",
        positive,
    ),
    Setting(
        "memory.footprint_max_chars",
        200,
        int,
        "each side of an automatic footprint line is cut to this many characters",
        positive,
    ),
    Setting(
        "memory.max_history_turns",
        20,
        int,
        "session turns returned as history; a turn starts at a user message",
        positive,
    ),
    Setting(
        "memory.max_content_chars",
        32768,
        int,
        "the longest content one entry may hold",
        positive,
    ),
    Setting(
        "memory.timezone",
        "local",
        str,
        "entry timestamps in local wall-clock time or UTC",
        one_of("local", "UTC"),
    ),
    Setting(
        "memory.secrets",
        "refuse",
        str,
        "content that looks like a credential (found by detect-secrets): refuse the save,"
        " redact the secret (replaced by a marker), or allow it",
        one_of("refuse", "redact", "allow"),
    ),
    Setting(
        "memory.recall",
        "hybrid",
        str,
        "what recall and the recall_memory tool answer: hybrid (ranked by meaning and words,"
        " best first) or keyword (every archival entry holding the keyword, oldest first)",
        one_of("hybrid", "keyword"),
    ),
    Setting(
        "recall.limit",
        10,
        int,
        "entries a hybrid recall or a search returns unless asked for another number",
        positive,
    ),
    Setting(
        "recall.embedder",
        "minilm",
        str,
        "what embeds memories for search by meaning: minilm (offline, built in),"
        " openai-compatible (the /v1/embeddings of recall.embedder_url) or none",
        lambda value: None if value == "none" else _known(EMBEDDERS)(value),
        restart=True,
    ),
    Setting(
        "index.plugins",
        "",
        str,
        "derived indexes from installed plugins to keep and search, by name (entry points"
        " oryxmem.indexes), separated by commas; the built-in ones are always kept",
        restart=True,
    ),
    Setting(
        "recall.embedder_threads",
        1,
        int,
        "processor threads one run of the built-in embedder may use (a text runs alone:"
        " on 2 cores, 1 embedded a backlog faster than 2)",
        positive,
        restart=True,
    ),
    Setting(
        "recall.embedder_url",
        "",
        str,
        "for openai-compatible: the server, e.g. http://127.0.0.1:11434 (ollama)",
        restart=True,
    ),
    Setting(
        "recall.embedder_model",
        "",
        str,
        "for openai-compatible: the model name to ask for",
        restart=True,
    ),
    Setting(
        "recall.embedder_key_env",
        "",
        str,
        "for openai-compatible: the environment variable that holds its API key, if any",
        restart=True,
    ),
    Setting(
        "episodic.max_chars",
        1500,
        int,
        "characters of rounds of other sessions a memory block built for a query holds",
        positive,
    ),
    Setting(
        "summarize.digest_percent",
        20,
        int,
        "percent of the archival budget a block built for a query gives to the digest of"
        " the older entries it cannot show whole (0: none)",
        lambda value: None if 0 <= value <= 50 else "must be from 0 to 50",
    ),
    Setting(
        "summarize.llm_url",
        "",
        str,
        "an OpenAI-compatible chat server that writes the digest, e.g. http://127.0.0.1:11434"
        " (ollama); empty: the digest is made offline",
    ),
    Setting("summarize.llm_model", "", str, "the model name to ask summarize.llm_url for"),
    Setting(
        "summarize.llm_key_env",
        "",
        str,
        "the environment variable that holds summarize.llm_url's API key, if any",
    ),
    Setting(
        "summarize.llm_timeout_seconds",
        5,
        int,
        "how long a block waits for the model's digest before it uses the offline one",
        positive,
    ),
    Setting(
        "prompt.bootstrap_files",
        "USER.md",
        str,
        "files under .oryxos/ that a prompt's first block holds after AGENT.md, comma-separated"
        " (read only; a missing one is left out)",
    ),
    Setting(
        "daemon.socket",
        "",
        str,
        "socket path; empty = $XDG_RUNTIME_DIR/oryxmem/<id>.sock",
        restart=True,
    ),
    Setting(
        "daemon.autostart",
        True,
        bool,
        "a command that needs the embedding model (recall, search, a block for a query, the"
        " hooks, the MCP server) starts a daemon in the background when none runs, and uses"
        " it from the next call on (off when $CI is set or ORYXMEM_AUTOSTART=0)",
    ),
    Setting(
        "daemon.autostart_idle_minutes",
        60,
        int,
        "a daemon that was started in the background stops after this many minutes without"
        " a request (0: never); one you start yourself runs until stopped",
        not_negative,
    ),
    Setting(
        "daemon.client_timeout_seconds",
        10,
        int,
        "a connection that sends no complete request for this long is closed",
        positive,
        restart=True,
    ),
    Setting(
        "mcp.allow_forget",
        False,
        bool,
        "offer agents the forget_memory tool over MCP (it takes entries out for good)",
    ),
    Setting(
        "sync.git.remote",
        "",
        str,
        "the git remote (a name or a URL) the daemon commits, pulls and pushes memory"
        " through; empty: no git sync",
        restart=True,
    ),
    Setting(
        "sync.git.interval_seconds",
        30,
        int,
        "seconds between the daemon's git sync passes (commit, fetch, merge, push)",
        positive,
    ),
    Setting(
        "sync.git.branch",
        "",
        str,
        "the branch git sync pulls and pushes; empty: the one checked out",
    ),
    Setting(
        "sync.stale_buffer_seconds",
        600,
        int,
        "an entry oryxmem wrote (a save, a row another program inserted, a put-back) that a"
        " file written from an older editor buffer lacks is put back, as often as that"
        " happens, while its last write is at most this old (0: never)",
        not_negative,
    ),
)
_BY_KEY = {setting.key: setting for setting in SETTINGS}


def plugin_settings(backend: str) -> tuple[Setting, ...]:
    """The keys a backend declares (mem0's; a plugin's), each under ``[backend]``."""
    declared = tuple(backend_settings(backend))
    for item in declared:
        if not isinstance(item, Setting) or not item.key.startswith(f"{backend}."):
            raise InvalidConfigError(
                f"the backend {backend!r} declares {item!r}: not a Setting under [{backend}]"
            )
    return declared


def all_settings(backend: str | None = None) -> tuple[Setting, ...]:
    """oryxmem's keys, every built-in backend's, and those of ``backend`` (a plugin)."""
    names = [*BACKENDS.names(), *([backend] if backend and backend not in BACKENDS.names() else [])]
    return SETTINGS + tuple(item for name in names for item in plugin_settings(name))


def setting(key: str) -> Setting:
    """The key's Setting: oryxmem's own, or one the backend named by its section declares
    (a key of no known backend's section reads no installed package's entry points)."""
    found = _BY_KEY.get(key)
    if found is not None:
        return found
    section = key.partition(".")[0]
    if section not in _SECTIONS and section in BACKENDS:
        for item in plugin_settings(section):
            if item.key == key:
                return item
    known = ", ".join(item.key for item in all_settings())
    raise InvalidConfigError(f"unknown config key {key!r}; known keys: {known}")


_SECTIONS = {item.key.partition(".")[0] for item in SETTINGS}


def default_config_text() -> str:
    """The commented config.toml that ``oryxmem init`` writes."""
    import tomlkit
    from tomlkit.items import Table

    doc = tomlkit.document()
    doc.add(
        tomlkit.comment("oryxmem configuration. 'oryxmem config set KEY VALUE' keeps comments.")
    )
    tables: dict[str, Table] = {}
    for item in all_settings():
        section, name = item.key.split(".", 1)
        if section not in tables:
            tables[section] = tomlkit.table()
            doc.add(tomlkit.nl())
            doc.add(section, tables[section])
        tables[section].add(tomlkit.comment(item.help))
        tables[section].add(name, item.default)
    return tomlkit.dumps(doc)


def _check_value(item: Setting, value: Any) -> Any:
    if item.kind is bool and not isinstance(value, bool):
        raise InvalidConfigError(f"{item.key} must be true or false, not {value!r}")
    if item.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidConfigError(f"{item.key} must be a whole number, not {value!r}")
    if item.kind is str and not isinstance(value, str):
        raise InvalidConfigError(f"{item.key} must be a string, not {value!r}")
    problem = item.check(value)
    if problem:
        raise InvalidConfigError(f"{item.key} {problem} (got {value!r})")
    return value


def parse_value(key: str, text: str) -> Any:
    """A value typed on a command line, converted to the key's type."""
    item = setting(key)
    if item.kind is bool:
        words = {"true": True, "on": True, "yes": True, "1": True}
        words |= {"false": False, "off": False, "no": False, "0": False}
        if text.strip().lower() not in words:
            raise InvalidConfigError(f"{key} must be true or false, not {text!r}")
        value: Any = words[text.strip().lower()]
    elif item.kind is int:
        try:
            value = int(text)
        except ValueError:
            raise InvalidConfigError(f"{key} must be a whole number, not {text!r}") from None
    else:
        value = text
    return _check_value(item, value)


def _flat(prefix: str, table: dict[str, Any]) -> list[tuple[str, Any]]:
    """Dotted keys of a table: ``[sync.git] remote`` and ``[sync] "git.remote"`` alike."""
    found = []
    for name, value in table.items():
        if isinstance(value, dict):
            found += _flat(f"{prefix}.{name}", value)
        else:
            found.append((f"{prefix}.{name}", value))
    return found


class Config:
    """The settings of one workspace; missing keys take their defaults."""

    def __init__(self, path: Path | None, values: dict[str, Any]) -> None:
        self.path = path
        self._values = values

    @classmethod
    def load(cls, path: Path) -> Config:
        """Read and check config.toml (with the stdlib's tomllib: it is read on every call)."""
        if not path.exists():
            return cls(path, {})
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as error:
            raise InvalidConfigError(f"{path} is not valid TOML: {error}") from None
        values: dict[str, Any] = {}
        for section, table in doc.items():
            if not isinstance(table, dict):
                raise InvalidConfigError(f"{path}: {section!r} must be a [table]")
            for key, value in _flat(section, table):
                values[key] = _check_value(setting(key), value)
        return cls(path, values)

    @classmethod
    def defaults(cls) -> Config:
        return cls(None, {})

    def get(self, key: str) -> Any:
        return self._values.get(key, setting(key).default)

    def differing(self, other: Config) -> list[Setting]:
        """The settings whose values differ between this configuration and another."""
        every = all_settings(self.backend)
        return [item for item in every if self.get(item.key) != other.get(item.key)]

    def take_live(self, fresh: Config) -> tuple[list[Setting], list[Setting]]:
        """Take the settings of ``fresh`` (config.toml read again) that can change while
        running; keep the others. Returns (taken, kept until a restart). Every reader of
        this object sees the new values at its next ``get``."""
        changed = self.differing(fresh)
        taken = [item for item in changed if not item.restart]
        values = dict(self._values)
        for item in taken:
            values[item.key] = fresh.get(item.key)
        self._values = values  # one assignment: a reader sees the old dict or the new
        return taken, [item for item in changed if item.restart]

    def as_dict(self) -> dict[str, Any]:
        return {item.key: self.get(item.key) for item in all_settings(self.backend)}

    @property
    def backend(self) -> str:
        return str(self.get("memory.backend"))

    @property
    def archival_limit_chars(self) -> int:
        return int(self.get("memory.archival_limit_chars"))

    @property
    def footprint_max_chars(self) -> int:
        return int(self.get("memory.footprint_max_chars"))

    @property
    def episodic_max_chars(self) -> int:
        return int(self.get("episodic.max_chars"))

    @property
    def bootstrap_files(self) -> list[str]:
        return [
            name.strip()
            for name in str(self.get("prompt.bootstrap_files")).split(",")
            if name.strip()
        ]

    @property
    def max_history_turns(self) -> int:
        return int(self.get("memory.max_history_turns"))

    @property
    def max_content_chars(self) -> int:
        return int(self.get("memory.max_content_chars"))

    @property
    def socket(self) -> str:
        return str(self.get("daemon.socket"))

    @property
    def timezone(self) -> str:
        return str(self.get("memory.timezone"))

    @property
    def stale_buffer_seconds(self) -> int:
        return int(self.get("sync.stale_buffer_seconds"))


def set_value(path: Path, key: str, text: str) -> Any:
    """Set one key in config.toml, keeping every comment and the layout around it."""
    import tomlkit
    import tomlkit.exceptions

    value = parse_value(key, text)
    try:
        doc = (
            tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
        )
    except tomlkit.exceptions.ParseError as error:
        raise InvalidConfigError(f"{path} is not valid TOML: {error}") from None
    section, name = key.split(".", 1)
    table = doc.get(section)
    if table is None:
        table = tomlkit.table()
        doc.add(section, table)
    table[name] = value
    atomic_write(path, tomlkit.dumps(doc).encode("utf-8"))
    return value
