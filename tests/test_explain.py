"""Token-level explanations with the real model: word pieces merged into words, offsets that
point at the right words of the title and description."""

from __future__ import annotations

import pytest

from models.encoder import SentenceTransformerEncoder
from service.api.book_schemas import explain_response
from service.engine.explainer import Explainer

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
    explanation = explainer.explain(book_id="hp", query=q, title=TITLE, description=description)
    return explain_response(explanation).model_dump()


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


def _dense_reference(explainer: Explainer, q: str, description: str) -> list[list[float]]:
    """The explanation's weights as the dense formula defines them: piece-to-word membership
    matrices, softmax over the content pieces, sums per book word, means per query word."""
    import torch

    from service.engine.word_attention import is_content, words_of

    assert explainer.encoder is not None
    (qt,) = explainer.encoder.token_embeddings([q])
    tt, dt = explainer.encoder.token_embeddings([TITLE, description])
    q_words, q_of = words_of(qt, q, "query")
    keep_q = [i for i, w in enumerate(q_words) if is_content(w)]
    cols, vectors = [], []
    offset = 0
    for text, tokens in ((TITLE, tt), (description, dt)):
        words, of = words_of(tokens, text, "x")
        for i, w in enumerate(words):
            if is_content(w):
                cols.append([offset + p for p in range(len(tokens)) if int(of[p]) == i])
        vectors.append(tokens.vectors)
        offset += len(tokens)
    B = torch.cat(vectors).double()
    member = torch.zeros(len(cols), len(B), dtype=torch.float64)  # (Wb, Tb)
    for c, pieces in enumerate(cols):
        member[c, pieces] = 1.0
    logits = (20.0 * qt.vectors.double() @ B.T).masked_fill(member.sum(0) == 0, float("-inf"))
    piece_w = torch.softmax(logits, dim=-1) @ member.T  # (Tq, Wb)
    qm = torch.zeros(len(keep_q), len(qt), dtype=torch.float64)
    for r, i in enumerate(keep_q):
        qm[r, [p for p in range(len(qt)) if int(q_of[p]) == i]] = 1.0
    weights: list[list[float]] = ((qm @ piece_w) / qm.sum(1, keepdim=True)).tolist()
    return weights


def test_weights_equal_the_dense_formula(explainer: Explainer) -> None:
    """The sparse piece-to-word mapping changes nothing: the same weights as dense matrices."""
    q = "witchcraft school, falling in love with Voldemort"
    body = _explain(explainer, q)
    reference = _dense_reference(explainer, q, DESCRIPTION)
    assert len(body["weights"]) == len(reference) == 5
    for got, want in zip(body["weights"], reference, strict=True):
        assert got == pytest.approx(want, abs=1e-5)


def test_a_huge_description_is_explained_in_bounded_time_up_to_a_limit(
    explainer: Explainer,
) -> None:
    """170,000 words once tried to allocate 231 GB (a dense words × pieces matrix) and 12,000
    took 16 s and 4 GB; now the first MAX_EXPLAINED_CHARS characters are explained, the
    response says where that stops, and the rest of the description is still returned."""
    import time

    from service.engine.explainer import MAX_EXPLAINED_CHARS

    huge = " ".join(["Filler words about nothing in particular."] * 28_000) + " A dragon sleeps."
    t0 = time.perf_counter()
    body = _explain(explainer, "filler dragon", description=huge)
    elapsed = time.perf_counter() - t0
    assert elapsed < 30  # ~1.5 s here; the dense matrix never finished
    assert body["description"] == huge
    cut = body["explained_chars"]
    assert MAX_EXPLAINED_CHARS // 2 < cut <= MAX_EXPLAINED_CHARS
    assert huge[cut].isspace() or huge[cut - 1].isspace()  # cut between words
    described = [w for w in body["book_words"] if w["field"] == "description"]
    assert described and max(w["end"] for w in described) <= cut
    assert all(huge[w["start"] : w["end"]] == w["text"] for w in described)
    assert "dragon" not in {w["text"] for w in described}  # past the limit: not explained
    for row in body["weights"]:
        assert abs(sum(row) - 1) < 1e-3


def test_a_short_description_is_explained_whole(explainer: Explainer) -> None:
    body = _explain(explainer, "dragon")
    assert body["explained_chars"] == len(DESCRIPTION)
