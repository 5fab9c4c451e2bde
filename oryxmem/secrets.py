"""Credentials in memory text: found with detect-secrets, so none reaches a commit.

A save is checked before anything is written (``memory.secrets``: refuse, the default;
redact, the secret replaced by a marker; allow, no check), ``oryxmem scan`` checks the
files (and their git history), and the pre-commit hook checks what is staged. The
detector is detect-secrets' own plugins and filters (cloud and service keys, private
keys, passwords in URLs, quoted high-entropy strings), with its default settings;
it is imported at the first check, so a command that checks nothing never loads it.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from oryxmem.errors import SecretRefusedError

MODES = ("refuse", "redact", "allow")
MARKER = "[secret removed: {kind}]"
_lock = threading.Lock()  # detect-secrets keeps its settings and caches in globals
_configured: list[bool] = []  # the process's detect-secrets settings are set


def _configure() -> None:
    """detect-secrets' default plugins and filters (what its default_settings() enters),
    set once for the process: entering and leaving them at each check cost twice what a
    scan does. The caller holds _lock."""
    if not _configured:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.settings import cache_bust, configure_settings_from_baseline

        plugins: Any = get_mapping_from_secret_type_to_class().values()
        cache_bust()
        configure_settings_from_baseline({"plugins_used": [{"name": p.__name__} for p in plugins]})
        _configured.append(True)


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based, within the text checked
    kind: str  # detect-secrets' name for it, e.g. "AWS Access Key"
    value: str

    def describe(self) -> str:
        return f"line {self.line}: {self.kind}"


def find(lines: Iterable[str], filename: str = "MEMORY.md") -> list[Finding]:
    """What looks like a credential in these lines."""
    numbered = list(enumerate(lines, start=1))
    if not any(line.strip() for _, line in numbered):
        return []
    from detect_secrets.core.scan import _process_line_based_plugins
    from detect_secrets.settings import get_plugins

    with _lock:
        _configure()
        plugins = get_plugins()
        if not any(_a_plugin_matches(plugins, line, filename) for _, line in numbered):
            return []
        found: Iterator[Any] = _process_line_based_plugins(numbered, filename)
        seen: dict[tuple[int, str], Finding] = {}
        for secret in found:
            value = secret.secret_value or ""
            key = (secret.line_number, value)
            if key not in seen:
                seen[key] = Finding(secret.line_number, secret.type, value)
    return sorted(seen.values(), key=lambda item: (item.line, item.kind))


def _a_plugin_matches(plugins: Iterable[Any], line: str, filename: str) -> bool:
    """Does any plugin see a candidate in the line, before detect-secrets' filters? What
    its scan finds is a candidate of a plugin that no filter dropped, so a text where no
    plugin sees one holds nothing: the plugins are asked directly (a few regexes each),
    without the scan's per-call machinery, which costs four times as much; the rare line
    where one does is scanned by detect-secrets as a whole. The keyword detector's
    patterns each hold its list of words (``DENYLIST``): a line with none of them is not
    run through its long patterns."""
    keyword_detector, keywords = _keyword_check()
    stripped = line.rstrip()  # as the scan reads each line
    for plugin in plugins:
        if isinstance(plugin, keyword_detector) and not keywords.search(stripped):
            continue
        if plugin.analyze_line(filename=filename, line=stripped):
            return True
    return False


@functools.cache
def _keyword_check() -> tuple[type, re.Pattern[str]]:
    """The keyword detector's class, and any of its words as its patterns match them
    (ignoring case)."""
    from detect_secrets.plugins.keyword import DENYLIST, KeywordDetector

    return KeywordDetector, re.compile("|".join(DENYLIST), re.IGNORECASE)


def checked_content(content: str, mode: str) -> str:
    """The content as a save may store it: refused (SecretRefusedError) or redacted when
    it holds what looks like a credential, as ``mode`` says; else as it is."""
    if mode == "allow":
        return content
    findings = find(content.split("\n"))
    if not findings:
        return content
    if mode == "redact":
        return redacted(content, findings)
    kinds = ", ".join(dict.fromkeys(finding.kind for finding in findings))
    raise SecretRefusedError(
        f"the content looks like a credential ({kinds}); nothing was saved (memory.secrets"
        " = refuse: keep secrets out of memory, or set it to redact)",
        data={"kinds": list(dict.fromkeys(finding.kind for finding in findings))},
    )


def redacted(content: str, findings: Iterable[Finding]) -> str:
    # Longest first: a value that holds another is replaced whole.
    for finding in sorted(findings, key=lambda item: -len(item.value)):
        if finding.value:
            content = content.replace(finding.value, MARKER.format(kind=finding.kind))
    return content
