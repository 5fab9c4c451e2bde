"""The agent hosts oryxmem plugs into, by name (what ``--client`` accepts). Kept apart from
install.py, whose TOML and diff libraries a command that only names a host never needs."""

from __future__ import annotations

MCP_CLIENTS = ("claude-code", "codex", "gemini", "cursor", "vscode")
HOOK_CLIENTS = ("claude-code", "codex", "gemini")
