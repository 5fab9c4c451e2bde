"""One write path: a save by any route ends in the same state, with or without a daemon.

The line in MEMORY.md, its row in memory_entries, the row's entry in the keyword
index, and `oryxmem sync --check` finding no drift, for a save over the socket,
from the CLI with no daemon, through the tool route, as a trigger footprint, and
as a row another program inserts with the sqlite3 shell.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.daemon import daemon
from support.processes import run_cli
from support.sync import index_sql, sql, wait_until

from oryxmem.store.format import parse
from oryxmem.workspace import Workspace


def in_file(workspace: Workspace, agent: str, content: str) -> bool:
    path = workspace.memory_path(agent)
    if not path.exists():
        return False
    return content in [e.content for e in parse(path.read_text(encoding="utf-8")).archival]


def row_and_index(workspace: Workspace, agent: str, content: str) -> tuple[bool, bool]:
    """(a row holds it with its entry id, the keyword index holds that row's folded text)."""
    quoted = content.replace("'", "''")
    found = index_sql(
        workspace,
        "SELECT e.entry_id IS NOT NULL, coalesce((SELECT f.folded FROM memory_fts f"
        f" WHERE f.rowid = e.id), '') FROM memory_entries e WHERE e.agent = '{agent}'"
        f" AND e.content = '{quoted}'",
    ).splitlines()
    if len(found) != 1:
        return False, False
    has_id, folded = found[0].split("|", 1)
    return has_id == "1", folded == content.casefold()


def settled(workspace: Workspace, agent: str, content: str) -> bool:
    return in_file(workspace, agent, content) and row_and_index(workspace, agent, content) == (
        True,
        True,
    )


def check_is_clean() -> None:
    done = run_cli("sync", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "everything in sync\n"


def test_every_save_path_ends_in_the_same_state(workspace: Workspace, tmp_path: Path) -> None:
    # The CLI with no daemon: the stores directly, with the same locks.
    done = run_cli(
        "save", "--agent", "coder", "From the CLI, no daemon", env={"ORYXMEM_NO_DAEMON": "1"}
    )
    assert done.returncode == 0, done.stderr
    assert settled(workspace, "coder", "From the CLI, no daemon")
    check_is_clean()

    with daemon(workspace, tmp_path / "daemon.log") as running:
        status, reply = running.curl(
            "-d", '{"content": "Over the socket"}', "http://x/api/v1/agents/coder/memory"
        )
        assert (status, reply["code"]) == (200, 0)
        status, reply = running.curl(
            "-H",
            "X-OryxOS-Agent: coder",
            "-d",
            '{"content": "Through the tool"}',
            "http://x/api/v1/tools/save_memory",
        )
        assert (status, reply["code"]) == (200, 0)
        body = json.dumps({"user_message": "fix the CI", "reply": "pinned pytest"})
        status, reply = running.curl("-d", body, "http://x/api/v1/agents/coder/triggers")
        assert (status, reply["code"]) == (200, 0)
        sql(
            workspace,
            "INSERT INTO memory_entries(agent, content) VALUES ('coder', 'From the sqlite3 shell')",
        )
        contents = [
            "From the CLI, no daemon",
            "Over the socket",
            "Through the tool",
            'trigger: user="fix the CI" reply="pinned pytest"',
            "From the sqlite3 shell",
        ]
        wait_until(lambda: all(settled(workspace, "coder", c) for c in contents))
        # A save through the daemon by the CLI, the fifth route's twin.
        done = run_cli("save", "--agent", "coder", "From the CLI, through the daemon")
        assert done.returncode == 0, done.stderr
        wait_until(lambda: settled(workspace, "coder", "From the CLI, through the daemon"))
        check_is_clean()
        # Exactly once each, in the file.
        text = workspace.memory_path("coder").read_text(encoding="utf-8")
        assert all(text.count(f"] {c}\n") == 1 for c in contents)
    check_is_clean()


def test_a_python_save_is_in_the_rows_at_once(workspace: Workspace) -> None:
    """MemoryService.save (the library, as the README shows it) leaves nothing for sync."""
    script = (
        "from oryxmem.service import MemoryService\n"
        "memory = MemoryService.open()\n"
        "memory.save('coder', 'User prefers tabs.', 'core')\n"
        "memory.record_trigger('coder', 'fix the CI', 'pinned pytest to 8.x')\n"
        "memory.close()\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    assert row_and_index(workspace, "coder", "User prefers tabs.") == (True, True)
    assert settled(workspace, "coder", 'trigger: user="fix the CI" reply="pinned pytest to 8.x"')
    check_is_clean()
