"""Property-based fuzzing of the whole API against its own OpenAPI schema (schemathesis).

Every operation in /openapi.json gets generated requests, valid and invalid, on a real database
holding the demo catalog: none may answer 5xx, and every answer must be one the schema declares
(status, content type, body). Operations are read from the schema, so an endpoint added later is
fuzzed without a change here; `test_every_route_is_in_the_schema` makes sure none hides from it.
Bounded and deterministic: a fixed number of examples per operation, derandomized generation,
no example database.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, Phase, settings
from schemathesis.python import asgi
from starlette.routing import Route

from conftest import FakeEncoder
from service.main import create_app
from service.settings import ServiceSettings

EXAMPLES_PER_OPERATION = 60
FRAMEWORK_ROUTES = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def settings_for(database_url: str) -> ServiceSettings:
    return ServiceSettings(database_url=database_url, device="cpu")


# Generation needs only the schema, which needs no database: read it from an app never started.
schema = schemathesis.openapi.from_dict(create_app(settings_for("sqlite://")).openapi())


@pytest.fixture(scope="module")
def fuzzed_app(demo_database_url: str) -> Iterator[FastAPI]:
    """The app on the demo catalog. Schemathesis starts its lifespan on the first request; it
    is stopped here."""
    yield create_app(settings_for(demo_database_url), encoder=FakeEncoder())
    asgi.shutdown_lifespans()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)
def test_no_input_gives_a_5xx_or_an_undeclared_answer(
    case: schemathesis.Case, fuzzed_app: FastAPI
) -> None:
    case.call_and_validate(
        app=fuzzed_app,
        base_url="http://testserver",
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
