"""The MEMORY.md v1 format (docs/design.md §3) as pure functions.

A file is a list of physical lines. Parsing finds the core and archival
entries in them; editing only ever inserts or deletes whole lines, so every
byte a human wrote outside those lines survives, and a save is a one-line diff.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from oryxmem.errors import EmptyContentError, InvalidContentError, InvalidScopeError
from oryxmem.store.column import EntryColumn, EntryLines, number_of_key
from oryxmem.store.lines import Lines

CORE = "core"
ARCHIVAL = "archival"
SCOPES = (CORE, ARCHIVAL)
CANONICAL_HEADINGS = {CORE: "## 核心记忆", ARCHIVAL: "## 归档记忆"}
_HEADING_TITLES = {"核心记忆": CORE, "core": CORE, "归档记忆": ARCHIVAL, "archival": ARCHIVAL}

# Every code point str.splitlines() breaks on, besides LF and CR.
_OTHER_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_ESCAPES = {ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r"} | {
    ord(ch): f"\\u{ord(ch):04x}" for ch in _OTHER_LINE_BREAKS
}
# C0 controls that are neither TAB nor a line break, DEL and the C1 controls but NEL (a
# line break, escaped), which a terminal obeys (U+009B starts a command, as ESC [ does);
# and lone surrogates (which cannot be written as UTF-8).
_FORBIDDEN_RE = re.compile("[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f\ud800-\udfff]")
_LONE_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_NEEDS_ESCAPE_RE = re.compile("[" + re.escape("\\\n\r" + _OTHER_LINE_BREAKS) + "]")
_UNESCAPE_RE = re.compile(r"\\(\\|n|r|u[0-9a-fA-F]{4})")
_UNESCAPABLE_CODEPOINTS = {ord(ch) for ch in _OTHER_LINE_BREAKS}

_HEADING_RE = re.compile(r"(#{1,2})[ \t]+(.*?)[ \t#]*")
_ITEM_RE = re.compile(r"[-*+][ \t]+(.*)")
_STAMPED_ITEM_RE = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\][ \t]+(.*)")
# The common line, matched whole with its line ending: "- [ts] content\r\n".
_STAMPED_LINE_RE = re.compile(r"- \[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\][ \t]+(.*)\n?")
_CONFLICT_PREFIXES = ("<<<<<<<", ">>>>>>>", "|||||||")


# --- escaping ---------------------------------------------------------------


def normalize_content(content: str) -> str:
    """Strip content and refuse what can never be stored: empty text, C0 controls."""
    stripped = content.strip()
    if not stripped:
        raise EmptyContentError("content is empty")
    bad = _FORBIDDEN_RE.search(stripped)
    if bad:
        what = "a lone surrogate" if has_lone_surrogate(bad.group()) else "the control character"
        raise InvalidContentError(
            f"content holds {what} U+{ord(bad.group()):04X} at offset {bad.start()}"
        )
    return stripped


def has_lone_surrogate(text: str) -> bool:
    """Half of a UTF-16 pair, which no UTF-8 file or SQLite text can hold."""
    return _LONE_SURROGATE_RE.search(text) is not None


def escape_content(content: str) -> str:
    """Make content safe to sit on one physical line: it can never forge a line."""
    return content.translate(_ESCAPES) if _NEEDS_ESCAPE_RE.search(content) else content


def _unescape_match(match: re.Match[str]) -> str:
    token = match.group(1)
    if token == "\\":
        return "\\"
    if token == "n":
        return "\n"
    if token == "r":
        return "\r"
    codepoint = int(token[1:], 16)
    if codepoint in _UNESCAPABLE_CODEPOINTS:
        return chr(codepoint)
    return match.group(0)


def unescape_content(text: str) -> str:
    """Reverse escape_content exactly; leave backslashes it never writes alone."""
    if "\\" not in text:
        return text
    return _UNESCAPE_RE.sub(_unescape_match, text)


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InvalidScopeError(f"scope must be 'core' or 'archival', not {scope!r}")
    return scope


# --- entries ----------------------------------------------------------------


class Entry(NamedTuple):
    """One memory entry: what it says, when, and its identity for sync.

    A NamedTuple, not a dataclass: a large file holds 100,000 of them and
    building them is most of the cost of a parse.
    """

    scope: str
    ts: str | None
    content: str
    entry_id: str

    def render(self) -> str:
        return render_entry_line(self.ts, self.content)


def render_entry_line(ts: str | None, content: str) -> str:
    """The line body (no line ending) that stores an entry."""
    escaped = escape_content(content)
    return f"- [{ts}] {escaped}" if ts else f"- {escaped}"


def entry_key(scope: str, ts: str | None, content: str) -> str:
    """A short stable hash of (scope, timestamp, content): the id of its first copy."""
    return _key_digest(scope, ts, content).hex()


def key_number(scope: str, ts: str | None, content: str) -> int:
    """The key of (scope, timestamp, content) as the number its 16 hex digits spell."""
    return int.from_bytes(_key_digest(scope, ts, content), "big")


def _key_digest(scope: str, ts: str | None, content: str) -> bytes:
    material = f"{scope}\n{ts or ''}\n{content}".encode("utf-8", "surrogatepass")
    return _blake2b(material, digest_size=8).digest()


_blake2b = hashlib.blake2b


class Counts(Protocol):
    """What has seen ids already: how many copies of a key (an EntryIds, a parsed file)."""

    def count(self, key: str) -> int: ...


class EntryIds:
    """The one place entry ids are made: the key of (scope, timestamp, content), and for
    the n-th exact repeat in file order the suffix ``-n``.

    ``on_top_of`` numbers entries that come after those another has seen (what a save
    will add to a parsed file) without copying its counts.
    """

    __slots__ = ("_base", "_seen")

    def __init__(self, on_top_of: Counts | None = None) -> None:
        self._seen: dict[str, int] = {}
        self._base = on_top_of

    @classmethod
    def counting(cls, ids: Iterable[str]) -> EntryIds:
        """An allocator that has seen these ids already (rows read back from SQLite)."""
        allocator = cls()
        for entry_id in ids:
            key = entry_id.partition("-")[0]
            allocator._seen[key] = allocator._seen.get(key, 0) + 1
        return allocator

    def count(self, key: str) -> int:
        seen = self._seen.get(key, 0)
        return seen + self._base.count(key) if self._base is not None else seen

    def allocate(self, scope: str, ts: str | None, content: str) -> str:
        key = entry_key(scope, ts, content)
        seen = self._seen.get(key, 0)
        self._seen[key] = seen + 1
        ordinal = seen if self._base is None else seen + self._base.count(key)
        return key if ordinal == 0 else f"{key}-{ordinal}"

    def entry(self, scope: str, ts: str | None, content: str) -> Entry:
        return Entry(scope, ts, content, self.allocate(scope, ts, content))


def numbered(entries: Iterable[EntryText]) -> list[Entry]:
    """The entries with the ids they get in this order."""
    ids = EntryIds()
    return [ids.entry(e.scope, e.ts, e.content) for e in entries]


class EntryText(Protocol):
    """What an entry says, without its identity: an Entry, or a NewEntry to be written."""

    @property
    def scope(self) -> str: ...
    @property
    def ts(self) -> str | None: ...
    @property
    def content(self) -> str: ...


# --- parsing ----------------------------------------------------------------


@dataclass(frozen=True)
class UnparsedLine:
    """A line inside a memory section that is neither an entry nor blank."""

    line_number: int  # 1-based, as an editor shows it
    text: str


@dataclass
class Section:
    scope: str
    heading_index: int
    # Index of the last non-blank line of the section: new entries go after it.
    last_content_index: int


class MemoryDocument:
    """A parsed MEMORY.md: its physical lines and what they mean.

    ``lines`` keep their own line endings, so joining them gives back the file byte for
    byte. Each section's entries are a column of them (store/column.py): the line each
    is on and its id, the entry read from its line when asked for; ``entry_lines`` maps
    every entry id to the index of its line.
    """

    def __init__(self, lines: Lines) -> None:
        self.lines = lines
        self.core: EntryColumn[Entry] = EntryColumn(lines, CORE, entry_on_line)
        self.archival: EntryColumn[Entry] = EntryColumn(lines, ARCHIVAL, entry_on_line)
        self.sections: dict[str, Section] = {}
        self.unparsed: list[UnparsedLine] = []
        self.conflict_lines: list[int] = []
        self.entry_lines: Mapping[str, int] = EntryLines(self.core, self.archival)

    def count(self, key: str) -> int:
        """How many copies of the entry with this key the file holds (EntryIds.count)."""
        number = number_of_key(key)
        return 0 if number is None else self.core.count(number) + self.archival.count(number)

    def entry(self, entry_id: str) -> Entry | None:
        """The entry with this id, if the file holds it."""
        for column in (self.core, self.archival):
            at = column.position(entry_id)
            if at is not None:
                return column[at]
        return None

    def entry_at_line(self, index: int) -> Entry | None:
        """The entry on line ``index``, if one is."""
        return self.core.on_line(index) or self.archival.on_line(index)

    def add_entry(self, entry: Entry, index: int) -> None:
        """An entry (of its scope's section) on line ``index``, after the others."""
        self.entries(entry.scope).add_id(index, entry.entry_id)

    @property
    def newline(self) -> str:
        """The file's line ending (its first line's)."""
        return self.lines.newline

    @property
    def parseable(self) -> bool:
        return not self.conflict_lines

    @property
    def text(self) -> str:
        return self.lines.text()

    @property
    def ends_with_newline(self) -> bool:
        return not self.lines or self.lines[-1].endswith("\n")

    def entries(self, scope: str) -> EntryColumn[Entry]:
        return self.core if scope == CORE else self.archival

    def all_entries(self) -> list[Entry]:
        return [*self.core, *self.archival]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryDocument):
            return NotImplemented
        return (self.lines, self.core, self.archival, self.sections, self.unparsed) == (
            other.lines,
            other.core,
            other.archival,
            other.sections,
            other.unparsed,
        ) and self.conflict_lines == other.conflict_lines

    __hash__ = None  # type: ignore[assignment]


def split_physical_lines(text: str) -> list[str]:
    """Split on LF only, keeping endings: the other line breaks are content."""
    pieces = text.split("\n")
    lines = [piece + "\n" for piece in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])
    return lines


def line_body(line: str) -> str:
    body = line[:-1] if line.endswith("\n") else line
    return body[:-1] if body.endswith("\r") else body


def heading_scope(body: str) -> tuple[bool, str | None]:
    """(is a section boundary, the memory scope it opens if any)."""
    match = _HEADING_RE.fullmatch(body)
    if not match:
        return False, None
    title = match.group(2).strip()
    if len(match.group(1)) != 2:
        return True, None
    return True, _HEADING_TITLES.get(title.casefold())


def parse_entry_body(body: str) -> tuple[str | None, str] | None:
    """(timestamp or None, unescaped content) for an entry line, else None."""
    item = _ITEM_RE.fullmatch(body)
    if not item:
        return None
    rest = item.group(1)
    stamped = _STAMPED_ITEM_RE.fullmatch(rest)
    if stamped:
        ts, raw = stamped.group(1), stamped.group(2)
    else:
        ts, raw = None, rest
    raw = raw.strip()
    if not raw:
        return None
    return ts, unescape_content(raw)


def detect_newline(lines: Sequence[str]) -> str:
    return "\r\n" if lines and lines[0].endswith("\r\n") else "\n"


_CONFLICT_RE = re.compile(r"^(?:<<<<<<<|>>>>>>>|\|\|\|\|\|\|\|)(?: |\r?$)", re.MULTILINE)


def conflict_line_numbers(text: str) -> list[int]:
    """1-based numbers of the lines that are git conflict markers."""
    if not any(marker in text for marker in _CONFLICT_PREFIXES):  # memchr-fast, the usual case
        return []
    return [text.count("\n", 0, match.start()) + 1 for match in _CONFLICT_RE.finditer(text)]


def parse(text: str, data: bytes | None = None) -> MemoryDocument:
    """Read a MEMORY.md (``data``: its bytes, when at hand). Never raises: problems are
    reported on the document.

    This loop runs once per line of files that grow to 100,000 entries, so the
    common line (a stamped entry) is matched whole, with one regular expression.
    """
    physical = split_physical_lines(text)
    doc = MemoryDocument(Lines(physical, detect_newline(physical), data))
    doc.conflict_lines = conflict_line_numbers(text)
    if doc.conflict_lines:
        return doc
    column = doc.archival
    section: Section | None = None
    for index, line in enumerate(physical):
        if section is not None:  # in a section: its entries, and what else it holds
            parsed = _stamped_entry(line) or _other_line(doc, section, line, index)
            if parsed is _SKIP:
                continue
            if parsed is not None:
                column.add(index, key_number(section.scope, *parsed))
                section.last_content_index = index
                continue
        opened = _heading(doc, line, index)
        if opened is not _SKIP:  # a heading that ends a section, opening one or none
            section = opened
            if opened is not None:
                column = doc.entries(opened.scope)
    doc.core.settle()
    doc.archival.settle()
    return doc


def _stamped_entry(line: str) -> tuple[str, str] | None:
    """(timestamp, content) of the common line, "- [ts] content" and its ending."""
    match = _STAMPED_LINE_RE.fullmatch(line)
    if match is None:
        return None
    raw = match.group(2).strip()
    return (match.group(1), unescape_content(raw)) if raw else None


def entries_holding(entries: EntryColumn[Entry], folded: str) -> list[Entry]:
    """The entries whose content, casefolded, holds ``folded``. A line with no backslash
    holds its content as it is (nothing was unescaped), so only the lines that hold the
    words, or a backslash, are read as entries."""
    found = entries.where(lambda line: "\\" in line or folded in line.casefold())
    return [entry for entry in found if folded in entry.content.casefold()]


def entry_on_line(scope: str, line: str, entry_id: str) -> Entry:
    """The entry parse() found on this line of a section, made again."""
    parsed = _stamped_entry(line) or parse_entry_body(line_body(line))
    if parsed is None:
        raise ValueError(f"no entry on the line {line!r}")
    return Entry(scope, parsed[0], parsed[1], entry_id)


class _Skip(enum.Enum):
    """What _other_line and _heading give for a line that is nothing to act on."""

    LINE = 0


_SKIP = _Skip.LINE


def _other_line(
    doc: MemoryDocument, section: Section, line: str, index: int
) -> tuple[str | None, str] | _Skip | None:
    """A line in a section that is not a stamped entry: an entry written by hand (ts,
    content), a heading (None: the caller reads it as one), or _SKIP (a blank line, or
    one kept as it is and told as unparsed)."""
    body = line_body(line)
    if body.startswith("#") and heading_scope(body)[0]:
        return None
    if not body.strip():
        return _SKIP
    parsed = parse_entry_body(body)
    if parsed is None:
        doc.unparsed.append(UnparsedLine(index + 1, body))
        section.last_content_index = index
        return _SKIP
    return parsed


def _heading(doc: MemoryDocument, line: str, index: int) -> Section | _Skip | None:
    """The section a heading line opens (recorded on doc), None for a heading that ends
    a section without opening one, _SKIP for any other line."""
    body = line_body(line)
    if index == 0 and body.startswith("\ufeff"):
        body = body[1:]
    if not body.startswith("#"):
        return _SKIP
    boundary, opened = heading_scope(body)
    if not boundary:
        return _SKIP
    if opened is None:
        return None
    section = doc.sections[opened] = Section(opened, index, index)
    return section


# --- editing ----------------------------------------------------------------


@dataclass(frozen=True)
class NewEntry:
    scope: str
    ts: str | None
    content: str


def plan_entries(doc: MemoryDocument, additions: Iterable[EntryText]) -> list[Entry]:
    """The entries (with their ids) that adding these to doc would create."""
    ids = EntryIds(on_top_of=doc)
    return [ids.entry(add.scope, add.ts, add.content) for add in additions]


def append_at_end(doc: MemoryDocument, additions: Sequence[EntryText]) -> str | None:
    """The text to append to the file to add these entries, when they land at its very end.

    None when they belong elsewhere (their section is not the last thing in the
    file, or they go to both sections) and the file must be rewritten instead.
    """
    scopes = {addition.scope for addition in additions}
    if len(scopes) != 1:
        return None
    section = doc.sections.get(scopes.pop())
    if section is None or section.last_content_index != len(doc.lines) - 1:
        return None
    prefix = "" if doc.ends_with_newline else doc.newline
    lines = (render_entry_line(a.ts, a.content) + doc.newline for a in additions)
    return prefix + "".join(lines)


def record_appended_many(doc: MemoryDocument, appended_text: str, entries: Sequence[Entry]) -> None:
    """Update doc in place after the text of these entries was appended to the file."""
    if not doc.ends_with_newline:
        doc.lines[-1] += doc.newline
        appended_text = appended_text[len(doc.newline) :]
    lines = split_physical_lines(appended_text)
    if len(lines) != len(entries):
        raise ValueError("one appended line per entry")
    for line, entry in zip(lines, entries, strict=True):
        doc.lines.append(line)
        index = len(doc.lines) - 1
        doc.add_entry(entry, index)
        doc.sections[entry.scope].last_content_index = index
    for column in (doc.core, doc.archival):
        column.settle()


def apply_edits(
    doc: MemoryDocument,
    additions: Sequence[EntryText],
    removals: Collection[str] = (),
    replacements: Mapping[str, EntryText] | None = None,
) -> str:
    """The file text after removing the lines of some entries, writing others anew in
    their place (``replacements``: id -> what it says now) and adding more.

    Only whole lines are removed, replaced or inserted. New entries go at the end of
    their section; a missing section is created (core before archival when possible).
    """
    replacements = replacements or {}
    unknown = [i for i in [*removals, *replacements] if i not in doc.entry_lines]
    if unknown:
        raise KeyError(f"no entries with ids {unknown}")
    removed_indexes = {doc.entry_lines[entry_id] for entry_id in removals}
    replaced = {doc.entry_lines[i]: entry for i, entry in replacements.items()}
    nl = doc.newline
    inserts, tail = _placed(doc, additions)
    out: list[str] = list(inserts.get(-1, []))
    for index, line in enumerate(doc.lines):
        if index in replaced:
            ending = line[len(line.rstrip("\r\n")) :]
            out.append(render_entry_line(replaced[index].ts, replaced[index].content) + ending)
        elif index not in removed_indexes:
            out.append(line)
        follow = inserts.get(index)
        if follow:
            _end_line(out, nl)
            out.extend(follow)
    if tail:
        _end_line(out, nl)
        out.extend(tail)
    return "".join(out)


def _placed(
    doc: MemoryDocument, additions: Sequence[EntryText]
) -> tuple[dict[int, list[str]], list[str]]:
    """Where new lines go: (after which line index -> the lines, the lines at the end)."""
    nl = doc.newline
    inserts: dict[int, list[str]] = {}
    tail: list[str] = []
    for scope in SCOPES:
        lines = [
            render_entry_line(add.ts, add.content) + nl for add in additions if add.scope == scope
        ]
        if not lines:
            continue
        section = doc.sections.get(scope)
        if section is not None:
            inserts.setdefault(section.last_content_index, []).extend(lines)
        elif scope == CORE and ARCHIVAL in doc.sections:
            before = doc.sections[ARCHIVAL].heading_index - 1
            inserts.setdefault(before, []).extend([CANONICAL_HEADINGS[CORE] + nl, *lines])
        else:
            needs_gap = bool(tail) or any(line_body(line).strip() for line in doc.lines)
            tail.extend(([nl] if needs_gap else []) + [CANONICAL_HEADINGS[scope] + nl, *lines])
    return inserts, tail


def _end_line(out: list[str], nl: str) -> None:
    """A last line without its line break gets one, so that more can follow it."""
    if out and not out[-1].endswith("\n"):
        out[-1] += nl


def new_file_text() -> str:
    """What a new MEMORY.md holds before its first entry."""
    return f"{CANONICAL_HEADINGS[CORE]}\n\n{CANONICAL_HEADINGS[ARCHIVAL]}\n"
