"""A book's similar books do not depend on the process's hash seed (issue 31, item 6). The bug
the issue names, topic terms whose tf·idf ties bm25s broke by a set's order, is gone with the
topic terms (service/engine/lexical.py `LikeThisIndex` scores a book's whole text), and
tests/test_lexical.py checks that those BM25 scores are the same bytes under four seeds. This
checks the whole answer instead: every demo book's GET /books/{id}/similar, in processes with
different PYTHONHASHSEEDs, over one SQLite database, so any later set of strings iterated on the
way (headings, names, heads) that reorders sums or ties shows here. Two processes of one app
(an app and its Ray router) must answer alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import index_demo_catalog

TESTS = Path(__file__).parent

# every demo book's similar books (their ids in rank order) through the app, hashed. Not their
# weights: those differ in the fifth digit between runs of one seed now and then (seen in 2 runs
# of 9 on a loaded 2-core machine), which is no tie order
_SIMILAR = """
import hashlib, sys
sys.path.insert(0, sys.argv[2])
from fastapi.testclient import TestClient
from conftest import FakeEncoder
from service.api.main import create_app
from service.config.settings import ServiceSettings
settings = ServiceSettings(database_url=sys.argv[1], device="cpu", generation_poll_s=0)
digest = hashlib.sha256()
with TestClient(create_app(settings, encoder=FakeEncoder())) as client:
    ids = client.app.state.searcher.index.books.ids
    for book in ids:
        r = client.get(f"/books/{book}/similar", params={"k": 10})
        assert r.status_code == 200, r.text
        for hit in r.json()["results"]:
            digest.update(f"{book} {hit['id']}\\n".encode())
print(len(ids), digest.hexdigest())
"""


def test_similar_books_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'attend.db'}"
    index_demo_catalog(url)
    answers = {
        subprocess.run(
            [sys.executable, "-c", _SIMILAR, url, str(TESTS)],
            env={**os.environ, "PYTHONHASHSEED": str(seed), "HF_HUB_OFFLINE": "1"},
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        ).stdout
        for seed in (0, 1)
    }
    assert len(answers) == 1, answers
    assert next(iter(answers)).startswith("180 ")  # every demo book was asked
