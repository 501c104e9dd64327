"""The example responses of README.md and docs/*.md are what the demo catalog answers (`make
demo`): the real app, the real model, the demo catalog indexed into SQLite in tmp_path. Each
example names its request in its document; its block must have the answer's keys, ids and
texts, and its numbers to 1e-3 (the blocks round to 4 places). When the code's answers change on
purpose, regenerate the blocks: `.venv/bin/python docs/readme_examples.py`."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from service.commands.cli_parser import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _load_examples_module() -> Any:
    path = ROOT / "docs" / "readme_examples.py"
    spec = importlib.util.spec_from_file_location("readme_examples", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


examples = _load_examples_module()
# every document's examples, in order: README.md's first (docs/readme_examples.py documents())
FOUND = [
    e for path in examples.documents() for e in examples.find_examples(path.read_text("utf-8"))
]


def _differences(got: Any, want: Any, where: str = "") -> list[str]:
    """Where `want` (a README block) differs from `got` (the answer, as a block shows it)."""
    here = where or "."
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) != set(want):
            return [f"{here}: keys {sorted(got)} in the answer, {sorted(want)} in the README"]
        return [d for k in want for d in _differences(got[k], want[k], f"{where}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{here}: {len(got)} items in the answer, {len(want)} in the README"]
        pairs = enumerate(zip(got, want, strict=True))
        return [d for i, (g, w) in pairs for d in _differences(g, w, f"{where}[{i}]")]
    if isinstance(want, str) and isinstance(got, str) and "\n" in want:  # a table
        g, w = _tokens(got), _tokens(want)
        same_table = len(g) == len(w) and all(
            math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-3)
            if isinstance(a, float) and isinstance(b, float)
            else a == b
            for a, b in zip(g, w, strict=False)
        )
        return [] if same_table else [f"{here}: the answer's table is\n{got}"]
    numbers = (int, float)
    same = (
        math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-3)
        if isinstance(want, numbers) and isinstance(got, numbers) and not isinstance(want, bool)
        else got == want
    )
    return [] if same else [f"{here}: {got!r} in the answer, {want!r} in the README"]


def _tokens(text: str) -> list[str | float]:
    """A table's text and its decimal numbers, apart."""
    parts = re.split(r"(-?\d+\.\d+)", text)
    return [float(t) if i % 2 else t for i, t in enumerate(parts)]


def _block(example: Any) -> Any:
    return example.block if example.method == "attend search" else json.loads(example.block)


def test_the_documents_name_their_examples() -> None:
    found = FOUND
    paths = [e.path.split("?")[0] for e in found]
    assert "/search" in paths
    assert "/recommend" in paths
    assert any(p.endswith("/explain") for p in paths)
    assert any(p.endswith("/similar") for p in paths)
    assert any(e.method == "attend search" for e in found)
    for example in found:
        _block(example)  # every API block is the JSON it claims to be


def test_differences_sees_a_changed_id_and_a_moved_number() -> None:
    block = {"results": [{"id": "a", "weight": 0.5}], "matched": 3}
    assert _differences(block, block) == []
    assert _differences({"results": [{"id": "b", "weight": 0.5}], "matched": 3}, block)
    assert _differences({"results": [{"id": "a", "weight": 0.51}], "matched": 3}, block)
    assert _differences({"results": [], "matched": 3}, block)
    assert _differences({"results": [{"id": "a", "weight": 0.5}]}, block)
    table = "'q': 3 matched\n   1   0.5000  Dune (Frank Herbert)\n"
    assert _differences(table.replace("0.5000", "0.5004"), table) == []
    assert _differences(table.replace("0.5000", "0.5100"), table)
    assert _differences(table.replace("Dune", "Emma"), table)


@pytest.mark.model
def test_readme_examples_answer_as_the_readme_shows(tmp_path: Path) -> None:
    found = FOUND
    with examples.demo_client(tmp_path) as client:
        answers = {e.request: examples.shown(examples.answer(client, e), e) for e in found}
    problems = [
        f"{e.request}: {d}" for e in found for d in _differences(answers[e.request], _block(e))
    ]
    assert problems == [], "regenerate with: .venv/bin/python docs/readme_examples.py"


def test_the_first_screen_is_enough_for_your_own_catalog(tmp_path: Path) -> None:
    """The second block of the README: activate the venv, then the `attend` commands that index
    and serve a catalog of one's own; the catalog line beside it is a valid catalog."""
    from indexer.catalog import read_catalog

    first_screen = README[: README.index("\n## ")]
    blocks = first_screen.split("```")[1::2]
    commands = [line.split("  #")[0].strip() for line in blocks[1].strip().splitlines()[1:]]
    assert commands[0] == "source .venv/bin/activate"
    attend = [c for line in commands[1:] for c in line.split("&&")]
    parser = build_parser()
    assert {parser.parse_args(c.split()[1:]).command for c in attend} == {"index", "serve"}

    catalog = blocks[2].strip().splitlines()[-1] if blocks[2].startswith("json") else ""
    path = tmp_path / "books.jsonl"
    path.write_text(catalog + "\n", encoding="utf-8")
    books = list(read_catalog(path))
    assert len(books) == 1 and books[0].title
