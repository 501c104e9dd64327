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

import re
from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, settings
from schemathesis.python import asgi
from starlette.routing import Route

from conftest import FakeEncoder, index_demo_catalog
from service.main import create_app
from service.settings import ServiceSettings

EXAMPLES_PER_OPERATION = 60
FRAMEWORK_ROUTES = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}
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
