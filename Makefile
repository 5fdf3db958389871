# The README's two commands are `make run` and `make test`; the rest are helpers.
VENV   := .venv
BIN    := $(CURDIR)/$(VENV)/bin
# The venv's interpreter: the distribution's python3 where there is one (a fresh Debian
# machine has no other). Debian's is linked statically and built with profile-guided and
# link-time optimization; the python3 first on PATH on our machines is a pyenv build with
# neither (a shared libpython), on which the ledger's Python took ~6-9 % more CPU per
# event (docs/benchmarks.md, "The interpreter"). The Docker image's python:3.11-slim is an
# optimized build too. `make PYTHON=...` chooses another; an existing .venv is kept.
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
export PATH := $(BIN):$(PATH)

.PHONY: install stack-up stack-down status run test lint typecheck-view

# Debian's python3 has no `venv` (ensurepip) until python3-venv is installed: a name that
# exists on Debian 12 and 13 (tests/unit/test_stack_packages.py checks it). uv installs
# the dependencies (8 s into a fresh venv, pip 36 s); pip stays in the venv. uv trusts
# the system's certificates, as pip does (its own list lacks a proxy's CA).
$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
	  echo "installing python3-venv (Debian's python3 lacks venv)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q --no-install-recommends python3-venv; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q uv==0.13.8
	$(BIN)/uv pip install -q --system-certs --python $(BIN)/python -e '.[dev]'
	touch $@

install: $(VENV)/.installed

stack-up: install
	$(BIN)/paystream stack up

stack-down: install
	$(BIN)/paystream stack down

status: install
	$(BIN)/paystream stack status

# The main job: the whole pipeline on the local stack, in the foreground (Ctrl-C stops
# the paystream processes; `make stack-down` stops the stack). Prometheus too (~50 MiB,
# docs/operations.md#prometheus): the alerts and the dashboard need it.
run: install
	$(BIN)/paystream stack up --prometheus
	$(BIN)/paystream run

# mypy and import-linter cannot follow pyproject's package-dir mapping, so they run in
# .typecheck/, a view of symlinks laid out as the installed package (paystream/schema ->
# schema/, ...). Errors name paystream/<folder>/<file>.py.
# The folders come from pyproject's package-dir, the one list of the product's parts.
VIEW_DIRS := $(shell $(PYTHON) -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb"))["tool"]["setuptools"]["package-dir"]; print(*(v for k, v in d.items() if k != "paystream"))')
typecheck-view:
	@rm -rf .typecheck && mkdir -p .typecheck/paystream
	@for d in $(VIEW_DIRS); do ln -s ../../$$d .typecheck/paystream/$$d; done
	@for f in paystream/*.py $$(ls -d paystream/*/ | grep -v __pycache__); do \
	  ln -s ../../$${f%/} .typecheck/paystream/; done

lint: install typecheck-view
	$(BIN)/ruff check .
	cd .typecheck && $(BIN)/mypy --config-file ../pyproject.toml \
	  -p paystream
	cd .typecheck && $(BIN)/lint-imports ../.importlinter
	$(BIN)/pytest -q -p no:cacheprovider --no-header tests/unit/test_function_length.py

# The tests get a stack of their own (state dir and ports below), so their events never
# reach the `make run` stack's ledger, and `make run` after `make test` starts clean.
# The test stack's Prometheus (tests/integration/test_alerts_fire.py, test_dashboard.py)
# scrapes metrics ports of its own, never the `make run` processes', and sends to an
# Alertmanager of its own (test_alerts_notify.py gives it the receivers and timings).
TEST_PROMETHEUS := PAYSTREAM_PROMETHEUS=1 PAYSTREAM_PROMETHEUS_PORT=9096 \
	PAYSTREAM_ALERTMANAGER_PORT=9097 \
	PAYSTREAM_PROMETHEUS_SCRAPE_INTERVAL_S=1 PAYSTREAM_INGEST_ADMIN_PORT=8011 \
	PAYSTREAM_LEDGER_METRICS_PORT=9411 PAYSTREAM_DLQ_MIRROR_METRICS_PORT=9412 \
	PAYSTREAM_HEALTH_METRICS_PORT=9413 PAYSTREAM_FINALITY_METRICS_PORT=9414 \
	PAYSTREAM_NOTIFIER_METRICS_PORT=9415 PAYSTREAM_SCANNER_METRICS_PORT=9416 \
	PAYSTREAM_CHAIN_RECONCILE_METRICS_PORT=9417
TEST_STACK := PAYSTREAM_STATE_DIR=$(CURDIR)/.stack-test PAYSTREAM_PG_PORT=5434 \
	PAYSTREAM_KAFKA_PORT=9094 PAYSTREAM_CONTROLLER_PORT=9095 PAYSTREAM_CONNECT_PORT=8084 \
	PAYSTREAM_ANVIL_PORT=8546 PAYSTREAM_PGBOUNCER=1 PAYSTREAM_PGBOUNCER_PORT=6434 \
	$(TEST_PROMETHEUS)

# The replicated cluster's tests (tests/cluster/, the chaos run on a cluster among them)
# get a stack of their own: three Kafka nodes, another state dir and other ports, so the
# nodes they kill are never the test stack's. It is stopped afterwards, passed or not
# (three brokers' memory is not left behind).
TEST_CLUSTER_STACK := PAYSTREAM_STATE_DIR=$(CURDIR)/.stack-test-cluster \
	PAYSTREAM_KAFKA_BROKERS=3 PAYSTREAM_PG_PORT=5435 PAYSTREAM_KAFKA_PORT=9192 \
	PAYSTREAM_CONTROLLER_PORT=9193 PAYSTREAM_KAFKA_PORT_STEP=10 PAYSTREAM_CONNECT_PORT=8085 \
	PAYSTREAM_ANVIL_PORT=8547 PAYSTREAM_PG_STANDBY_PORT=5436 PAYSTREAM_PG_MONITOR_PORT=5437 \
	PAYSTREAM_FAILOVER_METRICS_PORT=9418
# The same stack given a synchronous standby (`stack up --standby`: pg_auto_failover),
# last: tests/cluster/test_standby_failover.py fails Postgres over on the stack the
# cluster's tests already pay for (no Kafka of its own). Not before the others: the
# chaos run's postgres-restart then makes the monitor fail over, which the chaos run's
# checks do not expect (docs/operations.md#a-standby-and-failover).
STANDBY_TEST := tests/cluster/test_standby_failover.py

.PHONY: test-cluster browser
# The console's browser tests (tests/integration/test_console_browser.py) drive Debian's
# chromium through chromium-driver: installed for the tests only (`make run` needs no
# browser), from apt; no browser is downloaded.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q --no-install-recommends chromium chromium-driver; }

# Unit tests need no services: they run first, on both cores (pytest-xdist, a file's
# tests on one worker, so a module's fixtures are built once), before any stack is up.
# Integration tests run against the test stack; then the cluster's. The test stack is
# stopped after pytest, passed or not (a clone deleted with it running orphaned its
# processes, and its huge pages stayed reserved); KEEP_TEST_STACK=1 leaves it up to
# rerun single tests.
test: install lint browser
	$(BIN)/pytest -n 2 --dist loadfile tests/unit
	$(TEST_STACK) $(BIN)/paystream stack up
	$(TEST_STACK) $(BIN)/pytest tests/integration; status=$$?; \
	  if [ "$(KEEP_TEST_STACK)" != 1 ]; then $(TEST_STACK) $(BIN)/paystream stack down; fi; \
	  exit $$status
	$(MAKE) test-cluster

test-cluster: install
	$(TEST_CLUSTER_STACK) $(BIN)/paystream stack up && \
	  $(TEST_CLUSTER_STACK) $(BIN)/pytest tests/cluster --ignore=$(STANDBY_TEST) && \
	  $(TEST_CLUSTER_STACK) PAYSTREAM_STANDBY=1 $(BIN)/paystream stack up && \
	  $(TEST_CLUSTER_STACK) PAYSTREAM_STANDBY=1 $(BIN)/pytest $(STANDBY_TEST); status=$$?; \
	  $(TEST_CLUSTER_STACK) $(BIN)/paystream stack down; exit $$status

# Benchmarks print their figures next to a baseline measured in the same run (docs/
# benchmarks.md). They use the test kits in tests/support, hence the repository root on
# PYTHONPATH. Each brings the `make run` stack up (not the test stack).
BENCH := PYTHONPATH=$(CURDIR) $(BIN)/python
INGEST_BENCH_ARGS ?= --duration 10 --rate 1000 --rounds 3

.PHONY: bench-ingest bench-ledger bench-cdc bench-e2e bench-finality bench-api bench-notify \
	bench-cluster bench-scanner bench-invoices bench-console bench-restore bench-statements \
	bench-standby bench-growth bench-growth-cost bench-write-growth bench-upgrade bench-fence
bench-ingest: stack-up  ## ingest throughput and latency vs a bare FastAPI endpoint
	$(BENCH) bench/ingest_bench.py $(INGEST_BENCH_ARGS)

API_BENCH_ARGS ?= --duration 10 --rate 1000 --rounds 2
bench-api: stack-up  ## merchant API GET balances vs a bare FastAPI endpoint doing one read
	$(BENCH) bench/api_bench.py $(API_BENCH_ARGS)

bench-ledger: stack-up  ## the ledger group draining preloaded events vs a per-event applier
	$(BENCH) bench/ledger_bench.py

bench-cdc: stack-up  ## outbox commit -> Kafka record latency through Debezium
	$(BENCH) bench/cdc_latency.py

bench-e2e: stack-up  ## webhook 2xx -> applied latency through the whole pipeline
	$(BENCH) bench/e2e_latency.py

bench-fence: stack-up  ## the ingest's group write with the outbox's failover fence vs without
	$(BENCH) bench/outbox_fence_cost.py

# The cluster is the cluster tests' stack (brought up here, stopped after).
bench-cluster: stack-up  ## one broker vs three: CDC and e2e latency, idle CPU and memory
	$(TEST_CLUSTER_STACK) $(BIN)/paystream stack up && \
	  $(BENCH) bench/cluster_cost.py --cluster $(TEST_CLUSTER_STACK); status=$$?; \
	  $(TEST_CLUSTER_STACK) $(BIN)/paystream stack down; exit $$status

# Two stacks of their own, made afresh (state dirs deleted first) and measured in turns:
# the baseline without a standby, the other with its synchronous standby.
BENCH_STANDBY_DIR := $(CURDIR)/.stack-bench-standby
BENCH_STANDBY_STACK := PAYSTREAM_STATE_DIR=$(BENCH_STANDBY_DIR) PAYSTREAM_STANDBY=1 \
	PAYSTREAM_PG_PORT=5444 PAYSTREAM_PG_STANDBY_PORT=5445 PAYSTREAM_PG_MONITOR_PORT=5446 \
	PAYSTREAM_KAFKA_PORT=9292 PAYSTREAM_CONTROLLER_PORT=9293 PAYSTREAM_CONNECT_PORT=8087 \
	PAYSTREAM_ANVIL_PORT=8549 PAYSTREAM_FAILOVER_METRICS_PORT=9419
BENCH_STANDBY_BASE_DIR := $(CURDIR)/.stack-bench-standby-base
BENCH_STANDBY_BASE := PAYSTREAM_STATE_DIR=$(BENCH_STANDBY_BASE_DIR) PAYSTREAM_STANDBY=0 PAYSTREAM_PG_PORT=5448 \
	PAYSTREAM_KAFKA_PORT=9492 PAYSTREAM_CONTROLLER_PORT=9493 PAYSTREAM_CONNECT_PORT=8090 \
	PAYSTREAM_ANVIL_PORT=8552
bench-standby: install  ## ledger CPU/event and e2e p50/p99 at 500/s: no standby, sync, async
	$(BENCH_STANDBY_STACK) $(BIN)/paystream stack down && rm -rf $(BENCH_STANDBY_DIR)
	$(BENCH_STANDBY_BASE) $(BIN)/paystream stack down && rm -rf $(BENCH_STANDBY_BASE_DIR)
	$(BENCH_STANDBY_BASE) $(BIN)/paystream stack up && \
	  $(BENCH_STANDBY_STACK) $(BIN)/paystream stack up && \
	  $(BENCH_STANDBY_STACK) $(BENCH) bench/standby_cost.py --baseline $(BENCH_STANDBY_BASE); \
	  status=$$?; $(BENCH_STANDBY_STACK) $(BIN)/paystream stack down; \
	  $(BENCH_STANDBY_BASE) $(BIN)/paystream stack down; exit $$status

bench-notify: stack-up  ## webhook deliveries/s vs a one-at-a-time sender; p99 at 200 intents/s
	$(BENCH) bench/notify_bench.py

bench-invoices: stack-up  ## 200 invoices/s: creation p99, settled p50 vs a plain deposit's
	$(BENCH) bench/invoice_bench.py

bench-finality: stack-up  ## RPC calls per tick (planner vs per deposit), finalized -> credited
	$(BENCH) bench/finality_rpc_bench.py
	$(BENCH) bench/finality_e2e_bench.py

bench-scanner: stack-up  ## chain scanner catch-up of 10,000 blocks: blocks/s, RPC calls vs per address
	$(BENCH) bench/scanner_bench.py

bench-console: stack-up  ## console pages on 1 M events: p50/p99 vs the same queries bare
	$(BENCH) bench/console_bench.py

bench-restore: stack-up  ## a full backup of 1 GiB more restored to a scratch cluster: GB/min
	$(BENCH) bench/restore_throughput.py

# STATEMENTS_BENCH_ARGS="--postings 1000000" on a small machine (the 10 M fill is minutes).
STATEMENTS_BENCH_ARGS ?=
bench-statements: stack-up  ## 1 M-line statement import + match; 10 M postings to Parquet vs COPY
	$(BENCH) bench/statements_bench.py $(STATEMENTS_BENCH_ARGS)

# GROWTH_BENCH_ARGS="--sizes 1000000 10000000" where 30 M does not fit: the fill writes
# each size twice (partitioned and not), ~30,000 rows/s on a busy 2-core machine.
GROWTH_BENCH_ARGS ?=
# An upgrade under traffic (bench/upgrade_bench.py): the previous release brings a
# fresh stack of its own up, then this release's migrations and processes replace it.
BENCH_UPGRADE_DIR := $(CURDIR)/.stack-bench-upgrade
BENCH_UPGRADE_STACK := PAYSTREAM_STATE_DIR=$(BENCH_UPGRADE_DIR) PAYSTREAM_PG_PORT=5447 \
	PAYSTREAM_KAFKA_PORT=9392 PAYSTREAM_CONTROLLER_PORT=9393 PAYSTREAM_CONNECT_PORT=8089 \
	PAYSTREAM_ANVIL_PORT=8551
UPGRADE_BENCH_ARGS ?= --events 1000000 --rate 200
bench-upgrade: install  ## migrations and a rolling restart under 200/s: 5xx, lock waits, lost, double
	$(BENCH_UPGRADE_STACK) $(BIN)/paystream stack down && rm -rf $(BENCH_UPGRADE_DIR)
	$(BENCH_UPGRADE_STACK) $(BENCH) bench/upgrade_bench.py $(UPGRADE_BENCH_ARGS); \
	  status=$$?; $(BENCH_UPGRADE_STACK) $(BIN)/paystream stack down; exit $$status

bench-growth: stack-up  ## one day of notification attempts (or claims: GROWTH_BENCH_ARGS) forgotten at 1 M, 10 M, 30 M: by partition vs by rows
	$(BENCH) bench/growth_bench.py $(GROWTH_BENCH_ARGS)

# A fresh stack of its own, thrown away after: the history fills its database, and the
# bench deletes the WAL it archives as it goes (the fill's would fill the disk).
BENCH_GROWTH_DIR := $(CURDIR)/.stack-bench-growth
BENCH_GROWTH_STACK := PAYSTREAM_STATE_DIR=$(BENCH_GROWTH_DIR) PAYSTREAM_PG_PORT=5449 \
	PAYSTREAM_KAFKA_PORT=9592 PAYSTREAM_CONTROLLER_PORT=9593 PAYSTREAM_CONNECT_PORT=8091 \
	PAYSTREAM_ANVIL_PORT=8553
GROWTH_COST_ARGS ?=
bench-growth-cost: install  ## ingest and ledger CPU per event, ingest p99 at 1,000/s: 1 M vs 10 M stored events
	$(BENCH_GROWTH_STACK) $(BIN)/paystream stack down && rm -rf $(BENCH_GROWTH_DIR)
	$(BENCH_GROWTH_STACK) $(BIN)/paystream stack up && \
	  $(BENCH_GROWTH_STACK) $(BENCH) bench/growth_cost.py --prune-archive $(GROWTH_COST_ARGS); \
	  status=$$?; \
	  $(BENCH_GROWTH_STACK) $(BIN)/paystream stack down; exit $$status

WRITE_GROWTH_ARGS ?=
bench-write-growth: install  ## the ingest's write on the history bench-growth-cost left vs a 1 M copy of it
	$(BENCH_GROWTH_STACK) $(BIN)/paystream stack up && \
	  $(BENCH_GROWTH_STACK) $(BENCH) bench/write_growth.py $(WRITE_GROWTH_ARGS); \
	  status=$$?; \
	  $(BENCH_GROWTH_STACK) $(BIN)/paystream stack down; exit $$status

# Plots (docs/benchmarks/*.png) from the results files the benchmarks write with
# --results; `bench-results` runs them (about 12 minutes on 2 cores), `bench-report`
# only draws from the latest files, so it takes seconds.
RESULTS := docs/benchmarks/data
.PHONY: bench-results bench-scale bench-report
bench-scale: stack-up  ## the ledger group with 1, 2, 3 and 6 processes, CPU per component
	$(BENCH) bench/ledger_scale.py --results $(RESULTS)/ledger-scale.json

bench-results: stack-up bench-scale
	$(BENCH) bench/ingest_bench.py $(INGEST_BENCH_ARGS) --results $(RESULTS)/ingest.json
	$(BENCH) bench/e2e_latency.py --results $(RESULTS)/e2e.json

bench-report: install
	$(BENCH) bench/report.py

# One consumer group in the foreground (metrics on :9401 / :9402).
.PHONY: consume-ledger consume-dlq-mirror
consume-ledger: install
	$(BIN)/paystream consume ledger

consume-dlq-mirror: install
	$(BIN)/paystream consume dlq-mirror

# Operator checks against the `make run` stack (docs/operations.md).
.PHONY: reconcile health housekeeping alerts-check
reconcile: install
	$(BIN)/paystream reconcile

health: install
	$(BIN)/paystream health

housekeeping: install
	$(BIN)/paystream housekeeping

# promtool comes from Debian's `prometheus` package (the stack manager installs it).
# The Alertmanager configuration is checked by amtool in tests/unit/test_stack_alertmanager.py.
alerts-check:
	promtool check rules ops/prometheus/alerts.yml
	cd ops/prometheus && promtool test rules alerts_test.yml
