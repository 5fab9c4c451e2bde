"""`oryxmem install-systemd`: the user units of systemd/ rendered for one workspace."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from oryxmem.config import Config
from oryxmem.launch import oryxmem_command
from oryxmem.workspace import Workspace, socket_path


@dataclass(frozen=True)
class Units:
    name: str  # oryxmem-<workspace id>
    service: Path
    socket: Path


def user_unit_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"


def template(name: str) -> str:
    """A unit template of systemd/ (shipped in the package as oryxmem/daemon/units)."""
    return resources.files("oryxmem.daemon").joinpath("units", name).read_text(encoding="utf-8")


def render(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def install(workspace: Workspace, config: Config, unit_dir: Path | None = None) -> Units:
    """Write oryxmem-<id>.socket and .service for this workspace; returns their paths."""
    folder = unit_dir or user_unit_dir()
    folder.mkdir(parents=True, exist_ok=True)
    name = f"oryxmem-{workspace.workspace_id}"
    sock = socket_path(workspace, config)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    listen = str(sock)
    if runtime and sock.is_relative_to(runtime):
        listen = "%t/" + str(sock.relative_to(runtime))  # systemd's own $XDG_RUNTIME_DIR
    values = {
        "NAME": name,
        "ROOT": str(workspace.root),
        "COMMAND": shlex.join(oryxmem_command("--root", str(workspace.root), "daemon")),
        "SOCKET": listen,
    }
    units = Units(name, folder / f"{name}.service", folder / f"{name}.socket")
    units.service.write_text(render(template("oryxmem.service"), values), encoding="utf-8")
    units.socket.write_text(render(template("oryxmem.socket"), values), encoding="utf-8")
    return units
