"""docker-compose.yml and the Dockerfile refer to things that exist (no Docker engine runs here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from service.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_services_are_chained_db_migrate_indexer_api() -> None:
    services = _compose()["services"]
    assert set(services) == {"db", "migrate", "indexer", "api"}
    assert services["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    done = {"migrate": {"condition": "service_completed_successfully"}}
    assert services["indexer"]["depends_on"] == done and services["api"]["depends_on"] == done
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["indexer"]["profiles"] == ["index"]


def test_commands_are_real_cli_commands_on_the_same_database() -> None:
    services = _compose()["services"]
    parser = build_parser()
    for name in ("migrate", "indexer", "api"):
        command = services[name]["command"]
        assert command[0] == "attend"
        args = [
            a.replace("${ATTEND_CATALOG_FILE:-demo_books.jsonl}", "demo_books.jsonl")
            for a in command[1:]
        ]
        parser.parse_args(args)  # exits on an unknown command or option
        url = services[name]["environment"]["ATTEND_DATABASE_URL"]
        db = services["db"]["environment"]
        assert url == (
            f"postgresql+psycopg://{db['POSTGRES_USER']}:{db['POSTGRES_PASSWORD']}"
            f"@db:5432/{db['POSTGRES_DB']}"
        )
    assert services["api"]["ports"] == ["8000:8000"]
    assert "--port" in services["api"]["command"] and "8000" in services["api"]["command"]


def test_mounted_catalog_and_volumes_exist() -> None:
    compose = _compose()
    mount = compose["services"]["indexer"]["volumes"][0]
    host, container, _mode = mount.rsplit(":", 2)
    assert host == "${ATTEND_CATALOG_DIR:-./indexer/data}" and container == "/catalog"
    assert (ROOT / "indexer" / "data" / "demo_books.jsonl").is_file()
    assert compose["services"]["db"]["volumes"][0].split(":")[0] in compose["volumes"]


def test_dockerfile_copies_what_exists() -> None:
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    copies = [line.split()[1:-1] for line in lines if line.startswith("COPY")]
    sources = [s for c in copies for s in c]
    assert {"models", "indexer", "service", "migrations", "pyproject.toml"} <= set(sources)
    for source in sources:
        assert (ROOT / source).exists(), source
    assert any(line.startswith("CMD") and "serve" in line for line in lines)
