"""Credentials in memory text: found with detect-secrets, so none reaches a commit.

A save is checked before anything is written (``memory.secrets``: refuse, the default;
redact, the secret replaced by a marker; allow, no check), ``oryxmem scan`` checks the
files (and their git history), and the pre-commit hook checks what is staged. The
detector is detect-secrets' own plugins and filters (cloud and service keys, private
keys, passwords in URLs, quoted high-entropy strings), with its default settings;
it is imported at the first check, so a command that checks nothing never loads it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from oryxmem.errors import SecretRefusedError

MODES = ("refuse", "redact", "allow")
MARKER = "[secret removed: {kind}]"
_lock = threading.Lock()  # detect-secrets keeps its settings and caches in globals
_configured: list[_Look] = []  # the process's detect-secrets settings are set


def _configure() -> _Look:
    """detect-secrets' default plugins and filters (what its default_settings() enters),
    set once for the process: entering and leaving them at each check cost twice what a
    scan does; and how _a_plugin_matches asks those plugins. The caller holds _lock."""
    if not _configured:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
        from detect_secrets.settings import (
            cache_bust,
            configure_settings_from_baseline,
            get_plugins,
        )

        plugins: Any = get_mapping_from_secret_type_to_class().values()
        cache_bust()
        configure_settings_from_baseline({"plugins_used": [{"name": p.__name__} for p in plugins]})
        _configured.append(_quick_look(get_plugins()))
    return _configured[0]


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

    with _lock:
        look = _configure()
        if not any(_a_plugin_matches(look, line, filename) for _, line in numbered):
            return []
        found: Iterator[Any] = _process_line_based_plugins(numbered, filename)
        seen: dict[tuple[int, str], Finding] = {}
        for secret in found:
            value = secret.secret_value or ""
            key = (secret.line_number, value)
            if key not in seen:
                seen[key] = Finding(secret.line_number, secret.type, value)
    return sorted(seen.values(), key=lambda item: (item.line, item.kind))


def _a_plugin_matches(look: _Look, line: str, filename: str) -> bool:
    """Does any plugin see a candidate in the line, before detect-secrets' filters? What
    its scan finds is a candidate of a plugin that no filter dropped, so a text where no
    plugin sees one holds nothing: the plugins are asked directly, without the scan's
    per-call machinery, which costs four times as much; the rare line where one does is
    scanned by detect-secrets as a whole. A plugin that is only its patterns (detect-
    secrets' RegexBasedDetector as it is) sees a candidate where one of them matches, so
    those are searched for directly (a match whose groups are all empty is no candidate
    to it: a look too many, never one too few). The keyword detector's patterns each
    hold its list of words (``DENYLIST``): a line with none of them is not run through
    its long patterns."""
    stripped = line.rstrip()  # as the scan reads each line
    if any(pattern.search(stripped) for pattern in look.patterns):
        return True
    if stripped.isascii():  # the same answer, without matching case in Unicode (10x)
        has_keyword = look.ascii_keywords.search(stripped.lower()) is not None
    else:
        has_keyword = look.keywords.search(stripped) is not None
    for plugin in look.others:
        if isinstance(plugin, look.keyword_detector) and not has_keyword:
            continue
        if plugin.analyze_line(filename=filename, line=stripped):
            return True
    return False


@dataclass(frozen=True)
class _Look:
    patterns: list[re.Pattern[str]]  # of the plugins that are only their patterns
    others: list[Any]  # the plugins asked themselves
    keyword_detector: type
    keywords: re.Pattern[str]  # any of its words, as its patterns match them (any case)
    ascii_keywords: re.Pattern[str]  # the same for an ASCII line lowercased


def _quick_look(plugins: Sequence[Any]) -> _Look:
    """How _a_plugin_matches asks these plugins. The keyword detector's words are
    lowercase, and on ASCII text ignoring case is lowering it."""
    from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
    from detect_secrets.plugins.keyword import DENYLIST, KeywordDetector

    def only_patterns(plugin: Any) -> bool:
        kind = type(plugin)
        return (
            isinstance(plugin, RegexBasedDetector)
            and kind.analyze_string is RegexBasedDetector.analyze_string
            and kind.analyze_line is BasePlugin.analyze_line
        )

    anywhere = "|".join(DENYLIST)
    return _Look(
        [pattern for plugin in plugins if only_patterns(plugin) for pattern in plugin.denylist],
        [plugin for plugin in plugins if not only_patterns(plugin)],
        KeywordDetector,
        re.compile(anywhere, re.IGNORECASE),
        re.compile(anywhere),
    )


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
