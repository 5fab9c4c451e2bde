"""The ``oryxmem`` command: a thin click layer over MemoryService.

Domain errors become one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from oryxmem import __version__
from oryxmem import config as config_module
from oryxmem.agents.hosts import HOOK_CLIENTS, MCP_CLIENTS
from oryxmem.config import Config
from oryxmem.errors import DaemonUnavailableError, OryxError
from oryxmem.payloads import (
    agents_data,
    context_data,
    episodes_data,
    memory_data,
    prompt_data,
    recall_data,
    save_data,
    search_data,
)
from oryxmem.reach import Reach
from oryxmem.store.format import ARCHIVAL, SCOPES, escape_content
from oryxmem.workspace import init_workspace, open_workspace, resolve_agent, socket_path

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


# Marks that reorder what a terminal shows (a line could read backwards); revealed.
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def terminal_safe(text: str) -> str:
    """Text as one line with no control characters: escaped like MEMORY.md, then \\xNN."""
    return terminal_line(escape_content(text))


def terminal_line(line: str) -> str:
    """A line of MEMORY.md (already one line) as a terminal may show it: C0 and C1
    controls and DEL as \\xNN (ESC, BEL, CSI and OSC could retitle or clear the
    terminal), bidirectional overrides as \\uNNNN."""
    return "".join(
        f"\\x{ord(ch):02x}"
        if unicodedata.category(ch) == "Cc" and ch != "\t"
        else f"\\u{ord(ch):04x}"
        if ch in BIDI_CONTROLS
        else ch
        for ch in line
    )


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


@cli.command()
@click.option("--git", is_flag=True, help="Also write .gitattributes with merge=union.")
@pass_context
def init(ctx: Context, git: bool) -> None:
    """Create a workspace (.oryxos/ with config, .gitignore) here or at --root."""
    root = Path(ctx.root or os.environ.get("ORYXMEM_ROOT") or Path.cwd()).resolve()
    created = init_workspace(root, git=git, config_text=config_module.default_config_text())
    click.echo(f"workspace {root}")
    for path in created:
        click.echo(f"  created {path.relative_to(root)}")
    if not created:
        click.echo("  already set up; nothing changed")


@cli.command()
@agent_option
@click.option(
    "--scope", type=click.Choice(SCOPES), default=ARCHIVAL, show_default=True, help="Section."
)
@click.argument("content")
@json_option
@pass_context
def save(ctx: Context, agent: str | None, scope: str, content: str, as_json: bool) -> None:
    """Save CONTENT as a new entry ('-' reads it from stdin)."""
    agent = ctx.agent(agent)
    if content == "-":
        content = sys.stdin.read()
    ctx.check_content(content)
    data = ctx.call(
        lambda client: client.save(agent, content, scope),
        lambda service: save_data(service.save(agent, content, scope, source="cli")),
    )
    if as_json:
        emit_json(data)
        return
    where = describe(data["agent"])
    verb = "kept for" if data.get("deferred") else "saved to"
    click.echo(f"{verb} {where} ({scope}): {data['entry']['line']}")


@cli.command()
@agent_option
@click.argument("keyword")
@json_option
@pass_context
def recall(ctx: Context, agent: str | None, keyword: str, as_json: bool) -> None:
    """Print what recall_memory answers for KEYWORD: by memory.recall, the archival entries
    that best match it by meaning and words (hybrid, the default; best first), or every
    one that holds it, in any case (keyword; oldest first)."""
    agent = ctx.agent(agent)
    data = ctx.call(
        lambda client: client.recall(agent, keyword),
        lambda service: recall_data(service.recall(agent, keyword)),
        needs_model=True,
    )
    if as_json:
        emit_json(data)
        return
    for line in data["lines"]:
        click.echo(terminal_line(line))


# The modes of oryxmem.search.MODES (not imported here: it loads numpy; a test checks).
SEARCH_MODES = ("hybrid", "semantic", "keyword")


@cli.command()
@agent_option
@click.option(
    "-k", "--limit", type=click.IntRange(1, 100), default=None, help="How many (recall.limit)."
)
@click.option(
    "--mode",
    type=click.Choice(SEARCH_MODES),
    default="hybrid",
    show_default=True,
    help="By meaning and words, by meaning only, or by words only.",
)
@click.argument("query")
@json_option
@pass_context
def search(
    ctx: Context, agent: str | None, limit: int | None, mode: str, query: str, as_json: bool
) -> None:
    """Print the entries (core and archival) that best answer QUERY, best first, with
    their score and the arms that found them."""
    agent = ctx.agent(agent)
    data = ctx.call(
        lambda client: client.search(agent, query, limit, mode),
        lambda service: search_data(service.search(agent, query, limit=limit, mode=mode)),
        needs_model=mode != "keyword",
    )
    if as_json:
        emit_json(data)
        return
    if data["note"]:
        click.echo(f"oryxmem: note: {data['note']}", err=True)
    for hit in data["hits"]:
        arms = "+".join(hit["arms"])
        click.echo(f"{hit['score']:.3f}  {arms:<16} {terminal_line(hit['line'])}")
    if data["unembedded"]:
        click.echo(
            f"oryxmem: {data['unembedded']} entries are not embedded yet (searched by words"
            " only); the daemon embeds them, or run 'oryxmem reindex'",
            err=True,
        )


@cli.command()
@click.option("--agent", "-a", default=None, metavar="NAME", help="Only this agent (omit for all).")
@json_option
@pass_context
def reindex(ctx: Context, agent: str | None, as_json: bool) -> None:
    """Build the search indexes again from the rows (one agent's, or all): the keyword
    indexes at once, the vectors with a progress bar (by the daemon when it runs)."""
    name = ctx.agent(agent) if agent is not None else None
    show_bar = not as_json and sys.stderr.isatty()
    client = ctx.client()
    if client is not None:
        try:
            started = client.reindex(name)
        except DaemonUnavailableError:
            client = None
    if client is None:
        with _progress(show_bar) as bar:
            done = ctx.service.reindex(name, progress=lambda d, t: bar.set(d, t))
        data = {"agent": name, "embedded": done, "indexes": ctx.service.index_summary()}
    else:
        with _progress(show_bar) as bar:
            total = int(started["indexes"].get("vectors", {}).get("pending") or 0)
            while True:
                left = int(client.health()["indexes"].get("vectors", {}).get("pending") or 0)
                bar.set(total - left, total)
                if not left:
                    break
                time.sleep(0.2)
        data = {"agent": name, "embedded": total, "indexes": client.health()["indexes"]}
    if as_json:
        emit_json(data)
    else:
        click.echo(
            f"reindexed {describe(name or '') if name else 'every agent'}:"
            f" {data['embedded']} entries embedded"
        )


def _table(title: str, entries: list[dict[str, Any]]) -> list[str]:
    lines = [f"{title} ({len(entries)})"]
    if not entries:
        return [*lines, "  (none)"]
    width = len(str(len(entries)))
    lines.append(f"  {'#':>{width}}  {'TIME':<19}  CONTENT")
    for number, entry in enumerate(entries, 1):
        line = entry["line"]
        content = line.split("] ", 1)[1] if entry["ts"] else line[2:]
        lines.append(f"  {number:>{width}}  {entry['ts'] or '-':<19}  {terminal_line(content)}")
    return lines


@cli.command()
@agent_option
@json_option
@pass_context
def show(ctx: Context, agent: str | None, as_json: bool) -> None:
    """Show every entry, as two tables: 核心记忆 (core) and 归档记忆 (archival)."""
    agent = ctx.agent(agent)
    data = ctx.call(
        lambda client: client.memory(agent), lambda service: memory_data(service.get(agent))
    )
    if as_json:
        emit_json(data)
        return
    click.echo(f"memory of {describe(data['agent'])}")
    click.echo("\n".join(_table("核心记忆 core", data["core"])))
    click.echo("\n".join(_table("归档记忆 archival", data["archival"])))


@cli.command()
@agent_option
@click.option(
    "--query", "-q", default=None, help="the user's message: show the entries most relevant to it"
)
@json_option
@pass_context
def context(ctx: Context, agent: str | None, query: str | None, as_json: bool) -> None:
    """Print the memory block injected into the agent's prompt."""
    agent = ctx.agent(agent)
    data = ctx.call(
        lambda client: client.context(agent, query=query),
        lambda service: context_data(service, agent, query=query),
        needs_model=bool(query and query.strip()),
    )
    if as_json:
        emit_json(data)
    else:
        click.echo("\n".join(map(terminal_line, data["context"].splitlines())))


@cli.command()
@agent_option
@click.option("--session", default=None, help="Add this session's last turns (block 3).")
@click.option("--turns", type=int, default=None, help="How many turns (memory.max_history_turns).")
@click.option(
    "--query", "-q", default=None, help="the user's message: the memories most relevant to it"
)
@click.option(
    "--part",
    type=click.Choice(["text", "system", "memory", "tools"]),
    default="text",
    show_default=True,
    help="Print all four blocks, or only the system text, the memory block or the tools.",
)
@json_option
@pass_context
def prompt(
    ctx: Context,
    agent: str | None,
    session: str | None,
    turns: int | None,
    query: str | None,
    part: str,
    as_json: bool,
) -> None:
    """Print the whole prompt: AGENT.md and USER.md, the memory block, the session's last
    turns, the tools as JSON Schema."""
    agent = ctx.agent(agent)

    data = ctx.call(
        lambda client: client.prompt(agent, session, turns, query),
        lambda service: prompt_data(service, agent, session, turns, query),
        needs_model=bool(query and query.strip()),
    )
    if as_json:
        emit_json(data)
        return
    for note in data["notes"]:
        click.echo(f"note: {terminal_safe(note)}", err=True)
    value = data[part]
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
    click.echo("\n".join(map(terminal_line, text.splitlines())))


@cli.group()
def episodes() -> None:
    """Rounds of past sessions (a user message and its replies), found by a question."""


@episodes.command("search")
@agent_option
@click.option("-k", "--limit", type=click.IntRange(1, 100), default=5, show_default=True)
@click.option("--exclude", default=None, metavar="SESSION", help="Leave this session out.")
@click.argument("query")
@json_option
@pass_context
def episodes_search(
    ctx: Context, agent: str | None, limit: int, exclude: str | None, query: str, as_json: bool
) -> None:
    """Print the rounds of the agent's sessions that best answer QUERY, best first, with
    their session, round and time."""
    agent = ctx.agent(agent)
    data = ctx.call(
        lambda client: client.search_episodes(agent, query, limit, exclude),
        lambda service: episodes_data(
            service.resolve(agent), service.search_episodes(agent, query, limit, exclude)
        ),
        needs_model=True,
    )
    if as_json:
        emit_json(data)
        return
    for hit in data["episodes"]:
        where = f"session {hit['session'][:12]} round {hit['round']}"
        click.echo(f"{hit['score']:.3f}  {hit['at'] or ''}  {where}")
        for line in hit["text"].splitlines():
            click.echo(f"    {terminal_safe(line)}")


@cli.group()
def sessions() -> None:
    """Sessions: bring in past ones from elsewhere."""


@sessions.command("import")
@agent_option
@click.option(
    "--claude-code",
    "claude_code",
    is_flag=True,
    help="Also this workspace's Claude Code sessions (~/.claude/projects/<this folder>/).",
)
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@json_option
@pass_context
def sessions_import(
    ctx: Context, agent: str | None, claude_code: bool, paths: tuple[Path, ...], as_json: bool
) -> None:
    """Import transcripts as sessions of the agent: JSONL files (one {role, content[, ts]}
    per line), Claude Code session files, or folders of them. Importing one again adds
    only the messages it gained since."""
    from oryxmem.store.transcripts import claude_project_dir

    chosen = list(paths)
    if claude_code:
        folder = claude_project_dir(ctx.service.workspace.root)
        if not folder.is_dir():
            raise click.ClickException(f"no Claude Code sessions for this folder at {folder}")
        chosen.append(folder)
    if not chosen:
        raise click.UsageError("give transcript files or folders, or --claude-code")
    report = ctx.service.import_sessions(chosen, ctx.agent(agent))
    if as_json:
        emit_json(report)
        return
    for item in report:
        what = f"{item['added']} messages" if item["added"] else "nothing new"
        click.echo(f"{terminal_safe(item['file'])}: {what} ({item['kind']})")


@cli.command()
@json_option
@pass_context
def agents(ctx: Context, as_json: bool) -> None:
    """List the agents (and the global file) with their entry counts."""
    data = ctx.call(lambda client: client.agents(), lambda service: agents_data(service.agents()))
    if as_json:
        emit_json(data)
        return
    click.echo(f"{'AGENT':<24} {'CORE':>6} {'ARCHIVAL':>9}")
    for row in data:
        name = pad(row["agent"] or "(global)", 24)
        if row["problem"]:
            click.echo(f"{name} {'?':>6} {'?':>9}  {row['problem']}")
        else:
            click.echo(f"{name} {row['core']:>6} {row['archival']:>9}")


@cli.command()
@click.option(
    "--idle-exit",
    "idle_exit",
    type=click.IntRange(0),
    default=0,
    metavar="SECONDS",
    help="Stop after this long without a request (0: never; a background start sets it).",
)
@pass_context
def daemon(ctx: Context, idle_exit: int) -> None:
    """Run the daemon in the foreground: sync, and the memory API on the socket."""
    from oryxmem.daemon.server import Daemon

    logging.getLogger("oryxmem").setLevel(logging.INFO)
    for handler in logging.getLogger("oryxmem").handlers:
        handler.setFormatter(logging.Formatter("oryxmem: %(message)s"))
    workspace = open_workspace(ctx.root)
    config = Config.load(workspace.config_path)
    raise SystemExit(Daemon(workspace, config, idle_exit).run())


@cli.command("install-systemd")
@click.option(
    "--unit-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write the units (default: ~/.config/systemd/user).",
)
@pass_context
def install_systemd(ctx: Context, unit_dir: Path | None) -> None:
    """Install this workspace's daemon as a systemd user service, started by its socket."""
    from oryxmem.daemon import systemd

    workspace = open_workspace(ctx.root)
    units = systemd.install(workspace, Config.load(workspace.config_path), unit_dir)
    click.echo(f"wrote {units.socket}")
    click.echo(f"wrote {units.service}")
    click.echo("start it now and at every login with:")
    click.echo("  systemctl --user daemon-reload")
    click.echo(f"  systemctl --user enable --now {units.name}.socket")


@cli.command()
@click.option("--socket", "socket_only", is_flag=True, help="Print only the socket's path.")
@json_option
@pass_context
def status(ctx: Context, socket_only: bool, as_json: bool) -> None:
    """Is the daemon running? Its socket, the agents' sync state, the last errors."""
    from oryxmem.store import rows

    workspace = open_workspace(ctx.root)
    path = socket_path(workspace, Config.load(workspace.config_path))
    if socket_only:
        click.echo(str(path))
        return
    health = ctx.daemon_health()
    data = health or {
        "status": "stopped",
        "workspace": str(workspace.root),
        "socket": str(path),
        "sync": rows.sync_summary(ctx.service.db),
    }
    if as_json:
        emit_json(data)
        return
    click.echo(f"workspace  {data['workspace']}")
    if health:
        click.echo(
            f"daemon     running, pid {health['pid']}, up {health['uptime_seconds']} s,"
            f" watching by {health['watching']}"
        )
    else:
        click.echo("daemon     not running (oryxmem daemon starts it)")
    click.echo(f"socket     {data['socket']}")
    summary = data["sync"]
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary["agents"].items())) or "none yet"
    click.echo(f"agents     {counts}")
    for problem in summary["problems"]:
        click.echo(f"  {problem['agent'] or '(global)'}: {problem['status']}: {problem['detail']}")
    click.echo(f"quarantine {summary['quarantined_rows']} row(s) (oryxmem history shows why)")
    for kept in summary["kept_lines"]:
        where = f"{kept['path']}:{kept['line']}"
        click.echo(f"kept       {where}: not an entry: {terminal_safe(kept['text'])}")
    for repair in summary["repairs"]:
        click.echo(f"repaired   {repair['at']}  {terminal_safe(repair['detail'])}")
    if health and health.get("last_sync_error"):
        click.echo(f"last error {health['last_sync_error']}")
    followed = (health or {}).get("config", {})
    if followed.get("problem"):
        click.echo(f"config     not taken: {followed['problem']}; the daemon runs as before")
    for waiting in followed.get("restart_needed", []):
        in_file, running = (json.dumps(waiting[k], ensure_ascii=False) for k in ("file", "running"))
        click.echo(
            f"config     {waiting['key']} = {in_file} in config.toml; the daemon runs with"
            f" {running} until it is restarted"
        )


@cli.command()
@agent_option
@click.option("--check", is_flag=True, help="Change nothing; list the drift and exit 1 if any.")
@click.option("--watch", is_flag=True, help="Keep syncing on every change until stopped.")
@json_option
@pass_context
def sync(ctx: Context, agent: str | None, check: bool, watch: bool, as_json: bool) -> None:
    """Make every MEMORY.md and the memory_entries table agree (one pass, no daemon needed)."""
    from oryxmem.fileio import raise_open_file_limit

    raise_open_file_limit()  # a lock file stays open per agent synced
    if watch:
        _watch(ctx)
        return
    agents = None if agent is None else [ctx.service.resolve(agent).agent]
    total = len(ctx.service.sync_engine().known_agents()) if agents is None else 1
    show_bar = not as_json and sys.stderr.isatty() and total > 20
    with (
        click.progressbar(length=total, label="syncing", file=sys.stderr)
        if show_bar
        else (_NoBar()) as bar
    ):
        reports = ctx.service.sync(agents, dry_run=check, progress=lambda _: bar.update(1))
    if as_json:
        emit_json([report.__dict__ for report in reports])
    else:
        for report in reports:
            if report.drift or report.status not in ("ok", "unchanged") or agent is not None:
                click.echo(("would sync " if check else "") + report.summary())
                for line in report.file_added + report.lost if check else report.lost:
                    click.echo(f"  {line}")
            for notice in report.notices():
                click.echo(f"note: {terminal_safe(notice)}")
        if not any(r.drift or r.status not in ("ok", "unchanged") for r in reports):
            click.echo("everything in sync")
    if check and any(report.drift for report in reports):
        raise SystemExit(1)
    if any(report.status in ("conflicted", "unreadable") for report in reports):
        raise SystemExit(1)


def _watch(ctx: Context) -> None:
    """Run the sync watcher in the foreground until SIGTERM or SIGINT; log to stderr."""
    import signal
    import threading

    from oryxmem.daemon.notify import notify
    from oryxmem.sync.watcher import SyncWatcher

    logging.getLogger("oryxmem").setLevel(logging.INFO)
    for handler in logging.getLogger("oryxmem").handlers:
        handler.setFormatter(logging.Formatter("oryxmem: %(message)s"))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    watcher = SyncWatcher(open_workspace(ctx.root))
    watcher.start()
    watcher.ready.wait()
    mode = "polling" if watcher.polling else "inotify"
    click.echo(f"oryxmem: watching {watcher.workspace.os_dir} ({mode})", err=True)
    notify("READY=1")  # under systemd (or a test), the same signal the daemon gives
    while not stop.wait(1.0):
        if not watcher.alive:
            raise OryxError("the sync watcher stopped unexpectedly; see the log above")
    watcher.stop()
    click.echo("oryxmem: stopped", err=True)


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, steps: int) -> None:
        return None


class _progress:
    """A bar of done out of a total that may grow, on stderr when it is a terminal."""

    def __init__(self, shown: bool) -> None:
        self.shown = shown
        self._bar: Any = None

    def __enter__(self) -> _progress:
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


@cli.command()
@agent_option
@click.option("--limit", default=50, show_default=True, help="How many events, newest last.")
@json_option
@pass_context
def history(ctx: Context, agent: str | None, limit: int, as_json: bool) -> None:
    """What was added and removed, when, and by which source (file, db, socket)."""
    name = None if agent is None else ctx.service.resolve(agent).agent
    from oryxmem.store import rows

    events = rows.history(ctx.service.db, name, limit)
    if as_json:
        emit_json(events)
        return
    for event in events:
        who = terminal_safe(event["agent"] or "(global)")
        content = terminal_safe(str(event["content"] or ""))
        what = f"- [{event['ts']}] {content}" if event["ts"] else content
        detail = f"  ({terminal_safe(event['detail'])})" if event["detail"] else ""
        click.echo(f"{event['at']}  {who}  {event['op']:<10} {event['source']:<6} {what}{detail}")


@cli.group()
def config() -> None:
    """Read and change .oryxos/config.toml (comments are kept)."""


@config.command("get")
@click.argument("key", required=False)
@json_option
@pass_context
def config_get(ctx: Context, key: str | None, as_json: bool) -> None:
    """Print one setting, or all of them."""
    values = ctx.service.config.as_dict()
    if key is not None:
        value = ctx.service.config.get(key)
        click.echo(json.dumps(value) if as_json else str(value))
        return
    if as_json:
        emit_json(values)
        return
    for name, value in values.items():
        click.echo(f"{name} = {json.dumps(value, ensure_ascii=False)}")


@config.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("key")
@click.argument("value")
@pass_context
def config_set(ctx: Context, key: str, value: str) -> None:
    """Set KEY to VALUE in config.toml."""
    workspace = open_workspace(ctx.root)
    stored = config_module.set_value(workspace.config_path, key, value)
    click.echo(f"{key} = {json.dumps(stored, ensure_ascii=False)}")
    health = ctx.daemon_health()
    if health is not None and config_module.setting(key).restart:
        running = health["config"]["fixed_at_start"].get(key)
        click.echo(
            f"note: the running daemon (pid {health['pid']}) keeps {key} ="
            f" {json.dumps(running, ensure_ascii=False)} until it is restarted"
        )


# --- agent hosts: MCP and hooks ------------------------------------------------------

HOST_AGENT_HELP = "Agent name (default: $ORYXMEM_AGENT; omit both for the global file)."


def host_agent_option(func: F) -> F:
    return click.option(
        "--agent", "-a", default=None, envvar="ORYXMEM_AGENT", metavar="NAME", help=HOST_AGENT_HELP
    )(func)


def scope_option(func: F) -> F:
    return click.option(
        "--scope",
        type=click.Choice(["project", "user"]),
        default="project",
        show_default=True,
        help="project: this workspace's config files; user: your home's.",
    )(func)


def install_options(func: F) -> F:
    """--scope, --agent and --dry-run, then the Context: what every installer takes."""
    dry_run = click.option("--dry-run", is_flag=True, help="Show the change; write nothing.")
    return cast(F, scope_option(host_agent_option(dry_run(pass_context(func)))))


def _install(
    ctx: Context, make: Callable[..., Any], host: str, scope: str, agent: str | None, dry: bool
) -> None:
    """Write (or with ``dry``, show) the change ``make`` works out for this host, and say
    the one-time trust step the host needs for a project's own registration."""
    from oryxmem.agents.install import trust_step

    change = make(host, scope, open_workspace(ctx.root).root, ctx.agent(agent), Path.home())
    if not change.changed:
        click.echo(f"{change.path}: already set up; nothing changed")
    elif dry:
        click.echo(change.diff(), nl=False)
        return
    else:
        change.write()
        click.echo(f"wrote {change.path}")
    step = trust_step(host, scope)
    if step is not None:
        click.echo(f"note: {step}", err=True)


@cli.group(invoke_without_command=True)
@host_agent_option
@click.pass_context
def mcp(click_ctx: click.Context, agent: str | None) -> None:
    """Serve the agent's memory as MCP tools over stdio (for Claude Code, Codex, ...)."""
    if click_ctx.invoked_subcommand is not None:
        return
    from oryxmem.agents.mcp import serve  # the SDK only when serving

    ctx = click_ctx.ensure_object(Context)
    serve(ctx.root, ctx.agent(agent))


@mcp.command("install")
@click.option("--client", "host", type=click.Choice(MCP_CLIENTS), required=True, help="The host.")
@install_options
def mcp_install(ctx: Context, host: str, scope: str, agent: str | None, dry_run: bool) -> None:
    """Register `oryxmem mcp` in the host's own config file."""
    from oryxmem.agents.install import mcp_change

    _install(ctx, mcp_change, host, scope, agent, dry_run)


@cli.group()
def hook() -> None:
    """Hooks for coding agents: memory in at session start and on each prompt, a
    footprint out when the agent stops. The host runs them (see `hook install`)."""


def _hook_command(event: str) -> click.Command:
    @click.option(
        "--client",
        "host",
        type=click.Choice(HOOK_CLIENTS),
        default="claude-code",
        show_default=True,
    )
    @host_agent_option
    @pass_context
    def run_hook(ctx: Context, host: str, agent: str | None) -> None:
        from oryxmem.agents.hooks import Hook
        from oryxmem.agents.hooks import main as hook_main

        hook_main(Hook(event, host, ctx.root, agent), sys.stdin, sys.stdout, sys.stderr)

    run_hook.__doc__ = HOOK_HELP[event]
    return hook.command(event)(run_hook)


HOOK_HELP = {
    "session-start": "Print the agent's memory block for the host to inject (stdin: its JSON).",
    "prompt": "Print the memories most relevant to the user's prompt (stdin: its JSON).",
    "stop": "Save the footprint of the turn that ended (stdin: its JSON).",
}
for _event in HOOK_HELP:
    _hook_command(_event)


@hook.command("install")
@click.argument("host", type=click.Choice(HOOK_CLIENTS))
@install_options
def hook_install(ctx: Context, host: str, scope: str, agent: str | None, dry_run: bool) -> None:
    """Write oryxmem's hooks into the host's settings."""
    from oryxmem.agents.install import hooks_change

    _install(ctx, hooks_change, host, scope, agent, dry_run)


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("oryxmem: warning: %(message)s"))
    logger = logging.getLogger("oryxmem")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning every error into one line and an exit code."""
    _configure_logging()
    try:
        cli.main(args=argv, prog_name="oryxmem", standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.exceptions.Abort:
        click.echo("oryxmem: aborted", err=True)
        sys.exit(EXIT_ERROR)
    except click.UsageError as error:  # one line, as every other error (exit 2)
        command = error.ctx.command_path if error.ctx is not None else "oryxmem"
        reason = error.format_message().rstrip(".")
        click.echo(f"oryxmem: error: {reason} (see '{command} --help')", err=True)
        sys.exit(error.exit_code)
    except click.ClickException as error:
        click.echo(f"oryxmem: error: {error.format_message()}", err=True)
        sys.exit(error.exit_code)
    except OryxError as error:
        click.echo(f"oryxmem: error: {error.message}", err=True)
        sys.exit(EXIT_ERROR)
    except Exception as error:  # the last line of defence: one line, never a traceback
        if os.environ.get("ORYXMEM_DEBUG"):
            raise
        click.echo(f"oryxmem: internal error: {type(error).__name__}: {error}", err=True)
        sys.exit(EXIT_INTERNAL)
    sys.exit(0)
