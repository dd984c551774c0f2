# The two commands: `make demo` (the main job) and `make test` (the whole suite).
# Both install what they need into .venv (and dynalite into .tools) on first use.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DYNALITE := .tools/node_modules/.bin/dynalite

.PHONY: demo test lint unit bench torture clean

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

$(DYNALITE):
	npm install --prefix .tools --no-audit --no-fund --loglevel=error dynalite@4.0.0

demo: $(VENV)/.demo-deps
	$(PY) examples/demo.py

lint: $(VENV)/.test-deps
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

test: $(VENV)/.test-deps $(DYNALITE) lint
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache
