"""What a configuration key is: its default, its type, its check, and whether a running
daemon takes a new value at once. oryxmem's own keys are in config.py; a backend plugin
declares its own (under a section named for it) the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Setting(NamedTuple):
    """One key (a NamedTuple: the cheapest record to define, and every command reads
    the table)."""

    key: str
    default: Any
    kind: type
    help: str
    check: Callable[[Any], str | None] = lambda value: None
    # A running daemon takes this setting only when it starts again (it chose its
    # socket, backend or embedder then); every other setting it takes within a second.
    restart: bool = False


def positive(value: Any) -> str | None:
    return None if value > 0 else "must be greater than 0"


def not_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be 0 or more"


def one_of(*choices: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return check
