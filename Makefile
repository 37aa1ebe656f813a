# Quick start: `make demo` and `make test` on a fresh machine (they create .venv themselves).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck unit faults soak bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/decisions run examples/tickets.jsonl --out out

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check shared worker tests bench examples

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

# tests/console drive Debian's chromium through Playwright (Playwright's own browser download
# cannot work here): installed when missing, as root; elsewhere the browser tests say why.
CHROMIUM ?= /usr/bin/chromium

$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
	  echo "$(CHROMIUM) is missing: install Debian's chromium (as root) for tests/console" >&2; \
	fi

test: lint typecheck $(CHROMIUM)
	$(BIN)/pytest -q -m "not soak and not live"

unit: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m "not integration and not faults and not soak and not live"

faults: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m faults

soak: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m soak -s

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) out decisions.db decisions.db-wal decisions.db-shm .mypy_cache .ruff_cache .pytest_cache
