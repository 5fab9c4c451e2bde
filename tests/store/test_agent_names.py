"""Agent names (docs/design.md §4): unsafe ones fall back to the global file, and say so."""

from __future__ import annotations

import os

import pytest

from oryxmem.service import MemoryService
from oryxmem.workspace import Workspace, agent_name_problem, resolve_agent


@pytest.mark.parametrize(
    "name",
    ["../x", "a/b", ".hidden", "..", ".", "nul\x00byte", "x" * 65, "a b", "tab\t", "back\\slash"],
)
def test_unsafe_names_fall_back_to_the_global_file(
    service: MemoryService, workspace: Workspace, name: str
) -> None:
    result = service.save(name, "where does this go?")
    assert result.agent.agent == ""
    assert result.agent.fell_back and repr(name) in (result.agent.fallback_reason or "")
    assert "where does this go?" in workspace.memory_path("").read_text()
    written = list(workspace.root.parent.rglob("MEMORY.md"))
    assert written == [workspace.memory_path("")]


@pytest.mark.parametrize("name", ["coder", "助手", "agent-1", "a_b.c", "x" * 64, "Ünïcödé", "١٢٣"])
def test_safe_names_get_their_own_file(
    service: MemoryService, workspace: Workspace, name: str
) -> None:
    result = service.save(name, "mine")
    assert not result.agent.fell_back
    assert workspace.memory_path(name).read_text().endswith("] mine\n")


def test_symlinked_agent_directory_pointing_outside_falls_back(
    service: MemoryService, workspace: Workspace, tmp_path: os.PathLike[str]
) -> None:
    outside = workspace.root.parent / "elsewhere"
    outside.mkdir()
    (workspace.agents_dir / "sneaky").symlink_to(outside, target_is_directory=True)
    result = service.save("sneaky", "secret")
    assert result.agent.agent == "" and "symbolic link" in (result.agent.fallback_reason or "")
    assert list(outside.iterdir()) == []


def test_symlinked_memory_file_falls_back(service: MemoryService, workspace: Workspace) -> None:
    target = workspace.root.parent / "target.md"
    target.write_text("")
    (workspace.agents_dir / "linked").mkdir()
    (workspace.agents_dir / "linked" / "MEMORY.md").symlink_to(target)
    assert resolve_agent(workspace, "linked").fell_back
    service.save("linked", "x")
    assert target.read_text() == ""


def test_none_and_empty_mean_the_global_file_without_a_warning(workspace: Workspace) -> None:
    for name in (None, ""):
        ref = resolve_agent(workspace, name)
        assert ref.agent == "" and not ref.fell_back


def test_name_rules() -> None:
    assert agent_name_problem("x" * 64) is None
    assert "longer" in (agent_name_problem("x" * 65) or "")
    assert "'.'" in (agent_name_problem(".x") or "")
    assert agent_name_problem("e\u0301") is not None  # a combining mark is not a letter
