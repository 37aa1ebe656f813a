# Quick start: `make demo` and `make test` on a fresh machine (they create .venv themselves).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck unit faults soak bench clean fleet fleet-install fleet-stop containers containers-prepare

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The package and the extras each target uses: `make demo` the package alone (`decisions run`
# needs no extra), the fleet the console, metrics and images, the tests every extra ([dev]
# includes [all]).
# setuptools prints a ten-line notice at every editable install ("Please be careful with
# folders in your working directory with the same name as your package"): worker/ and shared/
# are those folders, by design, and there is nothing to act on, so the notice is filtered
# (by its text; every other warning of the build still shows).
EDITABLE := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install --quiet -e
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(EDITABLE) .
	touch $@

$(VENV)/.installed-fleet: pyproject.toml | $(BIN)/python
	$(EDITABLE) '.[console,metrics,images]'
	touch $@ $(VENV)/.installed

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(EDITABLE) '.[dev]'
	touch $@ $(VENV)/.installed $(VENV)/.installed-fleet

demo: $(VENV)/.installed
	$(BIN)/decisions run examples/tickets.jsonl --out out

# A local fleet in the background: the faux provider, a worker asking it, the reviewer console.
# Logs and pids go to $(FLEET)/; the DECISIONS_* variables of the shell reach all three.
FLEET ?= .fleet
FAUX_URL := $(patsubst %/,%,$(or $(DECISIONS_FAUX_URL),http://127.0.0.1:8765))
FAUX_PORT ?= $(lastword $(subst :, ,$(FAUX_URL)))

# What a fleet runs on (README "Running a fleet"): the package with the console, metrics and
# images extras, for processes started by hand in terminals of their own.
fleet-install: $(VENV)/.installed-fleet

fleet: $(VENV)/.installed-fleet
	@mkdir -p $(FLEET)
	$(BIN)/decisions faux serve --port $(FAUX_PORT) >$(FLEET)/faux.log 2>&1 & echo $$! >$(FLEET)/faux.pid
	DECISIONS_FAUX_URL=http://127.0.0.1:$(FAUX_PORT) $(BIN)/decisions worker --migrate \
	  >$(FLEET)/worker.log 2>&1 & echo $$! >$(FLEET)/worker.pid
	$(BIN)/decisions console >$(FLEET)/console.log 2>&1 & echo $$! >$(FLEET)/console.pid
	@echo "fleet started: logs and pids in $(FLEET)/; the faux on port $(FAUX_PORT); make fleet-stop ends it"

# SIGTERM to each main process only (a warm shutdown), then wait for it to exit.
fleet-stop:
	@for name in console worker faux; do \
	  pidfile=$(FLEET)/$$name.pid; [ -f $$pidfile ] || continue; pid=$$(cat $$pidfile); \
	  if kill $$pid 2>/dev/null; then \
	    for i in $$(seq 600); do \
	      kill -0 $$pid 2>/dev/null && ! ps -o stat= -p $$pid | grep -q Z || break; sleep 0.1; \
	    done; \
	    echo "stopped $$name ($$pid)"; \
	  fi; \
	  rm -f $$pidfile; \
	done

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

# tests/containers build the image and run docker-compose.yml under podman-compose. Podman,
# podman-compose, runc, mmdebstrap and a local Debian base image are installed or made when
# missing (as root; the base image is cached in /var/cache/decision-worker) by
# deploy/ci/prepare.sh. Its failure does not stop `make test`: the container tests then fail
# under CI=true (skip elsewhere), saying what to run.
export CONTAINERS_CONF ?= $(CURDIR)/deploy/ci/containers.conf

containers-prepare:
	-@bash deploy/ci/prepare.sh

# The suite mostly waits on worker processes, servers and deadlines, so it runs in
# TEST_WORKERS processes (pytest-xdist), a file to a process; each starts its own redis-server
# (tests/support/parallel.py). TEST_WORKERS=0 runs it in one process on TEST_REDIS_PORT.
TEST_WORKERS ?= 3

test: lint typecheck $(CHROMIUM) containers-prepare
	$(BIN)/pytest -q -m "not soak and not live" --durations=40 -n $(TEST_WORKERS) --dist loadfile

# The container tests alone (a few minutes; the first run on a machine builds the images).
containers: $(VENV)/.installed-dev containers-prepare
	$(BIN)/pytest -q -m containers

unit: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m "not integration and not faults and not soak and not live"

faults: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m faults

soak: $(VENV)/.installed-dev
	$(BIN)/pytest -q -m soak -s

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) out $(FLEET) decisions.db decisions.db-wal decisions.db-shm .mypy_cache .ruff_cache .pytest_cache
