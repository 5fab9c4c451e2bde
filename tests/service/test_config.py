"""config.toml: defaults, checks, and set keeping the user's comments and layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from oryxmem.config import Config, default_config_text, set_value
from oryxmem.errors import InvalidConfigError


def test_defaults_without_a_file(tmp_path: Path) -> None:
    config = Config.load(tmp_path / "config.toml")
    assert config.archival_limit_chars == 4000
    assert config.footprint_max_chars == 200
    assert config.backend == "markdown" and config.timezone == "local"


def test_default_text_is_commented_and_loads(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(default_config_text())
    assert path.read_text().count("\n# ") >= 6
    assert Config.load(path).as_dict() == Config.defaults().as_dict()


def test_set_keeps_comments_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "# my notes about memory\n[memory]\n# keep this short\narchival_limit_chars = 4000  # inline\n"
        "backend = 'markdown'\n\n[daemon]\n# later\n"
    )
    set_value(path, "memory.archival_limit_chars", "1234")
    set_value(path, "daemon.socket", "/tmp/x.sock")
    text = path.read_text()
    assert "# my notes about memory" in text and "# keep this short" in text and "# inline" in text
    assert "archival_limit_chars = 1234" in text and "# later" in text
    assert Config.load(path).archival_limit_chars == 1234
    assert Config.load(path).get("daemon.socket") == "/tmp/x.sock"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("memory.nope", "1", "unknown config key"),
        ("nokey", "1", "unknown config key"),
        ("memory.archival_limit_chars", "0", "greater than 0"),
        ("memory.archival_limit_chars", "1.5", "whole number"),
        ("memory.timezone", "Europe/Paris", "must be one of local, UTC"),
    ],
)
def test_bad_keys_and_values_are_refused_and_change_nothing(
    tmp_path: Path, key: str, value: str, message: str
) -> None:
    path = tmp_path / "config.toml"
    path.write_text(default_config_text())
    before = path.read_text()
    with pytest.raises(InvalidConfigError, match=message):
        set_value(path, key, value)
    assert path.read_text() == before


def test_bad_file_values_are_refused_on_load(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[memory]\nmax_history_turns = true\n")
    with pytest.raises(InvalidConfigError, match="whole number"):
        Config.load(path)
    path.write_text("memory = 3\n")
    with pytest.raises(InvalidConfigError, match="must be a \\[table\\]"):
        Config.load(path)
