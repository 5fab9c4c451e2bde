"""The save check's credentials (secrets.py): its quick look at the plugins first finds
exactly what detect-secrets' own scan finds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oryxmem import secrets

SAMPLES = Path(__file__).parents[1] / "samples"
SECRET_LINES = [
    "the deploy key is AKIAIOSFODNN7EXAMPLE",
    "password = 'hunter2hunter2'",
    'db_pass: "s3cr3t-Passw0rd-here"',
    "api_key := bar-value-12345",
    "-----BEGIN RSA PRIVATE KEY-----",
    "clone https://ada:correct-horse-battery@git.example.com/repo.git",
    "token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    'quoted "c2VjcmV0IGtleSBmb3IgdGhlIHByb2QgZGF0YWJhc2UgaGVyZQ==" in a note',
    "hex '8b1a9953c4611296a827abf8c47804d7e6c49c6b'",
    "the server is at 8.8.4.4 now",
]


# The keyword detector ignores case (in Unicode): the quick look lowers an ASCII line and
# reads any other as the detector does ('ſ' is an 's' to it; 'Ñ' an 'ñ').
CASED_KEYWORD_LINES = [
    "PASSWORD = 'hunter2hunter2'",
    'Api_Key: "bar-value-12345-abcdef"',
    "DB_Pass = 'correct-horse-battery'",
    "CONTRASEÑA = 'hunter2hunter2'",
    "paſſword = 'hunter2hunter2'",
    "Secret: 'ünïcödé-välüe-12345'",
]


def library_scan(lines: list[str]) -> list[secrets.Finding]:
    """detect-secrets' scan of every line, as find() ran it before its quick look."""
    from detect_secrets.core.scan import _process_line_based_plugins

    with secrets._lock:
        secrets._configure()
        found = {
            (s.line_number, s.secret_value or ""): secrets.Finding(
                s.line_number, s.type, s.secret_value or ""
            )
            for s in _process_line_based_plugins(list(enumerate(lines, start=1)), "MEMORY.md")
        }
    return sorted(found.values(), key=lambda item: (item.line, item.kind))


def test_the_quick_look_finds_what_detect_secrets_finds() -> None:
    lines = [line for path in sorted(SAMPLES.glob("*.md")) for line in path.read_text().split("\n")]
    lines += SECRET_LINES
    lines += [f"password is not a secret here {n}" for n in range(3)]  # a keyword, no value
    lines += CASED_KEYWORD_LINES
    for line in lines:
        assert secrets.find([line]) == library_scan([line]), line
    assert secrets.find(lines) == library_scan(lines)
    assert sum(bool(secrets.find([line])) for line in SECRET_LINES) >= len(SECRET_LINES) - 2
    assert all(secrets.find([line]) for line in CASED_KEYWORD_LINES), "each holds a password"


def every_line() -> list[str]:
    lines = [line for path in sorted(SAMPLES.glob("*.md")) for line in path.read_text().split("\n")]
    return lines + SECRET_LINES + CASED_KEYWORD_LINES


def test_a_line_the_library_finds_a_credential_in_is_a_candidate_as_kept_too() -> None:
    """What lets a text with no candidate skip the plugins (and a process skip loading the
    library): every line the library's scan flags has one, read from the plugins or from
    the file they are kept in; and most plain lines have none."""
    with secrets._lock:
        look = secrets._configure()
    candidates = secrets._Candidates.of(look)
    assert candidates is not None
    kept = secrets._Candidates.from_fields(candidates.fields())
    flagged = [line for line in every_line() if library_scan([line])]
    assert len(flagged) >= len(SECRET_LINES) - 2
    assert all(candidates.maybe(line) and kept.maybe(line) for line in flagged)
    for line in every_line():
        assert candidates.maybe(line) == kept.maybe(line), line
    plain = ["User prefers tabs.", "Shipped 1.4 on Friday", "nota sobre o editor: vim"]
    assert not any(candidates.maybe(line) for line in plain)


CHECK_IN_A_PROCESS = """
import sys
from oryxmem.errors import SecretRefusedError
from oryxmem.secrets import checked_content
checked_content("User prefers tabs.", "refuse")
loaded = "detect_secrets" in sys.modules
try:
    checked_content("the deploy key is AKIAIOSFODNN7EXAMPLE", "refuse")
    refused = False
except SecretRefusedError:
    refused = True
print(loaded, refused)
"""


def check_in_a_process(cache: Path) -> tuple[str, str]:
    """(whether a plain sentence's check loaded detect-secrets, whether a key was refused),
    in a new process keeping its cache in ``cache``."""
    done = subprocess.run(
        [sys.executable, "-c", CHECK_IN_A_PROCESS],
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded, refused = done.stdout.split()
    return loaded, refused


def test_a_process_checking_a_plain_sentence_loads_the_library_only_the_first_time(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "cache" / "oryxmem" / secrets.CANDIDATES_FILE
    assert check_in_a_process(tmp_path / "cache") == ("True", "True")  # made, and kept
    assert kept.stat().st_mode & 0o777 == 0o600
    assert check_in_a_process(tmp_path / "cache") == ("False", "True")


@pytest.mark.parametrize("spoil", ["other install", "others may write it", "not JSON"])
def test_a_kept_file_not_made_by_this_install_or_writable_by_others_is_made_again(
    tmp_path: Path, spoil: str
) -> None:
    kept = tmp_path / "cache" / "oryxmem" / secrets.CANDIDATES_FILE
    check_in_a_process(tmp_path / "cache")
    if spoil == "other install":
        kept.write_text(kept.read_text().replace('"library": "', '"library": "elsewhere'))
    elif spoil == "others may write it":
        kept.chmod(0o666)
    else:
        kept.write_text("{not json")
    assert check_in_a_process(tmp_path / "cache") == ("True", "True")  # and made again
    assert kept.stat().st_mode & 0o777 == 0o600
    assert check_in_a_process(tmp_path / "cache") == ("False", "True")


def test_every_keyword_pattern_holds_the_keyword_list() -> None:
    """What lets a line without any of the words skip the keyword detector's patterns."""
    from detect_secrets.plugins.keyword import (
        DENYLIST,
        QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
        REGEX_BY_FILETYPE,
    )

    words = "|".join(DENYLIST)
    tables = [*REGEX_BY_FILETYPE.values(), QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP]
    patterns = [regex for table in tables for regex in table]
    assert patterns and all(words in regex.pattern for regex in patterns)
