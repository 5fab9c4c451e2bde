"""What the ranked keyword arm indexes of a text, and searches a query for (pure).

Words are split on anything that is not a letter or a digit, lower-cased,
and common English function words are dropped (they match half of all memories and
tell nothing; dropping them also keeps a query on a large memory fast). What is
left is stemmed with Snowball's English stemmer (PyStemmer), so 'painted' finds
'painting'; stemming here, not in SQLite, lets a query ask how common a term is.

Chinese, Japanese and Korean text has no spaces between words, and a dictionary
would have to be loaded: each run of CJK characters is indexed as its single
characters and every pair of neighbours (the usual way to search CJK text), so
the two-character word 深色 is found inside 偏好深色模式.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import Stemmer

# Common English function words, and the ends of contractions (I'll, it's, we've).
STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if
    in into is it its itself just me more most my myself no nor not now of off on once
    only or other our ours ourselves out over own same she should so some such than that
    the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves s t d ll m re ve
    """.split()  # noqa: SIM905 (a list of words reads best as words)
)

_CJK = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul syllables
)
# A run of CJK characters (group 1), or a word of other letters and digits (group 2).
_TOKEN = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)", re.UNICODE)
_ASCII_WORD = re.compile(r"[a-z0-9]+")  # the same words in a lower-cased ASCII text


_STEMMER = Stemmer.Stemmer("english")
# Each word's stem, once stemmed (a dict read costs a fraction of a cached call); all let
# go of at once when full.
_stems: dict[str, str] = {}
STEMS_KEPT = 65536


def _new_stem(word: str) -> str:
    """Stem a word not stemmed yet, and keep its stem. A full dict is replaced, never
    emptied: a thread reading the one it holds still finds what it has seen in it."""
    global _stems
    if len(_stems) >= STEMS_KEPT:
        _stems = {}
    stem = _stems[word] = str(_STEMMER.stemWord(word))
    return stem


def terms(text: str) -> list[str]:
    """The index terms of a text, in order (repeats kept: they count in BM25)."""
    lowered = text.lower()
    stems = _stems
    if lowered.isascii():  # no CJK, and its words are runs of [a-z0-9]: a third quicker
        return [
            stems[word] if word in stems else _new_stem(word)
            for word in _ASCII_WORD.findall(lowered)
            if word not in STOPWORDS
        ]
    out: list[str] = []
    for cjk, word in _TOKEN.findall(lowered):
        if word:
            if word not in STOPWORDS:
                out.append(stems[word] if word in stems else _new_stem(word))
        else:
            out += cjk
            out += [cjk[i : i + 2] for i in range(len(cjk) - 1)]
    return out


def index_text(text: str) -> str:
    """The text as the FTS5 column holds it: its terms, separated by spaces."""
    return " ".join(terms(text))


def query_terms(query: str) -> list[str]:
    """The distinct terms of a query, in order."""
    return list(dict.fromkeys(terms(query)))


def match_any(query_terms: list[str]) -> str | None:
    """An FTS5 MATCH expression for any of these terms (None: there are none)."""
    if not query_terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in query_terms)


def worth_matching(
    words: list[str], held: Callable[[str, int], int], most: int, rarest_cap: int
) -> tuple[list[str], int | None]:
    """The query words worth matching, given ``held(word, cap)``: how many rows hold the
    word, counted up to cap. Of the words some row holds, those held by no more than
    ``most``; when every one is more common, the rarest alone (counted up to
    ``rarest_cap``), and how many hold it (else None). A word no row holds never crowds
    out a common one; with none held, the words as they are."""
    counts = {word: held(word, most + 1) for word in words}
    present = [word for word in words if counts[word] > 0]
    if not present:
        return words, None
    rare = [word for word in present if counts[word] <= most]
    if rare:
        return rare, None
    counted = {word: held(word, rarest_cap) for word in present}
    rarest = min(present, key=lambda word: counted[word])  # of words past the cap: the first
    return [rarest], counted[rarest]
