"""The ``oryxmem`` command: a thin click layer over MemoryService, one module per kind
of command (base.py holds what they share).

Domain errors become one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from oryxmem.cli import gitcmds, hosts, memory, running, settings
from oryxmem.cli.base import EXIT_ERROR, EXIT_INTERNAL, cli
from oryxmem.errors import OryxError

COMMANDS = (memory, running, settings, hosts, gitcmds)  # each registers its commands on cli


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
