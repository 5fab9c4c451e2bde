"""The command other programs run to start oryxmem: hosts (MCP servers, hooks), systemd,
git, and oryxmem itself when it starts a daemon in the background.

It is this interpreter with ``-P``: ``python -m oryxmem`` alone puts the folder it is
started in first on ``sys.path``, so a project holding an ``oryxmem.py`` or an
``oryxmem/`` folder would run its own code whenever a host starts us there. ``-P``
(Python 3.11+) leaves that folder out; the installed package is the one imported.
No PATH lookup happens at run time either: the interpreter is named by its full path.
"""

from __future__ import annotations

import sys


def oryxmem_command(*args: str) -> list[str]:
    """The argv that runs ``oryxmem ARGS`` with this installation, wherever it starts."""
    return [sys.executable, "-P", "-m", "oryxmem", *args]
