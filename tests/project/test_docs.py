"""The README's and the docs' examples run, in reading order, each in a fresh workspace:
what a page shows is what the commands print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def docs_pages() -> list[Path]:
    """The pages of docs/ in the order of mkdocs.yml's nav (the reading order)."""
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    return [DOCS / next(iter(item.values())) for item in nav]


def documents() -> dict[str, str]:
    return {
        "README": README.read_text(encoding="utf-8"),
        "docs": "\n".join(page.read_text(encoding="utf-8") for page in docs_pages()),
    }


TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
README_ROOT = "/home/ada/project"


EPOCH_MS = re.compile(r'"timestamp": \d+')
SESSION = re.compile(r"session [0-9a-f]{12}\b")


def console_blocks(text: str) -> list[list[tuple[str, str]]]:
    """The ```console blocks, each as (command, expected stdout) pairs."""
    blocks = []
    for block in re.findall(r"```console\n(.*?)```", text, re.DOTALL):
        examples = []
        for chunk in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
            command, _, output = chunk.partition("\n")
            examples.append((command, output))
        blocks.append(examples)
    return blocks


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


@pytest.mark.parametrize("document", ["README", "docs"])
def test_the_console_examples_run_as_shown(
    isolated_paths: Path, tmp_path: Path, document: str
) -> None:
    from support.daemon import daemon

    from oryxmem.workspace import Workspace

    text = documents()[document]
    blocks = console_blocks(text)
    assert sum(len(block) for block in blocks) >= 10
    env = {
        **os.environ,
        "ORYXMEM_ROOT": str(isolated_paths),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }

    def run(examples: list[tuple[str, str]]) -> None:
        for command, expected in examples:
            done = subprocess.run(
                command, shell=True, cwd=isolated_paths, env=env, capture_output=True, text=True
            )
            actual = TIMESTAMP.sub("2026-07-22 09:30:00", done.stdout)
            actual = EPOCH_MS.sub('"timestamp": 1784712600000', actual)
            actual = SESSION.sub("session 5f0c3b9a2e1d", actual)
            actual = actual.replace(str(isolated_paths.resolve()), README_ROOT)
            assert actual == expected, f"$ {command}\n{done.stderr}"
            assert "Traceback" not in done.stderr

    def run_python(code: str) -> None:
        done = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            capture_output=True,
            text=True,
            cwd=isolated_paths,
        )
        assert done.returncode == 0, f"{code}\n{done.stderr}"

    through_the_daemon = [code for code in python_blocks(text) if "Client" in code]
    for examples in blocks:
        if not any("--unix-socket" in command for command, _ in examples):
            run(examples)
            continue
        with daemon(Workspace(isolated_paths.resolve()), tmp_path / "daemon.log"):
            run(examples)
            for code in through_the_daemon:
                run_python(code)
    others = [code for code in python_blocks(text) if code not in through_the_daemon]
    assert len(others) + len(through_the_daemon) == len(python_blocks(text)) >= 1
    for code in others:
        run_python(code)


def test_the_docs_describe_the_stderr_of_their_examples(isolated_paths: Path) -> None:
    text = "\n".join(documents().values())
    env = {**os.environ, "ORYXMEM_ROOT": str(isolated_paths)}
    subprocess.run([sys.executable, "-m", "oryxmem", "init"], env=env, check=True)
    unsafe = subprocess.run(
        [sys.executable, "-m", "oryxmem", "save", "--agent", "../etc", "x"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert unsafe.stderr.startswith("oryxmem: warning: unsafe agent name '../etc': ")
    assert "oryxmem: warning: unsafe agent name '../etc': ..." in text
    empty = subprocess.run(
        [sys.executable, "-m", "oryxmem", "save", "--agent", "coder", ""],
        env=env,
        capture_output=True,
        text=True,
    )
    assert empty.returncode == 1
    assert f"`{empty.stderr.strip()}`" in text


def test_readme_opens_with_the_two_setup_commands() -> None:
    text = README.read_text(encoding="utf-8")
    setup = text.split("## Set up in two commands", 1)[1].split("##", 1)[0]
    assert "./dev demo" in setup and "./dev test" in setup
    ci = (README.parent / ".ci" / "run").read_text()
    assert "./dev test" in ci


def test_every_test_the_guarantees_name_exists() -> None:
    """Each promise in the Guarantees page points at tests that are there."""
    section = (DOCS / "guarantees.md").read_text(encoding="utf-8")
    tests_dir = ROOT / "tests"
    named = re.findall(r"`tests/(\w+/test_\w+\.py)(?:::(test_\w+))?`", section)
    assert len(named) >= 12
    for module, test in named:
        source = (tests_dir / module).read_text(encoding="utf-8")
        if test:
            assert f"def {test}(" in source, f"{module}::{test} is not there"


def test_the_readme_is_a_newcomers_five_minutes_and_starts_as_the_docs_do() -> None:
    text = README.read_text(encoding="utf-8")
    assert text.count("\n") <= 300
    first_minute = text.split("\n## Plugging into", 1)[0].rstrip() + "\n"
    assert first_minute == (DOCS / "index.md").read_text(encoding="utf-8")
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).is_file(), link
