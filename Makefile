# The README's two commands: `make demo` and `make test`. Each creates .venv when missing and
# installs what it needs, so a fresh clone needs only Python 3.11+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.postbox-installed

.PHONY: demo test test-slow test-peers test-peers-message-types test-peers-clients test-soak test-database test-transports test-postbox-transport \
        test-rocketmq-transport lint docs bench clean

$(STAMP): pyproject.toml setup.py
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Postbox needs Python 3.11 or newer")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip "setuptools>=77" wheel
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,server,docs]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/postbox demo

# ruff (style and bug patterns), import-linter (layering, .importlinter), mypy (types; the
# public surfaces strictly, see [tool.mypy] in pyproject.toml). The last two read the package
# as installed, postbox/storage_engine/… (scripts/namespace_tree.py lays it out).
NAMESPACE_TREE := build/namespace
lint: $(STAMP)
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
docs: $(STAMP)
	$(BIN)/python scripts/namespace_tree.py $(DOCS_TREE)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

test: lint
	$(BIN)/python -m pytest -q

# The long runs `make test` leaves out (marker `slow`): the 100-kill crash loop and the
# 400-example power-loss property test (a few minutes each); CI runs them.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The official RocketMQ peers (Java, Go and Python clients, mqadmin) against the lab's Apache
# RocketMQ and a `postbox broker` process (marker `peers`, 20-30 minutes with the lab's start);
# `make test` leaves it out. CI runs its two halves as two lanes side by side (each starts its own lab): RocketMQ 5's
# message types (transactions, timers, FIFO) and the rest.
PEERS_MESSAGE_TYPES := tests/lab/test_side_by_side_transactions_timers.py \
                       tests/lab/test_python_client_peers.py \
                       tests/lab/test_remoting_message_types_peers.py
test-peers: test-peers-message-types test-peers-clients

test-peers-message-types: $(STAMP)
	$(BIN)/python -m pytest -q -m peers $(PEERS_MESSAGE_TYPES)

test-peers-clients: $(STAMP)
	$(BIN)/python -m pytest -q -m peers $(foreach f,$(PEERS_MESSAGE_TYPES),--ignore=$(f))

# The chaos soak of the whole topology (marker `soak`, bench/soak: its `ci` profile, 3 minutes
# of faults on producer, relay and consumer processes, a broker process, PostgreSQL and Redis of
# its own, then the end checks and `postbox reconcile`; about 6 minutes). CI runs it beside the
# other passes; it needs root (a tmpfs for the broker's store) and PostgreSQL's binaries.
test-soak: $(STAMP)
	$(BIN)/python -m pytest -q -m soak -o log_cli=true --log-cli-level=WARNING tests/soak

# The database-backed suites again on the database named by POSTBOX_TEST_DATABASE_URL (and the
# Redis of POSTBOX_REDIS_URL when set); CI runs it for PostgreSQL and MariaDB.
DATABASE_SUITES := tests/outbox tests/idempotency tests/migrations tests/examples \
                   tests/spark_reconcile/test_framework_scenario.py
test-database: $(STAMP)
	@test -n "$$POSTBOX_TEST_DATABASE_URL" || { echo "set POSTBOX_TEST_DATABASE_URL"; exit 2; }
	$(BIN)/python -m pytest -q $(DATABASE_SUITES)

# The framework's suites again over rocketmq://: against one `postbox broker start` process, and
# against the compatibility lab's live Apache RocketMQ (tests/support/transports.py says which
# tests each run keeps; `make test` is the embedded run).
TRANSPORT_SUITES := tests/framework tests/outbox tests/idempotency tests/examples
test-postbox-transport: $(STAMP)
	$(BIN)/python -m pytest -q --transport postbox $(TRANSPORT_SUITES)

test-rocketmq-transport: $(STAMP)
	$(BIN)/python -m pytest -q --transport rocketmq $(TRANSPORT_SUITES)

test-transports: test-postbox-transport test-rocketmq-transport

bench: $(STAMP)
	$(BIN)/python -m bench.store_bench

clean:
	rm -rf $(VENV) .postbox .pytest_cache .mypy_cache
