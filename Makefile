# The README's two commands: `make demo` (set up, index the demo catalog, serve it) and
# `make test` (set up, lint, type-check, run the tests). .ci/run runs `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test lint

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/attend demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The thread settings the `attend` command gives the service (service/launch.py), so in-process
# tests run the CPU product the service runs.
test: lint
	OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4 $(BIN)/python -m pytest
