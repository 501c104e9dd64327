"""docker-compose.yml and the Dockerfile refer to things that exist (no Docker engine runs here)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from indexer.settings import IndexSettings
from service.commands.cli_parser import build_parser
from service.config.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _gpu_override() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.gpu.yml").read_text())
    return data


def test_services_are_chained_db_migrate_indexer_api() -> None:
    services = _compose()["services"]
    assert set(services) == {"db", "migrate", "indexer", "api", "lb"}
    assert services["db"]["image"] == "postgres:16"
    assert services["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    done = {"condition": "service_completed_successfully"}
    assert services["indexer"]["depends_on"] == {"migrate": done}
    assert services["api"]["depends_on"] == {"migrate": done, "indexer": done}
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["migrate"]["restart"] == services["indexer"]["restart"] == "no"


def test_a_first_up_indexes_and_a_later_one_changes_nothing() -> None:
    """Issue 24: a first `docker compose up` without `--profile index` left /readyz at 503
    forever (an empty database) and lb never started. The indexer now runs at every `up`,
    in no profile, and indexes its catalog only into a database with no index yet."""
    services = _compose()["services"]
    indexer = services["indexer"]
    assert "profiles" not in indexer  # a plain `docker compose up` runs it
    args = build_parser().parse_args(indexer["command"][1:])
    assert args.command == "index" and args.if_empty
    assert args.path == "/catalog/${ATTEND_CATALOG_FILE:-demo_books.jsonl}"
    for name, service in services.items():
        assert "profiles" not in service, f"{name} would not start on a plain `up`"


def test_environment_names_real_settings() -> None:
    fields = set(IndexSettings.model_fields) | set(ServiceSettings.model_fields)
    settings = {f"ATTEND_{name.upper()}" for name in fields}
    compose = _compose()["services"]
    gpu = _gpu_override()["services"]
    for service in [compose["migrate"], compose["indexer"], compose["api"], *gpu.values()]:
        env = service["environment"]
        assert set(env) <= settings, set(env) - settings
        values = {k.removeprefix("ATTEND_").lower(): v for k, v in env.items()}
        ServiceSettings(**values)  # every value is valid for its setting


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
    assert "--port" in services["api"]["command"] and "8000" in services["api"]["command"]


def test_api_scales_behind_the_load_balancer() -> None:
    """`docker compose up --scale api=3`: no fixed host port on api (replicas would clash);
    lb publishes :8000 and proxies to every api replica by Docker's DNS, once they are healthy."""
    services = _compose()["services"]
    api, lb = services["api"], services["lb"]
    assert "ports" not in api and "container_name" not in api
    assert api["expose"] == ["8000"]
    # the host's loopback unless asked otherwise: the API is not for every interface by default,
    # and the operator's port (admin, metrics, docs) stays there when the public one is opened
    assert lb["ports"] == [
        "${ATTEND_PUBLISH_HOST:-127.0.0.1}:8000:8000",
        "${ATTEND_OPS_PUBLISH_HOST:-127.0.0.1}:8001:8001",
    ]
    assert lb["depends_on"] == {"api": {"condition": "service_healthy"}}
    host, container, mode = lb["volumes"][0].split(":")
    assert container == "/etc/nginx/nginx.conf" and mode == "ro"
    conf = (ROOT / host).read_text()
    assert "listen 8000 backlog=4096;" in conf and "listen 8001;" in conf
    assert "resolver 127.0.0.11" in conf  # Docker's DNS: one address per replica
    assert conf.count("set $api http://api:8000;") == conf.count("proxy_pass $api;") == 3
    assert "http://127.0.0.1:8001/readyz" in " ".join(lb["healthcheck"]["test"])  # operator's


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


def test_gpu_override_reserves_an_nvidia_gpu_for_the_torch_services() -> None:
    base = _compose()["services"]
    override = _gpu_override()["services"]
    assert set(override) == {"api", "indexer"} and set(override) <= set(base)
    for service in override.values():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        assert service["environment"]["ATTEND_DEVICE"] == "cuda"
    readme = (ROOT / "README.md").read_text()
    assert "docker-compose.gpu.yml" in readme


def test_the_cpu_image_takes_cpu_torch_and_the_gpu_one_cuda() -> None:
    """Issue 24: `build: .` installed PyPI's torch, the CUDA build (GBs of nvidia-* wheels),
    for a CPU stack. The Dockerfile installs torch from PyTorch's CPU index by default, before
    the package, at the project's pinned version; the GPU override builds its own image with
    TORCH_INDEX_URL="" (PyPI's CUDA wheel), under another tag."""
    text = (ROOT / "Dockerfile").read_text()
    (arg,) = [line for line in text.splitlines() if line.startswith("ARG TORCH_INDEX_URL=")]
    assert arg.split("=", 1)[1] == "https://download.pytorch.org/whl/cpu"
    pinned = re.search(r'"torch==([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned is not None
    install = text.index(f'pip install --index-url "$TORCH_INDEX_URL" torch=={pinned[1]}')
    # the package after torch, with gcc for its C passes (setup.py), checked built in the image
    package = text.index("&& pip install .")
    assert install < text.index("apt-get install -y --no-install-recommends gcc") < package
    assert package < text.index("assert cpu_kernels.available()")
    base = _compose()["x-attend"]
    assert base["build"] == {"context": "."} and base["image"] == "attend:latest"
    for service in _gpu_override()["services"].values():
        assert service["build"] == {"context": ".", "args": {"TORCH_INDEX_URL": ""}}
        assert service["image"] == "attend:gpu"


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for pattern in (".venv", ".git", "*.db", "*.db-*", ".attend-cache", "benchmarks/results"):
        assert pattern in ignored, pattern
    assert "**/__pycache__" in ignored and ".env" in ignored
    # nothing the Dockerfile copies is ignored
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY"):
            for source in line.split()[1:-1]:
                assert source not in ignored, source
