"""Plugging into agent hosts: the MCP server and the hooks, and their install commands."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import click

from oryxmem.agents.hosts import HOOK_CLIENTS, MCP_CLIENTS
from oryxmem.cli.base import Context, F, cli, pass_context
from oryxmem.workspace import open_workspace

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
