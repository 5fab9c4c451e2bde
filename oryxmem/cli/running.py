"""The commands that set up and run a workspace: init, daemon, install-systemd, status,
sync."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from oryxmem import config as config_module
from oryxmem.cli.base import (
    Context,
    NoBar,
    agent_option,
    cli,
    emit_json,
    json_option,
    pass_context,
)
from oryxmem.config import Config
from oryxmem.errors import OryxError
from oryxmem.visible import revealed_text as terminal_safe
from oryxmem.workspace import Workspace, init_workspace, open_workspace, socket_path

MIRROR_WAIT_SECONDS = 10.0  # what sync waits for a running daemon to mirror its saves

if TYPE_CHECKING:
    from oryxmem.sync.engine import AgentReport


@cli.command()
@click.option("--git", is_flag=True, help="Also run 'oryxmem git setup' (merge by entry).")
@pass_context
def init(ctx: Context, git: bool) -> None:
    """Create a workspace (.oryxos/ with config, .gitignore) here or at --root."""
    root = Path(ctx.root or os.environ.get("ORYXMEM_ROOT") or Path.cwd()).resolve()
    created = init_workspace(root, config_text=config_module.default_config_text())
    click.echo(f"workspace {root}")
    for path in created:
        click.echo(f"  created {path.relative_to(root)}")
    if not created and not git:
        click.echo("  already set up; nothing changed")
    if git:
        from oryxmem.errors import NotARepositoryError
        from oryxmem.sync.gitsetup import setup, write_attributes

        try:
            done = setup(Workspace(root)).done
        except NotARepositoryError:
            write_attributes(Workspace(root))
            done = [
                "wrote .oryxos/.gitattributes; not in a git repository yet: after"
                " 'git init', run 'oryxmem git setup'"
            ]
        for line in done:
            click.echo(f"  {line}")


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


@cli.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="The port on 127.0.0.1 (0: a free one).",
)
@click.option("--no-browser", is_flag=True, help="Print the link; do not open a browser.")
@pass_context
def console(ctx: Context, port: int, no_browser: bool) -> None:
    """Serve the console (every agent's memory in a browser) on 127.0.0.1 until Ctrl-C.

    The first line printed is the link to open: it signs that browser in."""
    from oryxmem.console.app import bound_socket, run_console

    try:
        bound_socket(port).close()  # a port in use is one clear line, before anything
    except OSError as error:
        raise click.ClickException(
            f"cannot serve the console on 127.0.0.1:{port}: {error.strerror}"
        ) from None
    run_console(ctx.root, port, not no_browser)


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
    _echo_sync(data["sync"])
    if health and isinstance(health.get("indexes"), dict):
        _echo_indexes(health["indexes"])
    if health and health.get("last_sync_error"):
        click.echo(f"last error {health['last_sync_error']}")
    _echo_git(workspace, (health or {}).get("git"))
    _echo_config((health or {}).get("config", {}))


def _echo_git(workspace: Workspace, loop: dict[str, Any] | None) -> None:
    """What git sync is doing, and what this clone lacks to merge memory by entry."""
    from oryxmem.sync.gitmerge import outstanding_conflicts
    from oryxmem.sync.gitsetup import driver_missing

    missing = driver_missing(workspace)
    if missing:
        click.echo(f"git        {missing}")
    for conflict in outstanding_conflicts(workspace.os_dir):
        click.echo(
            f"git        merge kept both versions of the core entry of {conflict['ts']} in"
            f" {conflict['path']}: {terminal_safe(conflict['ours'])!r} and"
            f" {terminal_safe(conflict['theirs'])!r}; remove the wrong one"
        )
    if loop:
        ahead = f"{loop['ahead']} ahead, {loop['behind']} behind"
        click.echo(
            f"git sync   {loop['remote']}: last pull {loop['last_pull'] or 'never'}, last push"
            f" {loop['last_push'] or 'never'}, {ahead}"
        )
        for key in ("waiting", "last_error"):
            if loop.get(key):
                click.echo(f"git sync   {key.replace('_', ' ')}: {loop[key]}")


def _echo_sync(summary: dict[str, Any]) -> None:
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


def _echo_indexes(indexes: dict[str, Any]) -> None:
    """Each index's backlog, and the pace the daemon takes it in at."""
    parts = []
    for name, index in indexes.items():
        pending = int(index.get("pending") or 0)
        rate = float(index.get("rate") or 0)
        pace = f" at {rate:,.0f}/s" if pending and rate else ""
        parts.append(f"{name} {'current' if not pending else f'{pending:,} to take in{pace}'}")
    click.echo(f"indexes    {', '.join(parts) or 'none'}")


def _echo_config(followed: dict[str, Any]) -> None:
    """What the daemon made of config.toml: a file it could not take, settings that wait
    for a restart."""
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
    _let_the_daemon_mirror(ctx)
    agents = None if agent is None else [ctx.service.resolve(agent).agent]
    total = len(ctx.service.sync_engine().known_agents()) if agents is None else 1
    show_bar = not as_json and sys.stderr.isatty() and total > 20
    with (
        click.progressbar(length=total, label="syncing", file=sys.stderr)
        if show_bar
        else (NoBar()) as bar
    ):
        reports = ctx.service.sync(agents, dry_run=check, progress=lambda _: bar.update(1))
    if as_json:
        emit_json([report.__dict__ for report in reports])
    else:
        _echo_reports(reports, check, every=agent is not None)
    if check and any(report.drift for report in reports):
        raise SystemExit(1)
    if any(report.status in ("conflicted", "unreadable") for report in reports):
        raise SystemExit(1)


def _let_the_daemon_mirror(ctx: Context) -> None:
    """A running daemon puts the saves it answered into the rows before any call it
    answers (within a second otherwise), unless the database is locked a moment: ask
    until none waits (at most MIRROR_WAIT_SECONDS), so that this pass does not take a
    save in flight for a drift."""
    deadline = time.monotonic() + MIRROR_WAIT_SECONDS
    while (health := ctx.daemon_health()) and health.get("rows_waiting"):
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _echo_reports(reports: list[AgentReport], check: bool, every: bool) -> None:
    """What sync did (or, with check, would do): the agents that drifted or are in
    trouble (``every``: all of them), with their notices."""
    for report in reports:
        if report.drift or report.status not in ("ok", "unchanged") or every:
            click.echo(("would sync " if check else "") + report.summary())
            for line in report.file_added + report.lost if check else report.lost:
                click.echo(f"  {line}")
        for notice in report.notices():
            click.echo(f"note: {terminal_safe(notice)}")
    if not any(r.drift or r.status not in ("ok", "unchanged") for r in reports):
        click.echo("everything in sync")


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
