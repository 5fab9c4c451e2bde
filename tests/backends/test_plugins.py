"""Plugins: oryxmem's own backends and indexes are declared as a third party's are, and a
tiny third-party package (a backend with a table of its own, and an index), installed
by pip from its wheel, is used by the CLI and the daemon with no change to oryxmem."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from importlib.metadata import distribution
from pathlib import Path

import pytest
from support.daemon import daemon
from support.processes import run_cli
from support.sync import index_sql, sql, wait_until

from oryxmem import registry
from oryxmem.workspace import Workspace

PLUGIN = {
    "tinyplug/__init__.py": "",
    "tinyplug/plugin.py": """
from oryxmem.registry import Plugin

BACKEND = Plugin(
    "tinyplug.store:CountingStore",
    migrations="tinyplug.store:MIGRATIONS",
    settings="tinyplug.store:SETTINGS",
)
INDEX = Plugin("tinyplug.index:LengthIndex")
""",
    "tinyplug/store.py": '''
"""The rows, as the sqlite backend reads them, and a record of every load, marked with
the backend's own setting tiny.mark."""
from oryxmem.backends.sqlite import SqliteMemoryStore
from oryxmem.settings import Setting, one_of
from oryxmem.store.db import write_transaction


def create_tiny_loads(db):
    db.execute("CREATE TABLE tiny_loads (agent TEXT NOT NULL, mark TEXT)")


MIGRATIONS = [create_tiny_loads]
SETTINGS = [Setting("tiny.mark", "plain", str, "how each load is marked", one_of("plain", "bold"))]


class CountingStore(SqliteMemoryStore):
    @classmethod
    def for_agent(cls, agent, resources):
        store = super().for_agent(agent, resources)
        store.mark = resources.config.get("tiny.mark")
        return store

    def load(self):
        with write_transaction(self.db):
            self.db.execute("INSERT INTO tiny_loads VALUES (?, ?)", [self.agent, self.mark])
        return super().load()
''',
    "tinyplug/index.py": '''
"""How long each entry is: the longest first."""
from oryxmem.index import DerivedIndex, Hit


class LengthIndex(DerivedIndex):
    name = "lengths"

    def create(self, db):
        db.execute("CREATE TABLE tiny_lengths (row_id INTEGER PRIMARY KEY, agent TEXT, chars INT)")

    def drop(self, db):
        db.execute("DROP TABLE IF EXISTS tiny_lengths")

    def remove(self, db, row_ids):
        db.conn.executemany("DELETE FROM tiny_lengths WHERE row_id = ?", [[r] for r in row_ids])

    def add(self, db, rows):
        db.conn.executemany(
            "INSERT INTO tiny_lengths VALUES (?, ?, ?)",
            [(r.row_id, r.agent, len(r.content)) for r in rows],
        )

    def search(self, db, agent, query, limit):
        found = db.execute(
            "SELECT row_id, chars FROM tiny_lengths WHERE agent = ? ORDER BY chars DESC", [agent]
        )
        return [Hit(row_id, float(chars)) for row_id, chars in found][:limit]
''',
}
ENTRY_POINTS = """[oryxmem.backends]
tiny = tinyplug.plugin:BACKEND

[oryxmem.indexes]
lengths = tinyplug.plugin:INDEX
"""


def build_wheel(folder: Path) -> Path:
    """The plugin as a wheel (the format pip installs), made with the standard library."""
    dist_info = "tinyplug-0.1.dist-info"
    files = {
        **PLUGIN,
        f"{dist_info}/METADATA": "Metadata-Version: 2.1\nName: tinyplug\nVersion: 0.1\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{dist_info}/entry_points.txt": ENTRY_POINTS,
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    wheel = folder / "tinyplug-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.fixture
def plugin_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "site"
    wheel = build_wheel(tmp_path)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    done = subprocess.run(
        [*pip, "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("PYTHONPATH", str(target))  # where the commands below find it
    return target


def test_the_built_ins_are_the_entry_points_oryxmem_declares() -> None:
    declared = distribution("oryxmem").entry_points
    for group, found in [
        (registry.BACKENDS_GROUP, registry.BACKENDS),
        (registry.INDEXES_GROUP, registry.INDEXES),
        (registry.EMBEDDERS_GROUP, registry.EMBEDDERS),
    ]:
        points = {point.name: point for point in declared if point.group == group}
        assert set(points) == set(found.builtins), group
        for name, point in points.items():
            assert point.load() is found.builtins[name], (group, name)


def test_an_unknown_plugin_is_a_clear_error_listing_what_is_known(workspace: Workspace) -> None:
    done = run_cli("config", "set", "memory.backend", "nosuch")
    assert done.returncode != 0
    assert "memory.backend" in done.stderr and "markdown" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_third_party_backend_and_index_work_from_the_cli_and_the_daemon(
    workspace: Workspace, plugin_installed: Path, tmp_path: Path
) -> None:
    settings = [("memory.backend", "tiny"), ("index.plugins", "lengths"), ("tiny.mark", "bold")]
    for key, value in settings:
        done = run_cli("config", "set", key, value)
        assert done.returncode == 0, done.stderr
    for key, value in [("tiny.mark", "loud"), ("tiny.nosuch", "1")]:  # its own checks, its keys
        refused = run_cli("config", "set", key, value)
        assert refused.returncode != 0 and key in refused.stderr, refused.stderr
    listed = run_cli("config", "get")
    assert 'tiny.mark = "bold"' in listed.stdout and "mem0.url" in listed.stdout
    done = run_cli("save", "--agent", "a", "The user drinks green tea.")
    assert done.returncode == 0, done.stderr
    done = run_cli("context", "--agent", "a")  # read through the plugin's backend
    assert done.returncode == 0 and "green tea" in done.stdout, done.stderr
    assert int(sql(workspace, "SELECT count(*) FROM tiny_loads WHERE mark = 'bold'")) >= 1
    applied = "SELECT name FROM _sqlite_migrations WHERE migration_set = 'oryxmem.backend.tiny'"
    assert sql(workspace, applied).strip() == "create_tiny_loads"
    assert index_sql(workspace, "SELECT chars FROM tiny_lengths").strip() == str(
        len("The user drinks green tea.")
    )

    with daemon(workspace, tmp_path / "daemon.log") as running:
        status, reply = running.curl(
            "-d", '{"content": "Deadline is Friday."}', "http://x/api/v1/agents/a/memory"
        )
        assert status == 200, reply
        status, reply = running.curl("http://x/api/v1/agents/a/context")
        assert status == 200 and "Deadline is Friday." in reply["data"]["context"]

        def lengths_pending() -> int:
            return int(
                running.curl("http://x/api/v1/health")[1]["data"]["indexes"]["lengths"]["pending"]
            )

        wait_until(lambda: lengths_pending() == 0, timeout=30)
    lengths = "SELECT group_concat(chars) FROM (SELECT chars FROM tiny_lengths ORDER BY 1)"
    assert (
        index_sql(workspace, lengths).strip()
        == f"{len('Deadline is Friday.')},{len('The user drinks green tea.')}"
    )
