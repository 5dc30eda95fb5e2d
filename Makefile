# The README's two commands: `make demo` and `make test`. Each creates .venv when missing and
# installs what it needs, so a fresh clone needs only Python 3.11+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.postbox-installed

.PHONY: demo test test-slow test-peers test-peers-message-types test-peers-stores \
        test-peers-clients test-soak \
        test-database test-transports test-postbox-transport test-rocketmq-transport \
        test-python-engine lint docs bench screenshots clean

$(STAMP): pyproject.toml setup.py
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Postbox needs Python 3.11 or newer")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools>=77" wheel
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,server,docs]'
	@touch $(STAMP)

# The optional native engine (native/: Rust with PyO3, the postbox-native distribution, built by
# maturin) is built and installed into the venv when cargo is on PATH; without cargo nothing is
# built and every command runs the pure-Python engine (POSTBOX_NATIVE=auto picks whichever is
# installed). Targets that run Postbox depend on $(INSTALLED).
NATIVE_STAMP := $(VENV)/.postbox-native-installed
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
ifneq ($(shell command -v cargo 2>/dev/null),)
INSTALLED := $(STAMP) $(NATIVE_STAMP)
else
INSTALLED := $(STAMP)
endif

$(NATIVE_STAMP): $(STAMP) $(NATIVE_SOURCES)
	$(BIN)/python -m pip install --quiet "maturin>=1.5,<2"
	cd native && VIRTUAL_ENV=$(CURDIR)/$(VENV) $(CURDIR)/$(BIN)/maturin develop --release --quiet
	@touch $(NATIVE_STAMP)

demo: $(INSTALLED)
	$(BIN)/postbox demo

# ruff (style and bug patterns), import-linter (layering, .importlinter), mypy (types; the
# public surfaces strictly, see [tool.mypy] in pyproject.toml). The last two read the package
# as installed, postbox/storage_engine/… (scripts/namespace_tree.py lays it out).
NAMESPACE_TREE := build/namespace
lint: $(INSTALLED)
	$(BIN)/ruff check .
	$(BIN)/python scripts/namespace_tree.py $(NAMESPACE_TREE)
	cd $(NAMESPACE_TREE) && PYTHONPATH=$(CURDIR) $(CURDIR)/$(BIN)/lint-imports \
	    --config $(CURDIR)/.importlinter
	cd $(NAMESPACE_TREE) && $(CURDIR)/$(BIN)/mypy --config-file $(CURDIR)/pyproject.toml \
	    --cache-dir $(CURDIR)/.mypy_cache

# The documentation site (mkdocs.yml): docs/ and the API reference generated from the
# docstrings of the namespace tree, into build/site. Strict: a warning (a broken link, a page
# missing from the nav, a name the reference cannot resolve) fails the build. Not --quiet: it
# drops the very warnings --strict counts. Its own tree (mkdocs.yml reads it), so it may run
# beside `make lint`.
DOCS_TREE := build/docs-namespace
docs: $(INSTALLED)
	$(BIN)/python scripts/namespace_tree.py $(DOCS_TREE)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: lint
	$(BIN)/python -m pytest -q

# The long runs `make test` leaves out (marker `slow`): the 100-kill crash loop and the
# 400-example power-loss property test (a few minutes each); CI runs them.
test-slow: $(INSTALLED)
	$(BIN)/python -m pytest -q -m slow

# The official RocketMQ peers (Java, Go and Python clients, mqadmin) against the lab's Apache
# RocketMQ and a `postbox broker` process (marker `peers`, 20-30 minutes with the lab's start);
# `make test` leaves it out. CI runs it as three lanes side by side (each starts its own
# lab): RocketMQ 5's message types (transactions, timers, FIFO), stores with pending timers and
# transaction halves moved between Apache and Postbox, and the other clients.
PEERS_MESSAGE_TYPES := tests/lab/test_side_by_side_transactions_timers.py \
                       tests/lab/test_python_client_peers.py \
                       tests/lab/test_remoting_message_types_peers.py
PEERS_STORES := tests/lab/test_timer_stores_across.py tests/lab/test_transaction_stores_across.py
test-peers: test-peers-message-types test-peers-stores test-peers-clients

test-peers-message-types: $(INSTALLED)
	$(BIN)/python -m pytest -q -m peers $(PEERS_MESSAGE_TYPES)

test-peers-stores: $(INSTALLED)
	$(BIN)/python -m pytest -q -m peers $(PEERS_STORES)

test-peers-clients: $(INSTALLED)
	$(BIN)/python -m pytest -q -m peers \
	    $(foreach f,$(PEERS_MESSAGE_TYPES) $(PEERS_STORES),--ignore=$(f))

# The chaos soak of the whole topology (marker `soak`, bench/soak: its `ci` profile, 3 minutes
# of faults on producer, relay and consumer processes, a broker process, PostgreSQL and Redis of
# its own, then the end checks and `postbox reconcile`; about 6 minutes). CI runs it beside the
# other passes; it needs root (a tmpfs for the broker's store) and PostgreSQL's binaries.
test-soak: $(INSTALLED)
	$(BIN)/python -m pytest -q -m soak -o log_cli=true --log-cli-level=WARNING tests/soak

# The database-backed suites again on the database named by POSTBOX_TEST_DATABASE_URL (and the
# Redis of POSTBOX_REDIS_URL when set); CI runs it for PostgreSQL and MariaDB.
DATABASE_SUITES := tests/outbox tests/idempotency tests/migrations tests/examples \
                   tests/spark_reconcile/test_framework_scenario.py
test-database: $(INSTALLED)
	@test -n "$$POSTBOX_TEST_DATABASE_URL" || { echo "set POSTBOX_TEST_DATABASE_URL"; exit 2; }
	$(BIN)/python -m pytest -q $(DATABASE_SUITES)

# The framework's suites again over rocketmq://: against one `postbox broker start` process, and
# against the compatibility lab's live Apache RocketMQ (tests/support/transports.py says which
# tests each run keeps; `make test` is the embedded run).
TRANSPORT_SUITES := tests/framework tests/outbox tests/idempotency tests/examples
test-postbox-transport: $(INSTALLED)
	$(BIN)/python -m pytest -q --transport postbox $(TRANSPORT_SUITES)

test-rocketmq-transport: $(INSTALLED)
	$(BIN)/python -m pytest -q --transport rocketmq $(TRANSPORT_SUITES)

test-transports: test-postbox-transport test-rocketmq-transport

# The store's, the remoting protocol's and the remote client's suites on the pure-Python engine,
# for a machine where `make` installed the native one (which every other target then runs:
# POSTBOX_NATIVE=auto).
test-python-engine: $(INSTALLED)
	POSTBOX_NATIVE=0 $(BIN)/python -m pytest -q tests/storage_engine tests/network/protocol \
	    tests/network/client

bench: $(INSTALLED)
	$(BIN)/python -m bench.store_bench

# The console's screenshots in docs/console/: the browser tests take them (into
# build/console-screenshots, so a test run leaves the tracked images alone), then they are copied.
screenshots: $(INSTALLED)
	rm -rf build/console-screenshots
	$(BIN)/python -m pytest -q tests/console
	cp build/console-screenshots/*.png docs/console/

clean:
	rm -rf $(VENV) .postbox .pytest_cache .mypy_cache
