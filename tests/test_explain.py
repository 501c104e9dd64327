"""Token-level explanations with the real model: word pieces merged into words, offsets that
point at the right words of the title and description."""

from __future__ import annotations

import pytest

from models.encoder import SentenceTransformerEncoder
from service.explainer import Explainer

pytestmark = pytest.mark.model

TITLE = "Harry Potter and the Half-Blood Prince"
DESCRIPTION = (
    "The war against Voldemort has begun. Harry, Ron and Hermione start their sixth year at "
    "Hogwarts School of Witchcraft and Wizardry, where Harry receives some extraordinary help "
    "in Potions from the mysterious Half-Blood Prince. Teenagers flirt and fight and fall in love."
)


@pytest.fixture(scope="module")
def explainer() -> Explainer:
    return Explainer(SentenceTransformerEncoder(), scale=20.0)


def _explain(explainer: Explainer, q: str, description: str = DESCRIPTION) -> dict:  # type: ignore[type-arg]
    return explainer.explain(
        book_id="hp", query=q, title=TITLE, description=description
    ).model_dump()


def test_offsets_point_at_the_words_each_query_word_attends_to(explainer: Explainer) -> None:
    body = _explain(explainer, "witchcraft school, falling in love")
    fields = {"title": TITLE, "description": DESCRIPTION}
    assert [w["text"] for w in body["query_words"]] == ["witchcraft", "school", "falling", "love"]
    for w in body["book_words"]:
        assert fields[w["field"]][w["start"] : w["end"]] == w["text"]
    best = {
        body["query_words"][a["query_word"]]["text"]: body["book_words"][a["top"][0]["word"]][
            "text"
        ]
        for a in body["attends"]
    }
    assert best["witchcraft"] == "Witchcraft" and best["love"] == "love"
    assert best["school"] == "School" and best["falling"] == "fall"
    marked = {fields[h["field"]][h["start"] : h["end"]] for h in body["highlights"]}
    assert {"Witchcraft", "School", "love"} <= marked
    for row in body["weights"]:
        assert abs(sum(row) - 1) < 1e-3


def test_word_pieces_are_merged_into_words(explainer: Explainer) -> None:
    body = _explain(explainer, "Voldemort and Hogwarts")
    # "voldemort" and "hogwarts" are several word pieces each; they come back as one word
    assert [w["text"] for w in body["query_words"]] == ["Voldemort", "Hogwarts"]
    texts = [w["text"] for w in body["book_words"]]
    assert "Voldemort" in texts and "Hogwarts" in texts and "Half" in texts
    best = [body["book_words"][a["top"][0]["word"]]["text"] for a in body["attends"]]
    assert best == ["Voldemort", "Hogwarts"]


def test_long_descriptions_are_explained_to_the_end(explainer: Explainer) -> None:
    long = " ".join(["Filler words about nothing in particular."] * 80) + " A dragon sleeps."
    body = _explain(explainer, "dragon", description=long)
    top = body["book_words"][body["attends"][0]["top"][0]["word"]]
    assert top["field"] == "description" and long[top["start"] : top["end"]] == "dragon"
    assert top["start"] > 2000  # past the model's 256-piece window
