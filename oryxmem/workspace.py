"""Where things live: the workspace root, its files, and which agent names are safe.

The root is found like git finds ``.git``: an explicit path, else
``ORYXMEM_ROOT``, else the nearest parent of the working directory that holds
``.oryxos/``.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from oryxmem.config import Config
from oryxmem.errors import InvalidConfigError, WorkspaceNotFoundError

OS_DIR = ".oryxos"
MEMORY_FILE = "MEMORY.md"
GLOBAL_AGENT = ""
MAX_AGENT_NAME_CHARS = 64
WORKSPACE_HEADER = "X-OryxOS-Workspace"  # the root a client means, percent-encoded
# In UTF-8: the folder, its lock file (agent-<name>.lock) and every temp file beside
# them stay far under the 255 bytes a file name may have.
MAX_AGENT_NAME_BYTES = 128
# Letters that show nothing (Hangul fillers): a name of them would look empty.
INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
SUN_PATH_MAX = 107  # sockaddr_un.sun_path holds 108 bytes, one of them the final NUL
GITIGNORE_TEXT = (
    "# Written by oryxmem init: derived and runtime files.\noryxos.db*\nrun/\nmem0/\n*.tmp\n"
)


@dataclass(frozen=True)
class Workspace:
    """The paths of one workspace, rooted at the folder that holds ``.oryxos/``."""

    root: Path

    @cached_property
    def os_dir(self) -> Path:
        return self.root / OS_DIR

    @cached_property
    def agents_dir(self) -> Path:
        return self.os_dir / "agents"

    @cached_property
    def agents_dir_str(self) -> str:
        return str(self.agents_dir)

    @cached_property
    def global_memory_dir(self) -> Path:
        return self.os_dir / "memory"

    @cached_property
    def config_path(self) -> Path:
        return self.os_dir / "config.toml"

    @cached_property
    def db_path(self) -> Path:
        return self.os_dir / "oryxos.db"

    @cached_property
    def run_dir(self) -> Path:
        return self.os_dir / "run"

    @cached_property
    def locks_dir(self) -> Path:
        return self.run_dir / "locks"

    @property
    def workspace_id(self) -> str:
        """A short id for this workspace, stable while it stays where it is."""
        return hashlib.blake2b(str(self.root).encode(), digest_size=6).hexdigest()

    def memory_dir(self, agent: str) -> Path:
        return self.global_memory_dir if agent == GLOBAL_AGENT else self.agents_dir / agent

    def memory_path(self, agent: str) -> Path:
        return self.memory_dir(agent) / MEMORY_FILE

    def tombstones_path(self, agent: str) -> Path:
        """What was removed from an agent's MEMORY.md (store/tombstones.py); tracked."""
        return self.memory_dir(agent) / "TOMBSTONES"

    def lock_path(self, agent: str) -> Path:
        """The lock (and append journal) of an agent's file; run/ is git-ignored."""
        name = "global" if agent == GLOBAL_AGENT else f"agent-{agent}"
        return self.locks_dir / f"{name}.lock"

    def agent_names(self) -> list[str]:
        """The safe agent directories that exist, sorted."""
        if not self.agents_dir.is_dir():
            return []
        names = []
        for child in self.agents_dir.iterdir():
            if check_agent_name(self, child.name) is None:
                names.append(child.name)
        return sorted(names)


def find_root(explicit: str | os.PathLike[str] | None = None, cwd: Path | None = None) -> Path:
    """The workspace root, or WorkspaceNotFoundError saying where we looked."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    from_env = os.environ.get("ORYXMEM_ROOT")
    if from_env:
        return Path(from_env).expanduser().resolve()
    start = (cwd or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / OS_DIR).is_dir():
            return folder
    raise WorkspaceNotFoundError(
        f"no {OS_DIR}/ in {start} or any parent; run 'oryxmem init' or pass --root"
    )


def open_workspace(explicit: str | os.PathLike[str] | None = None) -> Workspace:
    root = find_root(explicit)
    if not (root / OS_DIR).is_dir():
        raise WorkspaceNotFoundError(f"{root} has no {OS_DIR}/ folder; run 'oryxmem init' there")
    return Workspace(root)


# --- the daemon's socket ------------------------------------------------------


def socket_path(workspace: Workspace, config: Config) -> Path:
    """ORYXMEM_SOCKET, else daemon.socket, else $XDG_RUNTIME_DIR/oryxmem/<id>.sock."""
    explicit = os.environ.get("ORYXMEM_SOCKET") or config.socket
    if explicit:
        path = Path(explicit).expanduser()
    else:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        folder = Path(runtime) / "oryxmem" if runtime else Path(f"/tmp/oryxmem-{os.getuid()}")
        path = folder / f"{workspace.workspace_id}.sock"
    check_length(path)
    return path


def check_length(path: Path) -> None:
    size = len(os.fsencode(path))
    if size > SUN_PATH_MAX:
        raise InvalidConfigError(
            f"the socket path {path} is {size} bytes; Unix sockets allow {SUN_PATH_MAX}."
            " Set ORYXMEM_SOCKET or daemon.socket to a shorter path"
        )


# --- agent names ------------------------------------------------------------


_ASCII_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # the usual names, without a lookup per character


def _is_name_char(ch: str) -> bool:
    if ch in "-_.":
        return True
    category = unicodedata.category(ch)
    return category.startswith("L") or category == "Nd"


def agent_name_problem(name: str) -> str | None:
    """Why this string is not a safe agent name, or None when it is one."""
    if not name:
        return "the name is empty"
    if len(name) > MAX_AGENT_NAME_CHARS:
        return f"the name is longer than {MAX_AGENT_NAME_CHARS} characters"
    if name.startswith("."):
        return "the name starts with '.'"
    if _ASCII_NAME.fullmatch(name):
        return None
    invisible = next((ch for ch in name if ch in INVISIBLE_LETTERS), None)
    if invisible is not None:
        return f"the name holds {invisible!r} (U+{ord(invisible):04X}), which shows nothing"
    # One spelling per look: a name that NFKC would change (decomposed Hangul or
    # accents, the Kelvin sign, the Angstrom sign, the ligature fi) could stand beside
    # the same-looking name in its usual form as a second agent.
    usual = unicodedata.normalize("NFKC", name)
    if usual != name:
        return f"the name is not in its usual form (NFKC); write it as {usual!r}"
    bad = next((ch for ch in name if not _is_name_char(ch)), None)
    if bad is not None:
        allowed = "letters, digits, '-', '_', '.'"
        return f"the name holds {bad!r} (U+{ord(bad):04X}); allowed are {allowed}"
    if len(name.encode("utf-8")) > MAX_AGENT_NAME_BYTES:
        return f"the name is longer than {MAX_AGENT_NAME_BYTES} bytes in UTF-8"
    return None


def check_agent_name(workspace: Workspace, name: str) -> str | None:
    """Why this agent may not be used in this workspace, or None when it may.

    A valid name is one path segment (no '/', not '.' or '..'), so the only way
    out of .oryxos/agents/ is a symbolic link: one lstat of the directory and one
    of its MEMORY.md tell, no path resolution needed (a rescan checks every agent).
    """
    return agent_name_problem(name) or agent_folder_problem(workspace, name)


def agent_folder_problem(workspace: Workspace, name: str) -> str | None:
    """The filesystem half of check_agent_name, for a name already known to be valid."""
    agent_dir = os.path.join(workspace.agents_dir_str, name)  # plain strings: on every call
    try:
        info = os.lstat(agent_dir)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return "its directory is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "its path exists and is not a directory"
    try:
        if stat.S_ISLNK(os.lstat(os.path.join(agent_dir, MEMORY_FILE)).st_mode):
            return "its MEMORY.md is a symbolic link"
    except FileNotFoundError:
        pass
    return None


@dataclass(frozen=True)
class AgentRef:
    """Which memory file a call was served from, and whether it fell back."""

    requested: str | None
    agent: str  # '' = the global file
    fallback_reason: str | None = None

    @property
    def fell_back(self) -> bool:
        return self.fallback_reason is not None

    def describe(self) -> str:
        return f"agent {self.agent!r}" if self.agent else "the global memory file"


def resolve_agent(workspace: Workspace, requested: str | None) -> AgentRef:
    """The agent to serve; an unsafe name falls back to the global file, saying why."""
    if requested is None or requested == GLOBAL_AGENT:
        return AgentRef(requested, GLOBAL_AGENT)
    problem = check_agent_name(workspace, requested)
    if problem:
        return AgentRef(requested, GLOBAL_AGENT, f"unsafe agent name {requested!r}: {problem}")
    return AgentRef(requested, requested)


def init_workspace(root: Path, *, config_text: str) -> list[Path]:
    """Create the workspace skeleton; never overwrite what a user already has."""
    workspace = Workspace(root.resolve())
    created: list[Path] = []
    for folder in (workspace.agents_dir, workspace.global_memory_dir, workspace.run_dir):
        if not folder.exists():
            folder.mkdir(parents=True)
            created.append(folder)
    files = {
        workspace.config_path: config_text,
        workspace.os_dir / ".gitignore": GITIGNORE_TEXT,
    }
    for path, text in files.items():
        if not path.exists():
            path.write_text(text, encoding="utf-8")
            created.append(path)
    return created
