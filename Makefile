# The two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both install what they need into .venv (and dynalite into .tools) on first use.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DYNALITE_VERSION := 4.0.0
DYNALITE_STAMP := .tools/.dynalite-$(DYNALITE_VERSION)
# The suite runs in this many worker processes, a whole test file to each (module fixtures such
# as a Spark Connect server start once); every worker starts its own servers and Spark.  The
# slowest tests are listed at the end, to keep the suite's time in view.
TEST_WORKERS ?= 2

.PHONY: demo test lint bench bench-commits bench-snapshot bench-spark bench-stray bench-compaction bench-streaming corpus-report torture torture-mixed clean

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

demo: $(VENV)/.demo-deps
	$(PY) examples/demo.py

lint: $(VENV)/.test-deps
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

test: $(VENV)/.test-deps $(DYNALITE_STAMP) lint
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

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache
