"""Registering oryxmem with an agent host: its MCP server and its hooks, written into
the host's own config file, in the host's own format.

Every change is idempotent (installing twice changes nothing), touches only oryxmem's
own entry (other servers and hooks, and the comments of a TOML file, stay as they
were), and can be shown first as a diff (``dry_run``). A file that is not what its
host reads (JSON that is not an object, TOML that does not parse) is refused, with
nothing changed.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from oryxmem.errors import HostConfigError
from oryxmem.launch import oryxmem_command

NAME = "oryxmem"
SCOPES = ("project", "user")
HOOK_SECONDS = 10  # what the host waits at most; a hook gives up well before (hooks.py)


@dataclass(frozen=True)
class Change:
    path: Path
    before: str
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(
                self.before.splitlines(keepends=True),
                self.after.splitlines(keepends=True),
                f"{self.path} (now)",
                f"{self.path} (after)",
            )
        )

    def write(self) -> None:
        from oryxmem.fileio import atomic_write  # not for a dry run

        if self.changed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, self.after.encode("utf-8"))


def workspace_command(root: Path, *args: str) -> list[str]:
    """oryxmem on this workspace, as hosts run it: never shadowed by the folder they run
    it in (launch.py)."""
    return oryxmem_command("--root", str(root), *args)


def agent_args(agent: str | None) -> list[str]:
    return ["--agent", agent] if agent else []


# --- the config files ---------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as error:
        raise HostConfigError(f"cannot read {path}: {error}") from error


def _json_change(path: Path, edit: Callable[[dict[str, Any]], None]) -> Change:
    before = _read(path)
    try:
        data = json.loads(before) if before.strip() else {}
    except json.JSONDecodeError as error:
        raise HostConfigError(
            f"{path} is not plain JSON ({error}); fix it or add oryxmem by hand"
        ) from error
    if not isinstance(data, dict):
        raise HostConfigError(f"{path} holds {type(data).__name__}, not a JSON object")
    edit(data)
    after = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if before.strip() and json.loads(before) == data:
        after = before  # nothing to change: keep the user's layout byte for byte
    return Change(path, before, after)


def _toml_change(path: Path, edit: Callable[[tomlkit.TOMLDocument], None]) -> Change:
    before = _read(path)
    try:
        document = tomlkit.parse(before)
    except tomlkit.exceptions.TOMLKitError as error:
        raise HostConfigError(f"{path} is not valid TOML ({error})") from error
    edit(document)
    return Change(path, before, tomlkit.dumps(document))


def _object(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = data.setdefault(key, {})
    if not isinstance(value, dict):
        raise HostConfigError(f"{path}: {key!r} is not an object")
    return value


# --- MCP ----------------------------------------------------------------------------


def mcp_config_path(client: str, scope: str, root: Path, home: Path) -> Path:
    project = {
        "claude-code": root / ".mcp.json",
        "codex": root / ".codex" / "config.toml",
        "gemini": root / ".gemini" / "settings.json",
        "cursor": root / ".cursor" / "mcp.json",
        "vscode": root / ".vscode" / "mcp.json",
    }
    user = {
        "claude-code": home / ".claude.json",
        "codex": home / ".codex" / "config.toml",
        "gemini": home / ".gemini" / "settings.json",
        "cursor": home / ".cursor" / "mcp.json",
        "vscode": home / ".config" / "Code" / "User" / "mcp.json",
    }
    return (project if scope == "project" else user)[client]


def mcp_change(client: str, scope: str, root: Path, agent: str | None, home: Path) -> Change:
    """The change that registers ``oryxmem mcp`` with this host."""
    path = mcp_config_path(client, scope, root, home)
    command, *args = workspace_command(root, "mcp", *agent_args(agent))
    if client == "codex":

        def edit_toml(document: tomlkit.TOMLDocument) -> None:
            servers = document.get("mcp_servers")
            if servers is None:
                servers = document["mcp_servers"] = tomlkit.table(is_super_table=True)
            if not isinstance(servers, dict):
                raise HostConfigError(f"{path}: mcp_servers is not a table")
            entry = tomlkit.table()
            entry["command"] = command
            entry["args"] = args
            current = servers.get(NAME)
            if current is None or dict(current) != {"command": command, "args": args}:
                servers[NAME] = entry

        return _toml_change(path, edit_toml)

    key = "servers" if client == "vscode" else "mcpServers"
    entry: dict[str, Any] = {"command": command, "args": args}
    if client in ("vscode", "claude-code"):
        entry = {"type": "stdio", **entry}

    def edit_json(data: dict[str, Any]) -> None:
        _object(data, key, path)[NAME] = entry

    return _json_change(path, edit_json)


# What a host needs before it starts a server (or runs hooks) that a project's own files
# declare: it asks once whether you trust the project. A user-scope entry needs nothing.
TRUST_STEPS = {
    "claude-code": "Claude Code asks once to approve project servers: start `claude` here and"
    " approve 'oryxmem' (or later in /mcp); until then `claude mcp list` says Pending approval",
    "gemini": "Gemini CLI (with folder trust on) reads a project's settings once you trust the"
    " folder: start `gemini` here and choose Trust folder (or /permissions)",
    "codex": "Codex reads .codex/ only in a trusted project: start `codex` here and trust it"
    ' (it writes trust_level = "trusted" for this folder in ~/.codex/config.toml)',
}


def trust_step(client: str, scope: str) -> str | None:
    """The one-time step the host needs before it uses a project-scope registration."""
    return TRUST_STEPS.get(client) if scope == "project" else None


# --- hooks --------------------------------------------------------------------------

# event in the host -> oryxmem hook's event
HOOK_EVENTS = {
    "claude-code": {"SessionStart": "session-start", "UserPromptSubmit": "prompt", "Stop": "stop"},
    "codex": {"SessionStart": "session-start", "UserPromptSubmit": "prompt", "Stop": "stop"},
    "gemini": {"SessionStart": "session-start", "BeforeAgent": "prompt", "AfterAgent": "stop"},
}


def hooks_config_path(client: str, scope: str, root: Path, home: Path) -> Path:
    base = root if scope == "project" else home
    return {
        "claude-code": base / ".claude" / "settings.json",
        "codex": base / ".codex" / "hooks.json",
        "gemini": base / ".gemini" / "settings.json",
    }[client]


def is_ours(handler: Any) -> bool:
    """An oryxmem hook, as this version or an older one registered it (``python -m
    oryxmem``, which a project's own oryxmem.py could shadow: replaced on install)."""
    command = handler.get("command", "") if isinstance(handler, dict) else ""
    return isinstance(command, str) and " -m oryxmem " in command and " hook " in command


def hooks_change(client: str, scope: str, root: Path, agent: str | None, home: Path) -> Change:
    """The change that makes the host run ``oryxmem hook`` at its session start, on each
    prompt and when the agent stops; an older oryxmem hook is replaced, others kept."""
    path = hooks_config_path(client, scope, root, home)

    def edit(data: dict[str, Any]) -> None:
        hooks = _object(data, "hooks", path)
        for host_event, event in HOOK_EVENTS[client].items():
            groups = hooks.setdefault(host_event, [])
            if not isinstance(groups, list):
                raise HostConfigError(f"{path}: hooks.{host_event} is not a list")
            kept = []
            for group in groups:
                handlers = group.get("hooks") if isinstance(group, dict) else None
                if isinstance(handlers, list) and any(is_ours(h) for h in handlers):
                    group = {**group, "hooks": [h for h in handlers if not is_ours(h)]}
                    if not group["hooks"]:
                        continue
                kept.append(group)
            command = shlex.join(
                workspace_command(root, "hook", event, "--client", client, *agent_args(agent))
            )
            handler: dict[str, Any] = {"type": "command", "command": command}
            if client == "gemini":
                handler = {"name": f"oryxmem-{event}", **handler, "timeout": HOOK_SECONDS * 1000}
            else:
                handler["timeout"] = HOOK_SECONDS
            kept.append({"hooks": [handler]})
            hooks[host_event] = kept

    return _json_change(path, edit)
