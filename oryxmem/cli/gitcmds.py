"""Commands for memory in git: ``git setup``, the ``git pre-commit`` hook, the
``merge-driver`` git runs, and ``scan`` for credentials."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from oryxmem.cli.base import EXIT_ERROR, Context, cli, pass_context
from oryxmem.config import Config
from oryxmem.workspace import Workspace, open_workspace


@cli.group()
def git() -> None:
    """Memory in git: merging by entry, the pre-commit hook."""


@git.command("setup")
@pass_context
def git_setup(ctx: Context) -> None:
    """Make this clone merge MEMORY.md by entry and refuse commits holding secrets (once
    per clone; idempotent)."""
    from oryxmem.sync.gitsetup import setup

    workspace = open_workspace(ctx.root)
    report = setup(workspace)
    for line in report.done:
        click.echo(line)
    if not report:
        click.echo("already set up; nothing changed")


@git.command("pre-commit")
@pass_context
def git_pre_commit(ctx: Context) -> None:
    """What the pre-commit hook runs: refuse a staged MEMORY.md that holds a credential;
    write (and stage) the tombstones of the entries the commit removes."""
    from oryxmem.sync.gitrepo import Repo
    from oryxmem.sync.gitsetup import credentials_added, memory_pathspec, tombstone_removals

    workspace = open_workspace(ctx.root)
    repo = Repo.holding(workspace.root)
    pathspec = memory_pathspec(repo, workspace)
    checked = _secrets_checked(workspace)
    found = credentials_added(repo, "diff", "--cached", "--", pathspec) if checked else []
    if found:
        for line in found:
            click.echo(f"oryxmem: {line}", err=True)
        click.echo(
            "oryxmem: commit refused: what looks like a credential is staged in memory"
            " (oryxmem forget it, or set memory.secrets = allow)",
            err=True,
        )
        sys.exit(EXIT_ERROR)
    for written in tombstone_removals(repo, pathspec):
        click.echo(f"oryxmem: staged {written}: the entries this commit removes", err=True)


def _secrets_checked(workspace: Workspace) -> bool:
    return str(Config.load(workspace.config_path).get("memory.secrets")) != "allow"


@cli.command("merge-driver", hidden=True)
@click.argument("base", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("ours", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("theirs", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("path")
def merge_driver(base: Path, ours: Path, theirs: Path, path: str) -> None:
    """What git runs for merge=oryxmem (%O %A %B %P): merge one MEMORY.md or TOMBSTONES
    by entry into OURS."""
    from oryxmem.sync.gitmerge import run_driver

    code, said = run_driver(base, ours, theirs, path)
    if said:
        click.echo(said, err=True)
    sys.exit(code)


@cli.command()
@click.option("--history", is_flag=True, help="Also every version of them in the git history.")
@pass_context
def scan(ctx: Context, history: bool) -> None:
    """Look for credentials in every MEMORY.md (exit 1 when one is found)."""
    from oryxmem import secrets

    workspace = open_workspace(ctx.root)
    found = []
    for agent in ["", *workspace.agent_names()]:
        path = workspace.memory_path(agent)
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        found += [f"{path}:{f.line}: {f.kind}" for f in secrets.find(text.split("\n"))]
    if history:
        found += _scan_history(workspace)
    for line in found:
        click.echo(line)
    if found:
        click.echo(f"oryxmem: {len(found)} possible credential(s) in memory", err=True)
        sys.exit(EXIT_ERROR)
    click.echo("no credentials found" + (" (files and history)" if history else ""), err=True)


def _scan_history(workspace: Workspace) -> list[str]:
    """Every line ever added to a MEMORY.md, checked; as 'COMMIT:PATH:LINE: KIND'."""
    from oryxmem.sync.gitrepo import Repo
    from oryxmem.sync.gitsetup import credentials_added, memory_pathspec

    repo = Repo.holding(workspace.root)
    log = ("log", "--all", "-p", "--format=commit %H", "--", memory_pathspec(repo, workspace))
    return credentials_added(repo, *log)
