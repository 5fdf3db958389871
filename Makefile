# The README's two commands are `make run` and `make test`; the rest are helpers.
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
PYTHON ?= python3
export PATH := $(BIN):$(PATH)

.PHONY: install stack-up stack-down status run test lint bench-cdc bench-e2e

# Debian's python3 has no `venv` (ensurepip) until python3-venv is installed: a name that
# exists on Debian 12 and 13 (tests/unit/test_stack_packages.py checks it).
$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "installing python3-venv (Debian's python3 lacks venv)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q --no-install-recommends python3-venv; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

stack-up: install
	$(BIN)/paystream stack up

stack-down: install
	$(BIN)/paystream stack down

status: install
	$(BIN)/paystream stack status

# The main job: the whole pipeline on the local stack, in the foreground (Ctrl-C stops
# the paystream processes; `make stack-down` stops the stack).
run: stack-up
	$(BIN)/paystream run

lint: install
	$(BIN)/ruff check .

# The tests get a stack of their own (state dir and ports below), so their events never
# reach the `make run` stack's ledger, and `make run` after `make test` starts clean.
TEST_STACK := PAYSTREAM_STATE_DIR=$(CURDIR)/.stack-test PAYSTREAM_PG_PORT=5434 \
	PAYSTREAM_KAFKA_PORT=9094 PAYSTREAM_CONTROLLER_PORT=9095 PAYSTREAM_CONNECT_PORT=8084 \
	PAYSTREAM_ANVIL_PORT=8546

# Unit tests need no services; integration tests run against the test stack.
test: install lint
	$(TEST_STACK) $(BIN)/paystream stack up
	$(TEST_STACK) $(BIN)/pytest

bench-cdc: stack-up
	$(BIN)/python bench/cdc_latency.py

-include ingest/Makefile.inc consumers/Makefile.inc ops/Makefile.inc

bench-e2e: stack-up
	$(BIN)/python bench/e2e_latency.py
