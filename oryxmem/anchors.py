"""The literal strings a regular expression cannot match without: its anchors.

``anchors(pattern)`` gives a set of strings such that every match of the pattern holds
at least one of them, or None when no such set is known. A text that holds none of a
pattern's anchors cannot match it, so a pattern need only be searched for in the texts
that hold one: a substring test costs a fraction of a regular-expression search.

The set is read from the pattern's parse (Python's own, ``re._parser``) and is only
ever too wide, never too narrow: a piece of the pattern this does not understand adds
no anchor, and a pattern none of whose pieces gives one has none (it is always searched
for). Anchors are for ASCII texts only: a pattern that ignores case has lowercase
anchors, to be looked for in the text lowercased, and a letter outside ASCII gives none
(Unicode's case rules match some of them to ASCII letters: the Kelvin sign to k).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from typing import Any

try:  # Python's parser of regular expressions: private, so its absence only costs speed
    sre_parser: Any = importlib.import_module("re._parser")
    sre_constants: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - another Python's layout
    sre_parser = sre_constants = None

Anchors = frozenset[str]


def anchors(pattern: re.Pattern[str]) -> Anchors | None:
    """Strings one of which is in every match of ``pattern`` (lowercase when it ignores
    case), or None when none are known."""
    if sre_parser is None or not isinstance(pattern.pattern, str):
        return None
    try:
        parsed = sre_parser.parse(pattern.pattern, pattern.flags)
    except (re.error, RecursionError, TypeError, ValueError):
        return None
    found = _of_sequence(list(parsed), bool(pattern.flags & re.IGNORECASE))
    return None if found is None else _fewest(found)


def _of_sequence(items: list[tuple[Any, Any]], folded: bool) -> Anchors | None:
    """Anchors of pieces matched one after another: those of any one piece that must
    match (each run of plain characters is one), the most telling of them."""
    best: Anchors | None = None
    run: list[str] = []

    def keep(found: Anchors | None) -> None:
        nonlocal best
        if found and (best is None or _shortest(found) > _shortest(best)):
            best = found

    for op, value in items:
        char = _plain_char(op, value, folded)
        if char is not None:
            run.append(char)
            continue
        keep(frozenset(["".join(run)]) if run else None)
        run = []
        keep(_of_piece(op, value, folded))
    keep(frozenset(["".join(run)]) if run else None)
    return best


def _of_piece(op: Any, value: Any, folded: bool) -> Anchors | None:
    """Anchors of one piece that is not a plain character (None: it gives none; so does
    any piece not below: a class with ranges, '.', an assertion, a backreference)."""
    read = _PIECES.get(op)
    return None if read is None else read(value, folded)


def _of_group(value: Any, folded: bool) -> Anchors | None:
    _, add_flags, del_flags, body = value
    if add_flags or del_flags:  # (?i:...) and the like: other case rules inside
        return None
    return _of_sequence(list(body), folded)


def _of_atomic_group(value: Any, folded: bool) -> Anchors | None:
    return _of_sequence(list(value), folded)


def _of_branch(value: Any, folded: bool) -> Anchors | None:
    """One alternative matches: each must give anchors."""
    each = [_of_sequence(list(branch), folded) for branch in value[1]]
    known = [found for found in each if found is not None]
    return _union(known) if len(known) == len(each) else None


def _of_repeat(value: Any, folded: bool) -> Anchors | None:
    least, _, body = value
    return _of_sequence(list(body), folded) if least >= 1 else None


def _of_class(value: Any, folded: bool) -> Anchors | None:
    """A class of plain characters: one of them."""
    chars = [_plain_char(kind, item, folded) for kind, item in value]
    known = [char for char in chars if char is not None]
    return frozenset(known) if known and len(known) == len(chars) else None


_PIECES: dict[Any, Callable[[Any, bool], Anchors | None]] = (
    {}
    if sre_constants is None
    else {
        sre_constants.SUBPATTERN: _of_group,
        sre_constants.ATOMIC_GROUP: _of_atomic_group,
        sre_constants.BRANCH: _of_branch,
        sre_constants.MAX_REPEAT: _of_repeat,
        sre_constants.MIN_REPEAT: _of_repeat,
        sre_constants.POSSESSIVE_REPEAT: _of_repeat,
        sre_constants.IN: _of_class,
    }
)


def _plain_char(op: Any, value: Any, folded: bool) -> str | None:
    """The character a plain-character piece matches, lowercase if case is ignored; None
    for any other piece, and for a letter outside ASCII."""
    if op is not sre_constants.LITERAL:
        return None
    char = chr(value)
    if not char.isascii():
        return None
    return char.lower() if folded else char


def _union(sets: Iterable[Anchors]) -> Anchors:
    return frozenset().union(*sets)


def _shortest(found: Anchors) -> int:
    return min(len(anchor) for anchor in found)


def _fewest(found: Anchors) -> Anchors:
    """Without an anchor that holds another: wherever it is, the shorter one is too."""
    return frozenset(a for a in found if not any(b != a and b in a for b in found))


class AnchoredSearch:
    """Whether any of several patterns is in a text, each searched for only in the ASCII
    texts that hold one of its anchors (a text outside ASCII: each is searched for)."""

    def __init__(self, anchored: Iterable[tuple[re.Pattern[str], Anchors | None]]) -> None:
        self.anchored = list(anchored)  # each pattern with its anchors (None: always)
        self.patterns = [pattern for pattern, _ in self.anchored]
        self.always: list[re.Pattern[str]] = []
        as_is: dict[str, list[re.Pattern[str]]] = {}
        lowered: dict[str, list[re.Pattern[str]]] = {}
        for pattern, found in self.anchored:
            if found is None:
                self.always.append(pattern)
                continue
            by_anchor = lowered if pattern.flags & re.IGNORECASE else as_is
            for anchor in sorted(found):
                by_anchor.setdefault(anchor, []).append(pattern)
        self.as_is = list(as_is.items())
        self.lowered = list(lowered.items())

    @classmethod
    def of(cls, patterns: Iterable[re.Pattern[str]]) -> AnchoredSearch:
        """With the anchors read from the patterns (about 3 ms for 50 of them)."""
        return cls((pattern, anchors(pattern)) for pattern in patterns)

    def search(self, text: str) -> bool:
        if not text.isascii():
            return any(pattern.search(text) for pattern in self.patterns)
        if any(pattern.search(text) for pattern in self.always):
            return True
        if self._search_where_anchored(text, text, self.as_is):
            return True
        return self._search_where_anchored(text, text.lower(), self.lowered)

    @staticmethod
    def _search_where_anchored(
        text: str, looked_in: str, by_anchor: list[tuple[str, list[re.Pattern[str]]]]
    ) -> bool:
        for anchor, patterns in by_anchor:
            if anchor in looked_in and any(pattern.search(text) for pattern in patterns):
                return True
        return False
