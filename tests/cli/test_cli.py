"""The CLI as a user runs it: a real subprocess, one-line errors, --json, stdin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.processes import run_cli

from oryxmem.workspace import Workspace


def test_save_from_stdin_keeps_newlines(workspace: Workspace) -> None:
    done = run_cli("save", "--agent", "coder", "-", "--json", stdin="line one\nline two\n")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["entry"]["content"] == "line one\nline two"
    assert data["entry"]["line"].endswith("line one\\nline two")
    assert data["agent"] == "coder" and data["fallback"] is None


def test_json_outputs_parse(workspace: Workspace) -> None:
    run_cli("save", "-a", "coder", "--scope", "core", "fact")
    run_cli("save", "-a", "coder", "did a thing")
    shown = json.loads(run_cli("show", "-a", "coder", "--json").stdout)
    assert [e["content"] for e in shown["core"]] == ["fact"]
    assert shown["markdown"].startswith("## 核心记忆\n")
    recalled = json.loads(run_cli("recall", "-a", "coder", "THING", "--json").stdout)
    assert len(recalled["lines"]) == 1
    context = json.loads(run_cli("context", "-a", "coder", "--json").stdout)
    assert context["context"].startswith("## 核心记忆\n")
    agents = json.loads(run_cli("agents", "--json").stdout)
    assert {a["agent"]: a["archival"] for a in agents} == {"": 0, "coder": 1}
    config = json.loads(run_cli("config", "get", "--json").stdout)
    assert config["memory.archival_limit_chars"] == 4000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["save", ""], "content is empty"),
        (["save", "bad\x01char"], "control character U+0001"),
        (["save", "--scope", "nope", "x"], "Invalid value for '--scope'"),
        (["recall", " "], "the recall keyword is empty"),
        (["config", "set", "memory.nope", "1"], "unknown config key 'memory.nope'"),
        (["config", "set", "memory.backend", "redis"], "must be one of markdown, sqlite, mem0"),
        (["config", "set", "memory.footprint_max_chars", "-3"], "must be greater than 0"),
        (["config", "get", "nope.nope"], "unknown config key"),
        (["bogus-command"], "No such command"),
    ],
)
def test_errors_are_one_line_and_non_zero(
    workspace: Workspace, args: list[str], message: str
) -> None:
    done = run_cli(*args)
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert (
        len([line for line in done.stderr.splitlines() if line.startswith("oryxmem: error")]) <= 1
    )


def test_save_to_a_conflicted_file_waits_in_the_database(workspace: Workspace) -> None:
    path = workspace.memory_path("coder")
    path.parent.mkdir(parents=True)
    path.write_text("## 归档记忆\n<<<<<<< HEAD\n- a\n=======\n- b\n>>>>>>> topic\n")
    before = path.read_bytes()
    done = run_cli("save", "-a", "coder", "saved mid-conflict", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert "conflict markers (lines 2, 6)" in data["deferred"]
    assert "conflict markers" in done.stderr
    assert path.read_bytes() == before, "a conflicted file is never written"
    assert run_cli("sync").returncode == 1  # still conflicted: reported, not ingested
    path.write_text("## 归档记忆\n- a\n- b\n")
    assert run_cli("sync").returncode == 0
    assert path.read_text().endswith("] saved mid-conflict\n")


def test_no_workspace_is_a_clear_error(tmp_path: Path) -> None:
    done = run_cli("show", env={"ORYXMEM_ROOT": ""}, cwd=tmp_path)
    assert done.returncode == 1
    assert "no .oryxos/ in" in done.stderr and "oryxmem init" in done.stderr


def test_broken_config_is_a_clear_error(workspace: Workspace) -> None:
    workspace.config_path.write_text("[memory\nbackend = ")
    done = run_cli("save", "x")
    assert done.returncode == 1 and "is not valid TOML" in done.stderr
    workspace.config_path.write_text("[memory]\narchival_limit_chars = 'many'\n")
    done = run_cli("context")
    assert "must be a whole number" in done.stderr


def test_root_option_and_discovery_from_a_subfolder(workspace: Workspace, tmp_path: Path) -> None:
    run_cli("--root", str(workspace.root), "save", "-a", "x", "via root")
    sub = workspace.root / "src" / "deep"
    sub.mkdir(parents=True)
    done = run_cli("recall", "-a", "x", "via", env={"ORYXMEM_ROOT": ""}, cwd=sub)
    assert done.stdout.strip().endswith("via root")


def test_init_is_idempotent_and_keeps_user_files(isolated_paths: Path) -> None:
    first = run_cli("init", "--git")
    assert first.returncode == 0 and "wrote .oryxos/.gitattributes" in first.stdout
    assert "run 'oryxmem git setup'" in first.stdout  # not a git repository yet
    config = isolated_paths / ".oryxos" / "config.toml"
    config.write_text("# mine\n[memory]\nbackend = 'sqlite'\n")
    again = run_cli("init")
    assert "already set up; nothing changed" in again.stdout
    assert config.read_text() == "# mine\n[memory]\nbackend = 'sqlite'\n"
    gitignore = (isolated_paths / ".oryxos" / ".gitignore").read_text()
    assert {"oryxos.db*", "run/", "*.tmp"} <= set(gitignore.split())
    assert "merge=oryxmem" in (isolated_paths / ".oryxos" / ".gitattributes").read_text()


def test_history_printed_multiline_content_and_escape_codes_raw(workspace: Workspace) -> None:
    """Regression: history once printed entry content as-is, breaking lines and
    letting a quarantined row's ESC sequence reach the terminal."""
    from support.sync import sql

    run_cli("save", "-a", "coder", "-", stdin="line one\nline two")
    run_cli("sync")
    sql(
        workspace,
        "INSERT INTO memory_entries(agent, content) VALUES ('coder', char(27) || '[31mred')",
    )
    run_cli("sync")
    out = run_cli("history", "--agent", "coder").stdout
    assert "\x1b" not in out
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("line one\\nline two")
    assert "\\x1b[31mred" in lines[1] and "quarantine" in lines[1]


@pytest.mark.parametrize(
    "args",
    [["save"], ["save", "--scope", "x", "y"], ["nosuch"], ["search", "--mode", "words", "q"]],
)
def test_a_usage_error_is_one_line_and_exit_2(workspace: Workspace, args: list[str]) -> None:
    done = run_cli(*args)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("oryxmem: error: "), done.stderr
    assert "--help'" in lines[0]
