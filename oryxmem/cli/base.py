"""What every command shares: the Context a command reaches the workspace through, the
root group, and the helpers that print memory text safely on a terminal."""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Callable
from typing import Any, TypeVar

import click

from oryxmem import __version__
from oryxmem.reach import Reach
from oryxmem.workspace import open_workspace, resolve_agent

# Imported where a command needs them, not here: a call the daemon answers imports
# neither the stores nor SQLite (oryxmem.service, oryxmem.store.rows, oryxmem.fileio).

F = TypeVar("F", bound=Callable[..., Any])
EXIT_ERROR = 1
EXIT_INTERNAL = 70


class Context(Reach):
    """The workspace a command reaches (reach.py: the daemon, else the stores)."""

    def agent(self, name: str | None) -> str | None:
        """The agent to use: an unsafe name falls back to the global file, with a warning,
        the same with or without a daemon (whose URL routes refuse unsafe names)."""
        if name is None:
            return None
        ref = resolve_agent(open_workspace(self.root), name)
        if ref.fell_back:
            click.echo(
                f"oryxmem: warning: {ref.fallback_reason}; using the global memory file", err=True
            )
            return None
        return name


pass_context = click.make_pass_decorator(Context)


def describe(agent: str) -> str:
    return f"agent {agent!r}" if agent else "the global memory file"


def display_width(text: str) -> int:
    """Terminal columns: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int) -> str:
    return text + " " * max(width - display_width(text), 0)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")(func)


def agent_option(func: F) -> F:
    return click.option(
        "--agent", "-a", default=None, metavar="NAME", help="Agent name (omit for the global file)."
    )(func)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "terminal_width": 88})
@click.version_option(__version__, prog_name="oryxmem")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Workspace root (default: $ORYXMEM_ROOT, else the nearest parent holding .oryxos/).",
)
@click.pass_context
def cli(ctx: click.Context, root: str | None) -> None:
    """oryxmem: long-term memory for AI agents, kept in MEMORY.md files."""
    ctx.obj = Context(root)
    ctx.call_on_close(ctx.obj.close)


class NoBar:
    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, steps: int) -> None:
        return None


class Progress:
    """A bar of done out of a total that may grow, on stderr when it is a terminal."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown
        self._bar: Any = None

    def __enter__(self) -> Progress:
        return self

    def set(self, done: int, total: int) -> None:
        if not self.shown or total <= 0:
            return
        if self._bar is None:
            self._bar = click.progressbar(length=total, label="embedding", file=sys.stderr)
            self._bar.__enter__()
        self._bar.length = total
        self._bar.update(done - self._bar.pos)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
