# Two entry points for people: `make demo` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PACKAGES := -e '.[test,otel,ui]' -e ./contract_tests -e ./backends/sqlite -e ./backends/postgres -e ./backends/redis -e ./examples/backends/docket_lmdb

.PHONY: venv demo test lint typecheck unit kit negative services clean chaos

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml contract_tests/pyproject.toml backends/*/pyproject.toml examples/backends/*/pyproject.toml
	$(BIN)/python -m pip install --quiet $(PACKAGES)
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Each backend's tests/ is checked on its own: their conftest modules share a name.
typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy backends/postgres/tests
	$(BIN)/mypy backends/redis/tests

services:
	./scripts/ensure-services
	./scripts/ensure-browser

# Two pytest-xdist workers for most of the suite; the campaigns that kill processes and
# measure concurrency across them (tests/chaos, tests/proof) run after, on their own.
unit: $(STAMP) services
	$(BIN)/python -m pytest -q -n 2 --durations=15 --ignore=tests/chaos --ignore=tests/proof
	$(BIN)/python -m pytest -q --durations=5 tests/chaos tests/proof

kit: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --pyargs docket_contract_tests --docket-backend memory://

negative: $(STAMP)
	$(BIN)/python -m docket_contract_tests.negative

test: lint typecheck kit negative unit

# The chaos campaign (bench/chaos.py, docs/guarantees.md): 500 runs, at least 30 worker
# SIGKILLs per backend, 3 server restarts on PostgreSQL and Redis. Not part of `make test`.
CHAOS := $(BIN)/python bench/chaos.py --runs 500 --min-kills 30 --kill-interval 1.5 --workers 4
chaos: $(STAMP) services
	$(CHAOS) --backend sqlite
	$(CHAOS) --backend postgres --restart-db 3
	$(CHAOS) --backend redis --restart-db 3

# The benchmark suite (bench/compare.py, docs/benchmarks.md): docket vs LangGraph and DBOS
# and vs each database's best raw write rate (pgbench ships with Debian's postgresql).
# Needs LangGraph, DBOS and matplotlib (bench/requirements.txt), installed here on demand;
# results go to bench/results/. Not part of `make test`.
.PHONY: bench bench-quick bench-deps
bench-deps: $(STAMP) bench/requirements.txt
	$(BIN)/python -m pip install --quiet -r bench/requirements.txt

bench: bench-deps
	./scripts/ensure-services
	$(BIN)/python bench/compare.py

bench-quick: bench-deps
	./scripts/ensure-services
	$(BIN)/python bench/compare.py --quick

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
