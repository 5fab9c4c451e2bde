"""oryxmem config: read and change .oryxos/config.toml."""

from __future__ import annotations

import json

import click

from oryxmem import config as config_module
from oryxmem.cli.base import (
    Context,
    cli,
    emit_json,
    json_option,
    pass_context,
)
from oryxmem.workspace import open_workspace


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
