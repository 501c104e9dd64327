"""Property-based fuzzing of the whole API against its own OpenAPI schema (schemathesis).

Every operation in /openapi.json gets generated requests, valid and invalid, on a real database
holding the demo catalog: none may answer 5xx, and every answer must be one the schema declares
(status, content type, body). Operations are read from the schema, so an endpoint added later is
fuzzed without a change here; `test_every_route_is_in_the_schema` makes sure none hides from it.
The admin operations (present when an admin token is set, as here) are fuzzed with the token,
on a database of their own. Bounded and deterministic: a fixed number of examples per
operation, derandomized generation, no example database.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis.python import asgi
from sqlalchemy import Engine
from starlette.routing import Route

from conftest import BACKENDS, FakeEncoder, index_demo_catalog, new_database
from indexer import db, pipeline, snapshot_guard
from indexer.catalog import MAX_DEPTH
from indexer.settings import IndexSettings
from models.text import normalize_id
from service.api.main import create_app
from service.config.settings import ServiceSettings

EXAMPLES_PER_OPERATION = 60
# FastAPI's docs, and the offline docs' static assets (fastapi-offline): not API operations
FRAMEWORK_ROUTES = {
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    "/static-offline-docs/{path}",
}
ADMIN_TOKEN = "fuzz-admin-token-0123456789abcdef"
# Every request carries the admin token, so the admin operations are fuzzed past their auth
# (tests/test_admin.py covers 401 and 403); the other operations ignore it.
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
# Admin operations change the index (a generated catalog can be a valid, empty one): they get a
# database of their own, so the others always search the whole demo catalog.
ADMIN = "^/admin/"


def settings_for(database_url: str) -> ServiceSettings:
    admin = {"admin_token": ADMIN_TOKEN} if "admin_token" in ServiceSettings.model_fields else {}
    return ServiceSettings(database_url=database_url, device="cpu", **admin)


# Generation needs only the schema, which needs no database: read it from an app never started.
schema = schemathesis.openapi.from_dict(create_app(settings_for("sqlite://")).openapi())
FUZZ = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def fuzzed_app(demo_database_url: str) -> Iterator[FastAPI]:
    """The app on the demo catalog. Schemathesis starts its lifespan on the first request; it
    is stopped here."""
    yield create_app(settings_for(demo_database_url), encoder=FakeEncoder())
    asgi.shutdown_lifespans()


@pytest.fixture
def admin_app(database_url: str) -> Iterator[FastAPI]:
    """The app on a database of its own, which the admin operations may change."""
    index_demo_catalog(database_url)
    yield create_app(settings_for(database_url), encoder=FakeEncoder())
    asgi.shutdown_lifespans()


@schema.exclude(path_regex=ADMIN).parametrize()
@FUZZ
def test_no_input_gives_a_5xx_or_an_undeclared_answer(
    case: schemathesis.Case, fuzzed_app: FastAPI
) -> None:
    _call_and_validate(case, fuzzed_app)


if any(re.match(ADMIN, path) for path in schema.raw_schema["paths"]):  # routes with a token

    @schema.include(path_regex=ADMIN).parametrize()
    @FUZZ
    def test_no_admin_input_gives_a_5xx_or_an_undeclared_answer(
        case: schemathesis.Case, admin_app: FastAPI
    ) -> None:
        _call_and_validate(case, admin_app)


def _call_and_validate(case: schemathesis.Case, app: FastAPI) -> None:
    case.call_and_validate(
        app=app,
        base_url="http://testserver",
        headers=HEADERS,
        # Rules a JSON schema cannot state (year_min ≤ year_max, a query that is not all blanks
        # or has no control characters) rightly refuse some schema-valid requests with a 422.
        excluded_checks=[schemathesis.checks.positive_data_acceptance],
    )


def test_every_route_is_in_the_schema(fuzzed_app: FastAPI) -> None:
    """A route left out of /openapi.json would escape the fuzzing above."""
    documented = set(fuzzed_app.openapi()["paths"])
    routes = _route_paths(fuzzed_app)
    assert {"/search", "/healthz"} <= routes
    assert routes - FRAMEWORK_ROUTES <= documented


def _route_paths(app: FastAPI) -> set[str]:
    """The paths of every route, inside included routers too (FastAPI ≥ 0.12x keeps an
    included router whole in `app.routes`)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # older FastAPI copied included routes into app.routes
        return {r.path for r in app.routes if isinstance(r, Route)}
    return {str(c.path_format) for c in iter_route_contexts(app.routes) if c.path_format}


# --- the catalog reader -------------------------------------------------------------------
# Hypothesis writes catalogs (JSONL objects with values of every JSON kind, lone surrogates,
# NUL, NaN, huge integers and deep nesting among them; CSV cells of any text) and indexes each
# with --skip-invalid into one real database per backend, as successive generations. Every row
# is then either rejected with its file and line, or stored and served by GET /books/{id} as
# the catalog said it. Bounded: a few rows a catalog, a fixed number of catalogs.

CATALOG_EXAMPLES = 60
# No shrinking: a failure shows the catalog as generated, and the run stays bounded in time.
CATALOG_FUZZ = settings(
    max_examples=CATALOG_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
_ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=12)  # surrogates too
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _ANY_TEXT
    | st.sampled_from(["", " padded ", "Dune", "ümlaut \U0001f409", "\x00", "9" * 30])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ANY_TEXT, inner, max_size=3),
    max_leaves=6,
)


_WORDS = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]), max_size=12
)


def _mostly(
    good: st.SearchStrategy[object], bad: st.SearchStrategy[object]
) -> st.SearchStrategy[object]:
    """Mostly `good`, sometimes `bad` (Hypothesis favours the smallest draw, here 0: good),
    so most rows get past the first check to the later ones."""
    return st.integers(min_value=0, max_value=5).flatmap(lambda n: bad if n == 5 else good)


@st.composite
def _jsonl_row(draw: st.DrawFn) -> str:
    """One line: usually an object with the known fields (each valid or not) and metadata of
    every JSON kind, sometimes broken JSON, another kind of JSON, or nesting past the limit."""
    kind = draw(st.sampled_from(["row"] * 7 + ["deep", "text", "value"]))  # "row" simplest
    if kind == "text":
        return draw(st.text(alphabet=st.characters(codec="utf-8"), max_size=20))
    if kind == "value":
        return json.dumps(draw(_VALUES))
    row: dict[str, object] = {
        "id": draw(_mostly(_WORDS.map(lambda t: f"k{t}"), _SCALARS)),
        "title": draw(_mostly(_WORDS.map(lambda t: f"T{t}"), _SCALARS)),
    }
    optional = {
        "description": _mostly(_WORDS, _VALUES),
        "authors": _mostly(st.lists(_WORDS, max_size=2), _VALUES),
        "year": _mostly(st.integers(min_value=-(2**32), max_value=2**32), _SCALARS),
        "language": _mostly(st.text(max_size=70), _SCALARS),
        "meta": _VALUES,
        "more": _VALUES,
    }
    for name, values in optional.items():
        if draw(st.booleans()):
            row[name] = draw(values)
    text = json.dumps(row, allow_nan=True, ensure_ascii=draw(st.booleans()))
    if kind == "deep":
        levels = draw(st.sampled_from([MAX_DEPTH - 2, MAX_DEPTH, 300, 1200]))
        text = text[:-1] + ', "deep": ' + "[" * levels + "]" * levels + "}"
    return text


@pytest.fixture(scope="module")
def catalog_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Engine, TestClient]]:
    """A database per backend (the module's demo one would be changed), served with polling
    off: the test asks the watcher to swap after each run."""
    folder = tmp_path_factory.mktemp("catalog-fuzz")
    with new_database(request.param, folder) as url:
        engine = db.create_db_engine(url)
        db.upgrade(engine)
        service = ServiceSettings(database_url=url, device="cpu", generation_poll_s=0)
        try:
            with TestClient(create_app(service, encoder=FakeEncoder())) as client:
                yield engine, client
        finally:
            engine.dispose()


def _index_and_check(
    engine: Engine, client: TestClient, path: Path, expected: dict[int, dict[str, object]]
) -> None:
    """Index `path` (--skip-invalid); each line of `expected` (line → the row's fields) is
    rejected with `path:line`, or served with those fields."""
    url = engine.url.render_as_string(hide_password=False)
    total, _ = pipeline.validate(path)
    try:
        report = pipeline.run(
            IndexSettings(database_url=url),
            engine=engine,
            encoder=FakeEncoder(),
            path=path,
            skip_invalid=True,
            allow_mass_delete=True,  # each example replaces the last one's books
        )
    except snapshot_guard.SnapshotRefusedError as e:  # no valid row: refused, nothing written
        assert total == 0 and "holds no valid book" in str(e), (total, e)
        return
    client.app.state.watcher.check()  # type: ignore[attr-defined]
    rejected = {r.line: r for r in report.rejected}
    for r in report.rejected:
        assert r.path == str(path) and str(r).startswith(f"{path}:{r.line}: ") and r.reason
    # a CSV reader that cannot go on (a bare CR outside quotes) says so at the line it stopped
    stop = min((r.line for r in report.rejected if "reading stopped here" in r.reason), default=0)
    for line, row in expected.items():
        if line in rejected or (stop and line >= stop):
            continue
        book_id = normalize_id(str(row["id"])).strip()  # as the index stores it
        got = client.get(f"/books/{quote(book_id, safe='')}")
        assert got.status_code == 200, (line, row, got.text)
        body = got.json()
        assert body["id"] == book_id
        assert body["title"] == str(row["title"]).strip()
        known = {"id", "title", "description", "authors", "year", "language"}
        assert body["metadata"] == {k: v for k, v in row.items() if k not in known}
        if isinstance(row.get("year"), int):
            assert body["year"] == row["year"]
    if not stop:
        assert report.books == len(expected) - len(set(expected) & set(rejected))


@pytest.mark.parametrize("catalog_service", BACKENDS, indirect=True)
@CATALOG_FUZZ
@given(lines=st.lists(_jsonl_row(), min_size=1, max_size=5))
def test_every_jsonl_row_is_rejected_with_its_line_or_served(
    catalog_service: tuple[Engine, TestClient],
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
) -> None:
    engine, client = catalog_service
    path = tmp_path_factory.mktemp("jsonl") / "books.jsonl"
    text = "\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines) + "\n"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    expected = {}
    for n, line in enumerate(text.split("\n")[:-1], start=1):
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue  # the reader must reject it: not in `expected`, checked by the count
        if isinstance(row, dict) and {"id", "title"} <= set(row):
            expected[n] = row
    _index_and_check(engine, client, path, expected)


_CELL = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),
    st.sampled_from(["", " x ", "1999", "-5", "9" * 30, "a;b", 'q"uote', "new\nline", "\x00"]),
)


@pytest.mark.parametrize("catalog_service", BACKENDS, indirect=True)
@CATALOG_FUZZ
@given(
    rows=st.lists(
        st.tuples(_CELL.map(lambda t: f"k{t}"), _CELL, _CELL, _CELL), min_size=1, max_size=5
    )
)
def test_every_csv_row_is_rejected_with_its_line_or_served(
    catalog_service: tuple[Engine, TestClient],
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[str, str, str, str]],
) -> None:
    engine, client = catalog_service
    path = tmp_path_factory.mktemp("csv") / "books.csv"
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["id", "title", "year", "shelf"])
    expected: dict[int, dict[str, object]] = {}
    for cells in rows:
        line = out.getvalue().count("\n") + 1
        writer.writerow(cells)
        if cells[1].strip():  # a row without a title is rejected (or blank: skipped)
            row: dict[str, object] = {"id": cells[0], "title": cells[1]}
            if cells[3].strip():
                row["shelf"] = cells[3].strip()
            expected[line] = row
    path.write_text(out.getvalue(), encoding="utf-8")
    _index_and_check(engine, client, path, expected)
