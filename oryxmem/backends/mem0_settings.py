"""The mem0 backend's keys in config.toml (read without importing mem0)."""

from __future__ import annotations

from oryxmem.settings import Setting, one_of, positive

SETTINGS = (
    Setting(
        "mem0.transport",
        "embedded",
        str,
        "with memory.backend = mem0: embedded (a mem0.Memory in the daemon, its store under"
        " .oryxos/mem0/) or http (a self-hosted mem0 server at mem0.url)",
        one_of("embedded", "http"),
        restart=True,
    ),
    Setting(
        "mem0.url",
        "",
        str,
        "for mem0.transport = http: the server, e.g. http://127.0.0.1:8888",
        restart=True,
    ),
    Setting(
        "mem0.api_key_env",
        "",
        str,
        "for mem0.transport = http: the environment variable that holds its API key, if any",
        restart=True,
    ),
    Setting(
        "mem0.poll_seconds",
        1,
        int,
        "how often the daemon looks for what other mem0 clients added or deleted",
        positive,
        restart=True,
    ),
)
