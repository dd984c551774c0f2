# The two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both install what they need into .venv (and dynalite into .tools) on first use.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DYNALITE_VERSION := 4.0.0
DYNALITE_STAMP := .tools/.dynalite-$(DYNALITE_VERSION)
# The newest deltalake, a peer the suite runs in its own venv (the test extras pin 1.6.0, the
# last release with the DynamoDB log store).
DELTALAKE_LATEST := 1.6.6
DELTALAKE_LATEST_STAMP := .tools/.deltalake-$(DELTALAKE_LATEST)
# LocalStack's own S3 provider, a second S3 implementation for the suite; it needs Python 3.13.
# Where none is found the install step says so and the LocalStack tests are skipped (with that
# reason in the run's summary).
LOCALSTACK_VERSION := 2026.3.0
LOCALSTACK_STAMP := .tools/.localstack-$(LOCALSTACK_VERSION)
LOCALSTACK_VENV := .tools/localstack-venv
LOCALSTACK_PYTHON ?= $(shell for p in python3.13 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.13*/bin/python3.13 2>/dev/null); do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 13)' >/dev/null 2>&1 && { command -v $$p; break; }; done)
# The suite runs in this many worker processes, a whole test file to each (module fixtures such
# as a Spark Connect server start once); every worker starts its own servers and Spark.  The
# slowest tests are listed at the end, to keep the suite's time in view.
TEST_WORKERS ?= 2

.PHONY: demo test lint bench bench-fleet bench-fleet-kill bench-fleet-dynamodb bench-fleet-scaling torture-fleet bench-commits bench-snapshot bench-spark bench-stray bench-compaction bench-streaming corpus-report torture torture-mixed clean

$(VENV)/.base:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	touch $@

$(VENV)/.demo-deps: pyproject.toml | $(VENV)/.base
	$(PIP) install --quiet -e '.[s3,spark]'
	touch $@

$(VENV)/.test-deps: pyproject.toml | $(VENV)/.base
	$(PIP) install --quiet -e '.[s3,spark,test,bench]'
	touch $@

$(DYNALITE_STAMP):
	mkdir -p .tools
	npm install --prefix .tools --no-audit --no-fund --loglevel=error dynalite@$(DYNALITE_VERSION)
	test -f .tools/node_modules/dynalite/package.json
	touch $@

$(DELTALAKE_LATEST_STAMP):
	mkdir -p .tools
	rm -rf .tools/deltalake-$(DELTALAKE_LATEST)-venv
	$(PYTHON) -m venv .tools/deltalake-$(DELTALAKE_LATEST)-venv
	.tools/deltalake-$(DELTALAKE_LATEST)-venv/bin/pip install --quiet deltalake==$(DELTALAKE_LATEST) pyarrow
	touch $@

# What LocalStack needed beside its own requirements: cbor2<6, pyopenssl<25 and cryptography<45
# (newer releases break its imports) and service_identity.
$(LOCALSTACK_STAMP):
	@if [ -z "$(LOCALSTACK_PYTHON)" ]; then \
		echo "Python 3.13 not found: LocalStack $(LOCALSTACK_VERSION) is not installed and the tests against its S3 are skipped"; \
	else \
		set -e; mkdir -p .tools; rm -rf $(LOCALSTACK_VENV); \
		$(LOCALSTACK_PYTHON) -m venv $(LOCALSTACK_VENV); \
		$(LOCALSTACK_VENV)/bin/pip install --quiet 'localstack-core[base-runtime]==$(LOCALSTACK_VERSION)' \
			'cbor2<6' 'pyopenssl<25' 'cryptography<45' service_identity; \
		touch $@; \
	fi

demo: $(VENV)/.demo-deps
	$(PY) examples/demo.py

lint: $(VENV)/.test-deps
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

test: $(VENV)/.test-deps $(DYNALITE_STAMP) $(DELTALAKE_LATEST_STAMP) $(LOCALSTACK_STAMP) lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

# Benchmarks print JSON lines and write bench/results/ (see bench/README.md); not part of `make test`.
bench-commits: $(VENV)/.test-deps
	$(PY) bench/commits.py

bench-snapshot: $(VENV)/.test-deps
	$(PY) bench/snapshot_load.py

bench-spark: $(VENV)/.test-deps
	$(PY) bench/spark_write.py

bench-stray: $(VENV)/.test-deps
	$(PY) bench/stray_versions.py

bench-streaming: $(VENV)/.test-deps
	$(PY) bench/streaming.py

corpus-report: $(VENV)/.test-deps
	$(PY) -m tests.compat.corpus

bench-compaction: $(VENV)/.test-deps
	$(PY) bench/compaction.py

# Fleet-wide group commit (bench/fleet.py): 8 writer processes standing for 8 hosts x 15 appends
# to one S3 table, 15 ms per request; fleet against racing deltacommit and deltalake 1.6.0.
FLEET_ARGS ?= --hosts 8 --appends 15 --latency-ms 15
bench-fleet: $(VENV)/.test-deps
	$(PY) bench/fleet.py $(FLEET_ARGS)

# The same with 2 writers killed with SIGKILL mid-run and restarted with the same app ids.
bench-fleet-kill: $(VENV)/.test-deps
	$(PY) bench/fleet.py $(FLEET_ARGS) --kill 2 --out bench/results/kill

# The same on Spark's S3DynamoDBLogStore protocol (deltalake's DynamoDB log store against ours).
bench-fleet-dynamodb: $(VENV)/.test-deps
	$(PY) bench/fleet.py $(FLEET_ARGS) --mechanism dynamodb --out bench/results/dynamodb

# 2, 4, 8, 16 hosts at 0, 15 and 50 ms per request, then the table.
bench-fleet-scaling: $(VENV)/.test-deps
	$(PY) bench/fleet.py --scaling --calls uri --appends 15

bench: bench-commits bench-snapshot bench-spark bench-stray

# Long torture runs (minutes per mode): writers killed with SIGKILL at random, then the history
# checker; `make torture TORTURE_SECONDS=60` for a shorter one.
TORTURE_SECONDS ?= 300
torture: $(VENV)/.test-deps $(DYNALITE_STAMP)
	$(PY) bench/torture.py --seconds $(TORTURE_SECONDS) --writers 8 --kill-rate 0.5

# Mixed fleets: deltalake 1.6.0 and emulated Spark writers beside deltacommit's, all killed at
# random, against a baseline of the peers alone (errors they raise among themselves).
torture-mixed: $(VENV)/.test-deps
	$(PY) bench/torture.py --seconds $(TORTURE_SECONDS) --writers 3 --kill-rate 0.5 \
		--modes s3-dynamodb-peers-only,s3-dynamodb-mixed

# Fleet-wide group commit under kill -9, both mechanisms, deltalake (and on DynamoDB the Spark
# emulator) as peers, each beside a racing fleet of hosts with the same peers as the baseline of
# the errors they raise; `make torture-fleet TORTURE_FLEET_SECONDS=60` for a shorter one.
TORTURE_FLEET_SECONDS ?= 600
torture-fleet: $(VENV)/.test-deps
	$(PY) bench/torture.py --seconds $(TORTURE_FLEET_SECONDS) --writers 6 --kill-rate 0.5 \
		--modes s3-conditional-fleet,s3-conditional-hosts,s3-dynamodb-fleet,s3-dynamodb-hosts

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache
