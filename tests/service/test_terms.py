"""What the ranked keyword arm indexes of a text (oryxmem/index/terms.py)."""

from __future__ import annotations

import pytest

from oryxmem.index import terms as terms_module
from oryxmem.index.terms import index_text, query_terms, terms


def test_words_are_lowered_stemmed_and_function_words_dropped() -> None:
    assert terms("The user PAINTED the fence; she'll paint it again in 2027") == [
        "user",
        "paint",
        "fenc",
        "paint",
        "2027",
    ]
    assert index_text("Painting_walls") == "paint wall"  # an underscore parts words
    assert query_terms("paint painted painting") == ["paint"]


def test_cjk_runs_are_their_letters_and_every_pair_of_neighbours() -> None:
    assert terms("用户偏好深色") == [
        *"用户偏好深色",
        "用户",
        "户偏",
        "偏好",
        "好深",
        "深色",
    ]
    assert terms("Prefers 深色 themes") == ["prefer", "深", "色", "深色", "theme"]


@pytest.mark.parametrize(
    "text",
    [
        "Deploys go out on Fridays at 17:00, after the tests",
        "snake_case and kebab-case and CamelCase2 words",
        "it's the user's editor: vim (not emacs), v9.1",
        "  ",
        "a the of",
    ],
)
def test_an_ascii_text_gives_the_terms_of_the_general_reading(text: str) -> None:
    # An ASCII text is read by a quicker path; one non-ASCII word sends the same text
    # down the general one, which must give the same terms, and that word's.
    assert terms(text + " é") == [*terms(text), "é"]


def test_the_stems_kept_are_let_go_when_full_and_terms_stay_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(terms_module, "STEMS_KEPT", 3)
    monkeypatch.setattr(terms_module, "_stems", {})
    words = ["painted", "walls", "running", "editors", "deploys", "painted", "walls"]
    assert terms(" ".join(words)) == ["paint", "wall", "run", "editor", "deploy", "paint", "wall"]
    assert len(terms_module._stems) <= 3
