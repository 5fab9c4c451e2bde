"""The anchors of a regular expression: strings one of which every match holds."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oryxmem import secrets
from oryxmem.anchors import AnchoredSearch, anchors


@pytest.mark.parametrize(
    ("source", "flags", "expected"),
    [
        (r"AKIA[0-9A-Z]{16}", 0, {"AKIA"}),
        # (Python's parser takes the alternatives' common "A" out in front of them.)
        (r"(?:A3T[A-Z0-9]|ABIA|AKIA)[0-9A-Z]{16}", 0, {"3T", "BIA", "KIA"}),
        (r"Secret[-_]?Key", re.IGNORECASE, {"secret"}),  # the longer run: "secret"
        (r"(?i)TOKEN=\w+", 0, {"token="}),  # a flag inline is the pattern's flag
        (r"([\'\"])[a-z]+\1", 0, {"'", '"'}),  # a class of plain characters
        (r"(?:ab)+c?", 0, {"ab"}),  # repeated at least once
        (r"x*", 0, None),  # maybe not at all
        (r"(?:ibm|)cloud", 0, {"cloud"}),  # an alternative that may be empty gives none
        (r"(?:ibm|)", 0, None),
        (r"[^a]b", 0, {"b"}),  # a negated class gives none, the rest does
        (r"[a-z]{3}", 0, None),  # a range gives none
        (r"(?i:key)=", 0, {"="}),  # other case rules inside a group: only outside it
        ("\u212a=v", re.IGNORECASE, {"=v"}),  # the Kelvin sign matches 'k': none from it
        ("pa\u017f\u017fword", re.IGNORECASE, {"word"}),  # 'ſ' is an 's'
        (r"(?<=\W)key", 0, {"key"}),  # a look-behind holds nothing of the match
    ],
)
def test_anchors_are_what_every_match_must_hold(
    source: str, flags: int, expected: set[str] | None
) -> None:
    found = anchors(re.compile(source, flags))
    assert found == (None if expected is None else frozenset(expected))


def test_an_anchor_that_holds_another_is_left_out() -> None:
    assert anchors(re.compile(r"clou|cl|cloudant")) == frozenset({"cl"})


def candidate_patterns() -> list[re.Pattern[str]]:
    with secrets._lock:
        candidates = secrets._Candidates.of(secrets._configure())
    assert candidates is not None
    return candidates.patterns


@pytest.mark.parametrize("pattern", candidate_patterns(), ids=lambda p: p.pattern[:40])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_text_a_detect_secrets_pattern_matches_is_searched_for_it(
    pattern: re.Pattern[str], data: st.DataObject
) -> None:
    """Property: whatever text one of detect-secrets' candidate patterns matches (made by
    hypothesis from the pattern itself, inside other text, ASCII or not), the anchored
    search finds a match too: anchors never let a candidate through unseen."""
    ascii_only = data.draw(st.booleans())
    around = st.text(
        alphabet=st.characters(max_codepoint=127) if ascii_only else st.characters(),
        max_size=20,
    )
    text = data.draw(around) + data.draw(st.from_regex(pattern)) + data.draw(around)
    if pattern.search(text) is None:  # what was around it spoiled the match (a look-behind)
        return
    assert AnchoredSearch.of([pattern]).search(text)


def test_the_anchored_search_agrees_with_searching_every_pattern() -> None:
    patterns = candidate_patterns()
    search = AnchoredSearch.of(patterns)
    lines = [
        "User prefers tabs over spaces in Python files; runs tests with pytest -n 2.",
        "The deploy uses https://example.com/api and the staging box at 10.0.0.3:8080.",
        "the deploy key is AKIAIOSFODNN7EXAMPLE",
        'quoted "c2VjcmV0IGtleSBmb3IgdGhlIHByb2QgZGF0YWJhc2UgaGVyZQ==" in a note',
        "clone https://ada:correct-horse-battery@git.example.com/repo.git",
        "IBM_CLOUD_IAM_KEY = 'abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH'",
        "café notes: the Kelvin sign \u212a and a long ſ",
        "",
    ]
    for line in lines:
        assert search.search(line) == any(p.search(line) for p in patterns), line
