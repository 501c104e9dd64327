# The README's two commands: `make demo` (set up the runtime, index the demo catalog, serve it)
# and `make test` (set up everything, lint, type-check, run the tests). .ci/run runs `make test`.
# Two stamps: the demo installs the runtime only (no Ray, Playwright, schemathesis or mypy); the
# tests add the [dev] extras to the same venv, so `make demo` then `make test` works, and the
# other way round needs nothing more.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --quiet --disable-pip-version-check

.PHONY: install install-runtime demo test lint

# setup.py builds the C passes (models/_cpu_kernels.c, service/engine/_postings.c) into the checkout:
# a changed kernel is built again by the next `make`
$(VENV)/.runtime: pyproject.toml setup.py models/_cpu_kernels.c service/engine/_postings.c
	$(PYTHON) -m venv $(VENV)
	$(PIP) -e .
	touch $@

$(VENV)/.dev: $(VENV)/.runtime pyproject.toml
	$(PIP) -e ".[dev]"
	touch $@

install-runtime: $(VENV)/.runtime

install: $(VENV)/.dev

# ATTEND_PORT / ATTEND_HOST (or a .env file) choose where it serves, as for `attend serve`.
# The port is checked first (standard library only: no venv yet), so one in use fails in a
# second, naming it, not after the install's minutes; `attend demo` binds it again itself.
demo:
	@$(PYTHON) -m service.commands.port_check
	@$(MAKE) --no-print-directory install-runtime
	$(BIN)/attend demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The thread settings the `attend` command gives the service (service/commands/threads.py), so
# in-process tests run the CPU product the service runs. The PostgreSQL tests skip unless
# ATTEND_TEST_POSTGRES_URL is set, the browser tests unless Debian's chromium is on PATH.
# PYTHONFAULTHANDLER: a crash, even after the last test, prints every thread's stack.
# `-n auto`: pytest-xdist's workers, one a core (at most 4; every test makes its own databases,
# folders and ports, so they run side by side); `-n 0` for one process.
test: lint
	PYTHONFAULTHANDLER=1 OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4 $(BIN)/python -m pytest -n auto --maxprocesses 4
