"""The rooms as the import graph shows them (grimp, which import-linter builds on): no circle
among the product's modules, no upward import between the rooms, no module of service/ outside
a room but the entry point, a contract per room that forbids by default, no import by a
module's name (the importlib door), and an import injected into a copy of the tree breaking
the contract of the room it was injected into, and only that one. tests/test_rooms.py follows
the calls of a request through the same rooms."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "indexer", "models", "migrations")
# The rooms, from the top: a module may import its own room's and those after it, never one
# before it. Migrations stand aside: they import the indexer's tables, and nothing imports them.
ORDER = (
    "service.launch",  # the entry point
    "service.commands",
    "service.cluster.ray_serve",
    "service.api",
    "service.engine",
    "service.cluster.shards",
    "service.config",
    "indexer",
    "models",
)
ROOMS = (*ORDER, "migrations")
SERVICE_ROOMS = {"api", "engine", "cluster", "commands", "config"}
ENTRY_POINT = "launch"
# A product module named in a call that imports or finds a module: only here, on purpose.
IMPORTLIB_DOOR = {
    ("indexer/db.py", "migrations"),  # Alembic's script location, as files
    ("models/onnx_encoder.py", "find_spec(<not a literal>)"),  # are onnxruntime, onnx installed
}
LOADERS = {"import_module", "__import__", "find_spec", "run_module", "spec_from_file_location"}


@cache
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=True)


def room(module: str) -> str | None:
    """The room of a product module (the longest of ROOMS it is in), or None."""
    within = [r for r in ROOMS if module == r or module.startswith(r + ".")]
    return max(within, key=len) if within else None


def direct_imports(rooms: Iterable[str] = ROOMS) -> set[tuple[str, str]]:
    """(importer, imported) for every direct import of a module in one of `rooms`."""
    g = graph()
    return {
        (m, w)
        for m in g.modules
        if room(m) in rooms
        for w in g.find_modules_directly_imported_by(m)
    }


def cycles() -> list[list[str]]:
    """The product's strongly connected components of more than one module (Tarjan)."""
    g = graph()
    ours = sorted(m for m in g.modules if m.split(".")[0] in PACKAGES)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(g.find_modules_directly_imported_by(v)):
            if w.split(".")[0] not in PACKAGES:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append([v, *component])

    for module in ours:
        if module not in index:
            visit(module)
    return found


def test_no_import_circle_among_the_products_modules() -> None:
    assert len(graph().modules) > 150  # the whole product was found
    assert cycles() == []


def test_no_room_imports_a_room_above_it() -> None:
    rank = {r: i for i, r in enumerate(ORDER)}
    upward = sorted(
        (m, w)
        for m, w in direct_imports(ORDER)
        if room(w) in rank and rank[room(w)] < rank[room(m)]  # type: ignore[index]
    )
    assert upward == []


def test_service_holds_its_rooms_and_the_entry_point_only() -> None:
    top = {m.split(".")[1] for m in graph().modules if m.startswith("service.")}
    assert top == SERVICE_ROOMS | {ENTRY_POINT}
    on_disk = {p.stem for p in (ROOT / "service").glob("*.py")}
    assert on_disk == {"__init__", ENTRY_POINT}  # every other name is a room's package
    assert all((ROOT / "service" / r / "__init__.py").is_file() for r in SERVICE_ROOMS)


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_each_room_has_a_contract_forbidding_by_default() -> None:
    """Each room's contract forbids every other room and every third-party package the product
    imports, but for those the room imports itself: a new dependency, or a room taking up a
    package or a room it never used, needs its contract changed first."""
    by_room = {
        r: [c for c in _contracts() if c["name"].startswith(r.replace(".", "/"))] for r in ROOMS
    }
    assert all(len(c) == 1 for c in by_room.values()), by_room
    stdlib = sys.stdlib_module_names
    imports = direct_imports()
    third_party = {w for _, w in imports if w.split(".")[0] not in (*PACKAGES, *stdlib)}
    assert {"torch", "fastapi", "sqlalchemy", "ray"} <= third_party
    for source in ROOMS:
        (contract,) = by_room[source]
        assert contract["type"] == "forbidden" and contract["source_modules"] == [source]
        forbidden = contract["forbidden_modules"]
        used = {room(w) or w for m, w in imports if room(m) == source}
        others = [r for r in ROOMS if r != source and not r.startswith(source + ".")]
        for name in sorted(third_party | set(others)):
            covered = any(name == f or name.startswith(f + ".") for f in forbidden)
            assert covered or name in used, f"{contract['name']!r} neither forbids {name}"


def _calls(tree: ast.AST) -> Iterable[tuple[str, ast.expr | None]]:
    """(function name, first argument) of each call of a loader (LOADERS) in `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in LOADERS:
                yield name, node.args[0] if node.args else None


def test_no_product_module_is_imported_by_its_name() -> None:
    """import-linter sees import statements only: a module imported by a name in a string
    (importlib.import_module, __import__, find_spec, runpy) passes every contract. The one
    product name given to such a call is the migrations', found as files for Alembic."""
    doors = set()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for name, arg in _calls(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    doors.add((where, f"{name}(<not a literal>)"))
                elif arg.value.split(".")[0] in PACKAGES:
                    doors.add((where, arg.value))
    assert doors == IMPORTLIB_DOOR


def _contract_results(output: str) -> dict[str, str]:
    """Each contract's name → KEPT or BROKEN, from lint-imports' report."""
    line = re.compile(r"^(.+?) (KEPT|BROKEN)(?: \(\d+ ignored imports?\))?$")
    return {m[1]: m[2] for m in map(line.match, output.splitlines()) if m}


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "1000"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The four packages and pyproject.toml, copied; each test injects into its own copy."""
    tree = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tree)
    done = _lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr  # the copy is linted as the tree
    assert set(_contract_results(done.stdout).values()) == {"KEPT"}
    return tree


@pytest.mark.parametrize(
    ("module", "line", "blamed"),
    [
        ("migrations/env.py", "import service.api.main", "migrations/"),
        ("indexer/schema.py", "import migrations.leftovers", "indexer/"),
        ("models/attention.py", "import ray", "models/"),
        ("indexer/schema.py", "import fastapi", "indexer/"),
    ],
)
def test_an_injected_import_breaks_the_contract_of_its_room(
    tree_copy: Path, tmp_path: Path, module: str, line: str, blamed: str
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(tree_copy, tree)
    with (tree / module).open("a", encoding="utf-8") as f:
        f.write(f"\n{line}  # injected\n")
    done = _lint_imports(tree)
    results = _contract_results(done.stdout)
    assert done.returncode == 1 and len(results) == len(_contracts()), done.stdout
    broken = [name for name, result in results.items() if result == "BROKEN"]
    assert len(broken) == 1 and broken[0].startswith(blamed), broken
    assert f"{module.removesuffix('.py').replace('/', '.')} -> {line.split()[1]}" in done.stdout
