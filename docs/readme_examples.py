"""The example responses of README.md and docs/*.md, regenerated from the demo catalog as `make
demo` serves it.

    .venv/bin/python docs/readme_examples.py           # rewrite every document's example blocks
    .venv/bin/python docs/readme_examples.py --check   # exit 1 when a block is out of date

An example is an HTML comment in a document (`DOCUMENTS`) naming the request, then a ```json
block holding its response:

    <!-- example: GET /search?q=Tolkien&k=2 -->
    <!-- example: POST /recommend {"liked": ["neuromancer-gibson"], "k": 3} -->
    <!-- example: attend search "qwertyuiop asdfghjkl" -k 2 -->   (then a plain ``` block)

This indexes the bundled demo catalog into a SQLite file in a temporary folder with `attend
index`'s settings, serves it in-process with the service's (so with the real model and the
defaults of the code at hand: ATTEND_* variables that are set apply too, as for `make demo`),
sends each request and writes the response into its block, floats rounded to 4 places and long
lists cut (`shown`). tests/test_readme_examples.py sends the same requests and compares their
answers with the blocks: same keys, same ids and texts, numbers within 1e-3. It needs the [dev]
install (the app is driven through starlette's TestClient, which needs httpx).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

README = Path(__file__).resolve().parents[1] / "README.md"


def documents() -> list[Path]:
    """The files whose examples are generated and tested: README.md, then docs/*.md."""
    return [README, *sorted((README.parent / "docs").glob("*.md"))]


EXAMPLE = re.compile(
    r"<!-- example: (?P<method>GET|POST) (?P<path>\S+)(?: (?P<body>\{.*?\}))? -->\n"
    r"```json\n(?P<block>.*?)\n```",
    re.DOTALL,
)
# `attend search` as it prints the same request's response
# (service.commands.serve_commands.table), in a plain block
CLI_EXAMPLE = re.compile(
    r"<!-- example: attend search (?P<path>.+?) -->\n```\n(?P<block>.*?)\n```", re.DOTALL
)
# How much of an explanation's long lists a block keeps (its text says it is cut there).
CUT = {"book_words": 4, "weights": 2, "attends": 2, "highlights": 4}
CUT_ROW = 4  # columns of each kept `weights` row
CUT_DESCRIPTION = 80  # characters of the book's description


@dataclass(frozen=True)
class Example:
    method: str
    path: str
    body: dict[str, Any] | None
    block: str  # the ```json block's text as the README has it
    start: int  # the block's span in the README
    end: int

    @property
    def request(self) -> str:
        body = f" {json.dumps(self.body)}" if self.body is not None else ""
        return f"{self.method} {self.path}{body}"


def find_examples(readme: str) -> list[Example]:
    """Every example of `readme`, in order: API requests, and `attend search` commands (method
    "attend search", the command's arguments as the path)."""
    found = [
        Example(
            method=m["method"],
            path=m["path"],
            body=json.loads(m["body"]) if m["body"] else None,
            block=m["block"],
            start=m.start("block"),
            end=m.end("block"),
        )
        for m in EXAMPLE.finditer(readme)
    ] + [
        Example("attend search", m["path"], None, m["block"], m.start("block"), m.end("block"))
        for m in CLI_EXAMPLE.finditer(readme)
    ]
    return sorted(found, key=lambda e: e.start)


@contextmanager
def demo_client(folder: Path) -> Iterator[Any]:
    """A TestClient of the app over the demo catalog, indexed into `folder`/attend.db."""
    from fastapi.testclient import TestClient

    from indexer import db, pipeline
    from indexer.data import DEMO_CATALOG
    from indexer.settings import IndexSettings
    from service.api.main import create_app
    from service.config.settings import ServiceSettings
    from service.engine.startup import build_encoder

    url = f"sqlite:///{folder / 'attend.db'}"
    settings = IndexSettings(database_url=url)
    engine = db.create_db_engine(url)
    try:
        pipeline.run(settings, engine=engine, encoder=build_encoder(settings), path=DEMO_CATALOG)
    finally:
        engine.dispose()
    app = create_app(ServiceSettings(database_url=url))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def answer(client: Any, example: Example) -> Any:
    """The response's JSON, or for `attend search` its table; an example is always a
    successful request."""
    if example.method == "attend search":
        return _search_table(client, example)
    if example.method == "GET":
        response = client.get(example.path)
    else:
        response = client.post(example.path, json=example.body)
    if response.status_code != 200:
        raise RuntimeError(f"{example.request} answered {response.status_code}: {response.text}")
    return response.json()


def _search_table(client: Any, example: Example) -> str:
    """What `attend search ARGS` prints: the same search through GET /search, as a table."""
    import shlex

    from service.commands.cli_parser import build_parser
    from service.commands.serve_commands import table

    args = build_parser().parse_args(["search", *shlex.split(example.path)])
    names = ("k", "offset", "author", "year_min", "year_max", "language", "heads")
    given = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    params = {"q": args.query, **given}
    response = client.get("/search", params=params)
    if response.status_code != 200:
        raise RuntimeError(f"{example.request} answered {response.status_code}: {response.text}")
    return table(response.json()).rstrip("\n")


def shown(value: Any, example: Example) -> Any:
    """What a block shows of a response: floats to 4 places; an explanation's long lists cut."""
    if isinstance(value, str):  # a table, printed as it is
        return value
    if example.path.split("?")[0].endswith("/explain"):
        value = dict(value)
        for key, keep in CUT.items():
            value[key] = value[key][:keep]
        value["weights"] = [row[:CUT_ROW] for row in value["weights"]]
        if len(value["description"]) > CUT_DESCRIPTION:
            value["description"] = value["description"][:CUT_DESCRIPTION] + "…"
    return _rounded(value)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


WIDTH = 100  # the README's lines


def render(value: Any, indent: int = 0) -> str:
    """JSON as the README shows it: what fits in WIDTH on one line; a longer object or list
    broken after its items, as many items to a line as fit, nested ones aligned inside it."""
    inline = json.dumps(value, ensure_ascii=False)
    if indent + len(inline) <= WIDTH or not isinstance(value, dict | list) or not value:
        return inline
    pad = indent + 1
    parts = (
        [(f"{json.dumps(k, ensure_ascii=False)}: ", v) for k, v in value.items()]
        if isinstance(value, dict)
        else [("", v) for v in value]
    )
    lines: list[str] = []
    for prefix, item in parts:
        text = prefix + render(item, pad + len(prefix))
        joined = f"{lines[-1]}, {text}" if lines else text
        if lines and "\n" not in text and "\n" not in lines[-1] and pad + len(joined) < WIDTH:
            lines[-1] = joined
        else:
            lines.append(text)
    brackets = "{}" if isinstance(value, dict) else "[]"
    return brackets[0] + f",\n{' ' * pad}".join(lines) + brackets[1]


def regenerate(readme: str, answers: dict[str, Any], examples: list[Example]) -> str:
    """`readme` with every example's block replaced by its answer."""
    out, last = [], 0
    for example in examples:
        value = shown(answers[example.request], example)
        out += [readme[last : example.start], value if isinstance(value, str) else render(value)]
        last = example.end
    return "".join(out) + readme[last:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="say whether the blocks are current")
    parser.add_argument(
        "--readme",
        type=Path,
        action="append",
        help="a file to rewrite (repeatable; default: README.md and docs/*.md)",
    )
    args = parser.parse_args(argv)
    from service.commands.logs import configure_logging

    configure_logging(logging.WARNING)

    texts = {path: path.read_text(encoding="utf-8") for path in args.readme or documents()}
    found = {path: find_examples(text) for path, text in texts.items()}
    answers, failed = {}, []
    with tempfile.TemporaryDirectory() as folder, demo_client(Path(folder)) as client:
        for example in (e for examples in found.values() for e in examples):
            try:
                answers[example.request] = answer(client, example)
            except RuntimeError as e:
                failed.append(str(e))
    if failed:  # every file is left as it was
        sys.stderr.write("".join(f"{line}\n" for line in failed))
        return 1
    stale_files = 0
    for path, text in texts.items():
        fresh = regenerate(text, answers, found[path])
        stale = [e.request for e in find_examples(fresh) if e.block != _block_of(text, e)]
        stale_files += bool(stale)
        if args.check:
            for request in stale:
                sys.stderr.write(f"out of date in {path}: {request}\n")
        elif found[path]:
            path.write_text(fresh, encoding="utf-8")
            sys.stdout.write(f"{len(found[path])} examples, {len(stale)} rewritten in {path}\n")
    return 1 if args.check and stale_files else 0


def _block_of(readme: str, example: Example) -> str | None:
    for old in find_examples(readme):
        if old.request == example.request:
            return old.block
    return None


if __name__ == "__main__":
    sys.path.insert(0, str(README.parent))  # run as a script from anywhere: the project's packages
    sys.exit(main())
