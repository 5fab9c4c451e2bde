"""Credentials in memory text: found with detect-secrets, so none reaches a commit.

A save is checked before anything is written (``memory.secrets``: refuse, the default;
redact, the secret replaced by a marker; allow, no check), ``oryxmem scan`` checks the
files (and their git history), and the pre-commit hook checks what is staged. The
detector is detect-secrets' own plugins and filters (cloud and service keys, private
keys, passwords in URLs, quoted high-entropy strings), with its default settings;
it is imported at the first check that needs it, so a command that checks nothing never
loads it, and one that checks a plain sentence need not either: where any plugin could see
a candidate (its patterns, and the keyword detector's words) is kept in a file of the user's
cache, and a text with none of them holds nothing. Each pattern is searched for only in the
texts that hold one of its anchors (oryxmem/anchors.py), kept in that file beside it.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import stat
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oryxmem.anchors import AnchoredSearch, Anchors
from oryxmem.errors import SecretRefusedError
from oryxmem.fileio import atomic_write

log = logging.getLogger("oryxmem.secrets")

MODES = ("refuse", "redact", "allow")
MARKER = "[secret removed: {kind}]"
_lock = threading.Lock()  # detect-secrets keeps its settings and caches in globals
_configured: list[_Look] = []  # the process's detect-secrets settings are set
# Where a plugin could see a candidate, once known in this process (None: some plugin's
# candidates no pattern bounds, so every text is scanned).
_candidates_known: list[_Candidates | None] = []
# The file that keeps them between processes, and its shape: a file of another shape, or
# made from another install of detect-secrets (_library_key), is made again. Importing the
# library costs about 90 ms (every plugin module imports `requests`): most of a cold
# `oryxmem save` with no daemon, which then checks one plain sentence.
CANDIDATES_FILE = "secrets-candidates.json"
CANDIDATES_FORMAT = 2


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
    with _lock:
        candidates = _candidates()
        if candidates is not None and not any(candidates.maybe(line) for _, line in numbered):
            return []
        from detect_secrets.core.scan import _process_line_based_plugins

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
    has_keyword = _holds_a_keyword(stripped, look.keywords, look.ascii_keywords)
    for plugin in look.others:
        if isinstance(plugin, look.keyword_detector) and not has_keyword:
            continue
        if plugin.analyze_line(filename=filename, line=stripped):
            return True
    return False


def _holds_a_keyword(
    stripped: str, keywords: re.Pattern[str], ascii_keywords: re.Pattern[str]
) -> bool:
    """Does the line hold one of the keyword detector's words, as its patterns match them
    (any case)? An ASCII line is lowered and matched as is: the same answer, without
    matching case in Unicode (10x)."""
    if stripped.isascii():
        return ascii_keywords.search(stripped.lower()) is not None
    return keywords.search(stripped) is not None


@dataclass(frozen=True)
class _Look:
    patterns: list[re.Pattern[str]]  # of the plugins that are only their patterns
    others: list[Any]  # the plugins asked themselves
    keyword_detector: type
    keywords: re.Pattern[str]  # any of its words, as its patterns match them (any case)
    ascii_keywords: re.Pattern[str]  # the same for an ASCII line lowercased


@dataclass(frozen=True)
class _Candidates:
    """Where any plugin could see a candidate: one of the patterns its candidates are
    matched by, or one of the keyword detector's words (_Look's, with the same reading of
    case). A text with none of them holds nothing; one with some is looked at by the
    plugins themselves."""

    search: AnchoredSearch  # the patterns, each looked for only where its anchors are
    keywords: re.Pattern[str]
    ascii_keywords: re.Pattern[str]

    @property
    def patterns(self) -> list[re.Pattern[str]]:
        return self.search.patterns

    def maybe(self, line: str) -> bool:
        stripped = line.rstrip()  # as the scan reads each line
        if self.search.search(stripped):
            return True
        return _holds_a_keyword(stripped, self.keywords, self.ascii_keywords)

    @classmethod
    def of(cls, look: _Look) -> _Candidates | None:
        """From the plugins: a plugin that is only its patterns, its patterns; one that
        finds its candidates with a ``regex`` (the high-entropy strings, quoted) or its
        ``denylist`` (the JWT one), those; the keyword detector, its words. Any other
        plugin (None) leaves every text to the plugins."""
        patterns = list(look.patterns)
        for plugin in look.others:
            if isinstance(plugin, look.keyword_detector):
                continue
            regex = getattr(plugin, "regex", None)
            found = [regex] if isinstance(regex, re.Pattern) else getattr(plugin, "denylist", [])
            if not found or not all(isinstance(pattern, re.Pattern) for pattern in found):
                return None
            patterns += found
        return cls(AnchoredSearch.of(patterns), look.keywords, look.ascii_keywords)

    def fields(self) -> dict[str, Any]:
        return {
            "patterns": [
                [pattern.pattern, pattern.flags, None if found is None else sorted(found)]
                for pattern, found in self.search.anchored
            ],
            "keywords": self.ascii_keywords.pattern,
        }

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> _Candidates:
        words = str(fields["keywords"])
        return cls(
            AnchoredSearch(
                (re.compile(str(source), int(flags)), _kept_anchors(found))
                for source, flags, found in fields["patterns"]
            ),
            re.compile(words, re.IGNORECASE),
            re.compile(words),
        )


def _kept_anchors(found: Any) -> Anchors | None:
    if found is None:
        return None
    if not isinstance(found, list) or not all(isinstance(a, str) and a for a in found):
        raise TypeError("anchors are a list of strings")
    return frozenset(found)


def _candidates() -> _Candidates | None:
    """Where a plugin could see a candidate: known in this process, else read from the
    user's cache (made by this install of detect-secrets), else from the library, loaded
    now, and kept there. The caller holds _lock."""
    if not _candidates_known:
        key = _library_key()
        path = _candidates_path()
        found = _read_candidates(path, key) if key and path else None
        if found is None:
            found = _Candidates.of(_configure())
            if found is not None and key and path:
                _write_candidates(path, key, found)
        _candidates_known.append(found)
    return _candidates_known[0]


def _library_key() -> str | None:
    """Which install of detect-secrets this is, found without importing it: its folder
    and the identity and time of its package and plugins (an upgrade writes them anew)."""
    spec = importlib.util.find_spec("detect_secrets")
    if spec is None or not spec.origin:
        return None
    package = Path(spec.origin).parent
    try:
        marks = [os.stat(path) for path in (spec.origin, package / "plugins")]
    except OSError:
        return None
    return f"{package}:" + ":".join(f"{m.st_ino}.{m.st_mtime_ns}.{m.st_size}" for m in marks)


def _candidates_path() -> Path | None:
    """$XDG_CACHE_HOME/oryxmem/, else ~/.cache/oryxmem/ (None: no home to keep it in)."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:
            return None
    return Path(base) / "oryxmem" / CANDIDATES_FILE


def _read_candidates(path: Path, key: str) -> _Candidates | None:
    """The kept candidates, if made for this install and this shape, in a file only this
    user can write (it decides which texts the plugins see); else None."""
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return None
        kept = json.loads(path.read_bytes())
        if kept.get("format") != CANDIDATES_FORMAT or kept.get("library") != key:
            return None
        return _Candidates.from_fields(kept)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError, re.error) as error:
        log.debug("%s not used (made again): %s", path, error)
        return None


def _write_candidates(path: Path, key: str, candidates: _Candidates) -> None:
    """Keep them for the next process; a cache that cannot be written costs only time."""
    kept = {"format": CANDIDATES_FORMAT, "library": key, **candidates.fields()}
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(path, json.dumps(kept).encode(), default_mode=0o600)
        os.chmod(path, 0o600)  # (a replaced file keeps the mode it had)
    except OSError as error:
        log.debug("%s not written: %s", path, error)


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
