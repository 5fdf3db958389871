# The README's two commands are `make run` and `make test`; the rest are helpers.
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
PYTHON ?= python3
export PATH := $(BIN):$(PATH)

.PHONY: install stack-up stack-down status run test lint bench-cdc bench-e2e

$(VENV)/.installed: pyproject.toml
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
