"""A stale editor buffer written back again and again, on a busy machine: an acknowledged
save leaves MEMORY.md only when someone deletes it from a buffer that held it."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

from support.daemon import daemon
from support.sync import (
    Background,
    cpu_load,
    disagreements,
    file_items,
    sql,
    stale_editor,
)

from oryxmem.client import Client
from oryxmem.workspace import Workspace

CLIENTS = 8
SAVES_EACH = 28


def test_saves_survive_an_editor_rewriting_from_old_buffers_again_and_again_under_load(
    workspace: Workspace, tmp_path: Path
) -> None:
    """8 clients save while an editor writes the file back from a buffer read 30 ms
    before, about 12 times a second, with the processors busy: a save put back once is
    dropped again by the next rewrite from a buffer older than the put-back, and a save
    may land on a file that an old buffer had just emptied of others; each is put back."""
    path = workspace.memory_path("coder")
    path.parent.mkdir(parents=True)
    acked: list[str] = []
    lock = threading.Lock()

    def saves(number: int, socket: Path) -> None:
        with Client(socket, timeout=60) as client:
            for n in range(SAVES_EACH):
                content = f"save {number}-{n}"
                client.save("coder", content)
                with lock:
                    acked.append(content)

    with cpu_load(), daemon(workspace, tmp_path / "daemon.log") as running:
        Client(running.socket, timeout=60).save("coder", "the first save")  # the file exists
        acked.append("the first save")
        stop = threading.Event()
        editor = Background(lambda: stale_editor(path, stop, read_ahead=0.03, every=0.05))
        savers = [Background(saves, n, running.socket) for n in range(CLIENTS)]
        editor.start()
        for saver in savers:
            saver.start()
        for saver in savers:
            saver.join()
        stop.set()
        editor.join()

        def lost() -> list[str]:
            """Acknowledged saves not in MEMORY.md exactly once (a save a stale buffer
            dropped just now is put back a moment later)."""
            found = Counter(content for _, _, content in file_items(workspace, "coder"))
            return [content for content in acked if found[content] != 1]

        deadline = time.monotonic() + 60
        while (lost() or disagreements(workspace)) and time.monotonic() < deadline:
            time.sleep(0.2)
        missing = lost()
        assert not missing, (
            f"{len(missing)} of {len(acked)} acknowledged saves lost or doubled: {missing[:10]}\n"
            + sql(
                workspace,
                "SELECT id, op, source, entry_id, written_ns, written_after_others, detail"
                f" FROM memory_history WHERE content = '{missing[0]}' ORDER BY id",
            )
        )
        assert disagreements(workspace) == []
        log = running.text()
        assert "restored" in log or "put back" in log, f"no save was put back; the log:\n{log}"
