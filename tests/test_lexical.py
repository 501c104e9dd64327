"""The lexical head's BM25 over the demo catalog: exact names rank right."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import Stemmer
from bm25s.tokenization import Tokenizer

from indexer.catalog import read_catalog
from indexer.data import DEMO_CATALOG
from models.text import fold
from service.engine.lexical import LexicalIndex, LikeThisIndex, book_document


@pytest.fixture(scope="module")
def demo() -> tuple[list[str], list[str], LexicalIndex]:
    books = list(read_catalog(DEMO_CATALOG))
    index = LexicalIndex([book_document(b.title, b.authors, b.description) for b in books])
    return [b.id for b in books], [b.title for b in books], index


def _top(demo: tuple[list[str], list[str], LexicalIndex], query: str, n: int) -> list[str]:
    ids, _, index = demo
    scores = index.scores([query])[0]
    return [ids[i] for i in np.argsort(-scores, kind="stable")[:n]]


def test_exact_titles_and_authors_rank_first(
    demo: tuple[list[str], list[str], LexicalIndex],
) -> None:
    assert _top(demo, "Harry Potter", 1) == ["harry-potter-philosophers-stone-rowling"]
    assert set(_top(demo, "Tolkien", 2)) == {"fellowship-of-the-ring-tolkien", "the-hobbit-tolkien"}
    pytorch_titles = {i for i, t in zip(demo[0], demo[1], strict=True) if "PyTorch" in t}
    assert set(_top(demo, "pytorch", len(pytorch_titles))) == pytorch_titles
    assert _top(demo, "Raschka", 1)[0].endswith("raschka")


def test_scores_shape_and_unknown_words(demo: tuple[list[str], list[str], LexicalIndex]) -> None:
    ids, _, index = demo
    scores = index.scores(["Tolkien", "the of and", "xyzzyplugh"])
    assert scores.shape == (3, len(ids)) and scores.dtype == np.float32
    assert scores[0].max() > 0
    assert not scores[1].any() and not scores[2].any()  # stop words, unknown words: no evidence
    assert index.terms("The Wizards of Tolkien") == ["wizard", "tolkien"]


def test_empty_catalog() -> None:
    index = LexicalIndex([])
    assert index.scores(["anything"]).shape == (1, 0)


def test_query_terms_are_the_ones_bm25s_tokenizes(
    demo: tuple[list[str], list[str], LexicalIndex],
) -> None:
    """`terms` tokenizes queries itself (bm25s's `tokenize` rebuilds its reverse vocabulary per
    call and remembers every word it sees); it must give exactly bm25s's terms."""
    _, titles, index = demo
    books = list(read_catalog(DEMO_CATALOG))
    tokenizer = Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english"))
    tokenizer.tokenize(
        [book_document(b.title, b.authors, b.description) for b in books],
        return_as="string",
        show_progress=False,
    )
    queries = [
        *titles,
        "",
        "the of and",
        "Tolkien's WIZARDS!!",
        "École naïve café",
        "x 42 1984",
        "running runners ran",
    ]
    for query in queries:
        (theirs,) = tokenizer.tokenize(
            [query], return_as="string", update_vocab=False, show_progress=False
        )
        assert index.terms(query) == [t for t in theirs if t], query


_BOOK_SCORES = """
import hashlib
from indexer.catalog import read_catalog
from indexer.data import DEMO_CATALOG
from service.engine.lexical import LikeThisIndex
books = list(read_catalog(DEMO_CATALOG))
index = LikeThisIndex([f"{b.title}. {b.description or ''}" for b in books])
print(hashlib.sha256(index.scores(range(len(books))).tobytes()).hexdigest())
"""


def test_books_as_queries_do_not_depend_on_the_hash_seed() -> None:
    """bm25s numbers its terms in a set's order; the topic terms that were a book's query broke
    ties of tf · idf by that number, so two processes (one app and its Ray router) ranked one
    book's similar books apart. A book's BM25 of its own text must not depend on it either."""
    digests = {
        subprocess.run(
            [sys.executable, "-c", _BOOK_SCORES],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (0, 1, 2, 3)
    }
    assert len(digests) == 1


def test_chunked_builds_and_scores_read_per_posting_list_are_the_whole_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The texts are tokenized a chunk at a time and the search index's scores computed as a
    query reads a posting list: the same bytes as one chunk and the matrix held whole."""
    from service.engine import lexical

    books = list(read_catalog(DEMO_CATALOG))
    documents = [book_document(b.title, b.authors, b.description) for b in books]
    texts = [f"{b.title}. {b.description or ''}" for b in books]
    queries = ["Tolkien", "a novel about a whale", "deep learning with pytorch", "war and peace"]
    rows = list(range(len(books)))
    whole = LexicalIndex(documents), lexical.LikeThisIndex(texts)
    monkeypatch.setattr(lexical, "TOKENIZE_CHUNK", 7)  # a word new to each chunk counts
    chunked = LexicalIndex(iter(documents), len(documents)), lexical.LikeThisIndex(texts)
    assert whole[0].postings.terms == chunked[0].postings.terms
    assert whole[0].scores(queries).tobytes() == chunked[0].scores(queries).tobytes()
    assert whole[1].scores(rows).tobytes() == chunked[1].scores(rows).tobytes()
    lazy = whole[0]._bm25.scores["data"]
    held = lazy[0 : len(lazy)]  # every posting list at once: the matrix built whole
    indptr = whole[0].postings.indptr
    for t in (0, 1, len(indptr) // 2, len(indptr) - 2):
        assert (
            lazy[indptr[t] : indptr[t + 1]].tobytes() == held[indptr[t] : indptr[t + 1]].tobytes()
        )


@pytest.mark.parametrize("passes", ["c", "numpy"])
def test_the_lexical_head_holds_the_books_with_a_term(passes: str) -> None:
    """Per query the head holds its books with a term (−inf elsewhere) and has evidence where
    the filters keep one of them; a query without one (no term, or every book with its terms
    filtered out) keeps its row as it was, uniform over the books the filters keep. Its support
    is its finite scores, whichever pass found them."""
    import math

    import numpy as np
    import torch

    from models import cpu_kernels
    from service.engine.scored_heads import lexical_head

    g = np.random.default_rng(3)
    N = 5000
    bm25 = np.where(g.random((6, N)) < 0.1, g.random((6, N)) * 7 + 0.1, 0.0).astype(np.float32)
    bm25[1] = 0.0  # no term in the catalog
    mask = torch.ones(6, N, dtype=torch.bool)
    mask[2] = torch.from_numpy(bm25[2] == 0)  # every book with a term of query 2 filtered out
    none = np.array([[False], [True], [True], [False], [False], [False]])
    want = np.where((bm25 > 0) | none, bm25, -np.inf)
    cpu_kernels.set_enabled(passes == "c")
    try:
        head, evidence = lexical_head(torch.from_numpy(bm25.copy()), 1.0, mask)
    finally:
        cpu_kernels.set_enabled(True)
    assert evidence == [True, False, False, True, True, True]
    assert np.array_equal(head.scores.numpy(), want.astype(np.float32))
    finite = np.nonzero(np.isfinite(want))
    assert head.support is not None
    rows, cols = head.support
    assert np.array_equal(rows.numpy(), finite[0]) and np.array_equal(cols.numpy(), finite[1])
    assert not math.isinf(float(head.scores[1].max()))


@pytest.mark.parametrize("top", [200, 60_000, 70_000])  # counts of 1, 2 and 4 bytes
def test_held_scores_in_c_are_numpys_bytes(top: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The more-like-this index's scores, every entry's at once: the C pass gives the bytes
    numpy's passes give (`TermScores`), whatever the width of the counts."""
    from service.engine import bm25_postings
    from service.engine.bm25_postings import Postings, lucene_bm25

    if bm25_postings._kernels is None:
        pytest.skip("service/engine/_postings.c was not built")
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(300)]
    docs = [list(rng.choice(words, size=rng.integers(0, 40))) for _ in range(400)]
    docs[7] = ["w1"] * top  # one count past a byte, or two
    postings, _ = Postings.of(docs, len(docs))
    assert postings.counts.dtype.itemsize == (1 if top < 256 else 2 if top < 65_536 else 4)
    c = lucene_bm25(postings, held=True).scores["data"]
    monkeypatch.setattr(bm25_postings, "_kernels", None)
    numpy = lucene_bm25(postings, held=True).scores["data"]
    assert c.dtype == numpy.dtype == np.float32 and c.tobytes() == numpy.tobytes()


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("top", [200, 60_000, 70_000])  # counts of 1, 2 and 4 bytes
def test_a_batch_of_query_scores_is_bm25s_own_bytes(
    top: int, held: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's BM25 rows, written by the C pass or by bm25s when it was not built: each row
    the bytes bm25s's `get_scores_from_ids` gives that query alone (its terms' lists added in
    order, a repeated term twice), zeros for a query without terms, whatever the counts' width
    and whether the index holds its scores or computes them."""
    from service.engine import bm25_postings
    from service.engine.bm25_postings import Postings, lucene_bm25
    from service.engine.bm25_queries import query_scores

    rng = np.random.default_rng(2)
    words = [f"w{i}" for i in range(300)]
    docs = [list(rng.choice(words, size=rng.integers(0, 40))) for _ in range(500)]
    docs[9] = ["w1"] * top
    postings, _ = Postings.of(docs, len(docs))
    bm25 = lucene_bm25(postings, held=held)
    ids = postings.term_ids()
    queries = [
        [ids["w1"], ids["w7"]],
        [],
        [ids["w7"], ids["w1"], ids["w7"]],  # a term twice, another order
        [int(t) for t in rng.choice(len(ids), size=30)],
    ]
    want = [bm25.get_scores_from_ids(q) if q else np.zeros(len(docs), np.float32) for q in queries]
    for compiled in (True, False):
        if compiled and bm25_postings.kernels() is None:
            continue
        if not compiled:
            monkeypatch.setattr(bm25_postings, "_kernels", None)
        out = np.full((len(queries), len(docs)), np.nan, np.float32)
        query_scores(bm25, queries, out)
        for b, row in enumerate(want):
            assert out[b].tobytes() == row.astype(np.float32).tobytes(), (compiled, b)
    with pytest.raises(ValueError):
        query_scores(bm25, queries, np.empty((len(queries), len(docs)), np.float64))


@pytest.mark.parametrize("passes", ["c", "numpy"])
@pytest.mark.parametrize("in_order", [True, False])
def test_moved_postings_are_the_postings_built_whole(
    in_order: bool, passes: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new generation's postings from the previous one's (the changed rows' merged in) equal
    those built from every row's tokens: rows moved in order, as a swap moves them (the merge:
    in C, or numpy's passes where it was not built), and out of order (sorted again); the
    changed and new rows among the kept ones, before, between and after them."""
    from service.engine import bm25_postings
    from service.engine.bm25_postings import Postings, RowMoves

    if passes == "c" and bm25_postings._kernels is None:
        pytest.skip("service/engine/_postings.c was not built")
    if passes == "numpy":
        monkeypatch.setattr(bm25_postings, "_kernels", None)
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(40)]
    before = [list(rng.choice(words, size=rng.integers(0, 12))) for _ in range(60)]
    gone, changed_at = {3, 17, 40}, {5, 22, 59}  # rows removed, and rows rewritten
    kept = [r for r in range(60) if r not in gone | changed_at]
    # the new generation: kept rows (in order, or reversed), rewritten and new rows among them
    order: list[int | None] = list(kept if in_order else kept[::-1])
    for at in (0, 10, 11, 30, len(order) + 4):
        order.insert(min(at, len(order)), None)
    fresh = iter([list(rng.choice([*words, "fresh"], size=5)) for _ in range(len(order))])
    new_rows = [before[r] if r is not None else next(fresh) for r in order]
    new_row = np.full(60, -1, np.int64)
    for at, r in enumerate(order):
        if r is not None:
            new_row[r] = at
    changed = np.array([at for at, r in enumerate(order) if r is None], np.int64)
    moves = RowMoves(new_row, changed, len(new_rows))
    previous, _ = Postings.of(before, len(before))
    moved, tokens = previous.moved(moves, [new_rows[r] for r in changed])
    whole, _ = Postings.of(new_rows, len(new_rows))
    assert _entries(moved) == _entries(whole)
    assert np.array_equal(moved.lengths, whole.lengths)
    for t in range(len(moved.terms)):  # each posting list's rows ascending: the CSC order
        assert np.all(np.diff(moved.rows[moved.indptr[t] : moved.indptr[t + 1]]) > 0)
    assert [moved.terms[i] for i in tokens.ids] == [w for r in changed for w in new_rows[r]]


def _entries(p: Any) -> dict[str, set[tuple[int, int]]]:
    """Each term's (row, count) entries: two postings' term ids may number the terms apart."""
    lists = zip(np.split(p.rows, p.indptr[1:-1]), np.split(p.counts, p.indptr[1:-1]), strict=True)
    return {
        term: {(int(r), int(c)) for r, c in zip(rows, counts, strict=True)}
        for term, (rows, counts) in zip(p.terms, lists, strict=True)
    }


def test_the_rows_of_a_word_are_the_books_using_it_folded() -> None:
    """`LikeThisIndex.word_rows` (the surnames that are words, service/engine/catalog_names.py):
    a word's rows are the books whose title or description hold it, accents folded ("Márquez"
    is "marquez"); a stop word, which the index keeps no list of, is None; a word no book
    holds has no entry."""
    index = LikeThisIndex(
        ["A story of Márquez", "The rest. Marquez again", "Will it rain. The rest", "Nothing"]
    )
    found = index.word_rows({"marquez", "will", "rest", "absent"}, fold)
    assert set(found) == {"marquez", "will", "rest"}
    assert found["will"] is None
    assert found["marquez"] is not None and found["marquez"].tolist() == [0, 1]
    assert found["rest"] is not None and found["rest"].tolist() == [1, 2]


CJK = [
    book_document(
        "三体", ["刘慈欣"], "文化大革命时期，叶文洁向宇宙发出信号，三体文明回应了。科幻小说。"
    ),
    book_document("活着", ["余华"], "福贵的一生：战争、饥荒和家人的离去。"),
    book_document("ノルウェイの森", ["村上春樹"], "ワタナベは直子と緑のあいだで揺れる。"),
    book_document("Dune", ["Frank Herbert"], "A desert planet, its spice, and its prophet."),
]


def test_a_word_inside_cjk_text_is_a_term() -> None:
    """Chinese and Japanese are written without spaces: a word within a sentence (科幻,
    "science fiction"; 直子, a name) finds its book, through the runs' bigrams, in the search
    index and the more-like-this index alike; a word no book holds is no term."""
    index = LexicalIndex(CJK)
    for query, row in [("科幻小说", 0), ("叶文洁", 0), ("福贵的一生", 1), ("直子", 2), ("村上", 2)]:
        scores = index.scores([query])[0]
        assert int(np.argmax(scores)) == row and scores[row] > 0, query
        assert (scores > 0).sum() == 1, query
    assert index.terms("量子力学") == []  # "quantum mechanics": in no book
    assert index.terms("科幻小说") == ["科幻", "幻小", "小说"]
    like = LikeThisIndex([t.split("\n")[-1] for t in CJK])
    assert like.scores([0])[0][0] > 0 and not like.scores([0])[0][1:].any()
