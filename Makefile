# Two commands on a fresh machine: `make serve` and `make test`. Both install what they need
# into .venv first (torch pinned to the CPU build that lies on this machine's disk).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PIP_FLAGS ?= -q
# The dashboard's browser tests drive Debian's chromium package (Playwright, from the [dev]
# extra, never downloads its own browsers here).
CHROMIUM ?= /usr/bin/chromium
# openapi-python-client pins an httpx older than ours, so it gets a venv of its own; the client it
# generates runs in .venv (tests/integration/test_generated_client.py, which looks for it here).
CODEGEN_VENV := .venv-codegen
CODEGEN_VERSION := 0.29.1
CODEGEN_STAMP := $(CODEGEN_VENV)/.installed-$(CODEGEN_VERSION)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install serve test lint bench

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	$(PY) -m pip install $(PIP_FLAGS) torch==2.13.0
	$(PY) -m pip install $(PIP_FLAGS) -e '.[server,dev,ray]'
	touch $(STAMP)

$(CODEGEN_STAMP):
	test -x $(CODEGEN_VENV)/bin/python || python3 -m venv $(CODEGEN_VENV)
	$(CODEGEN_VENV)/bin/python -m pip install $(PIP_FLAGS) openapi-python-client==$(CODEGEN_VERSION)
	touch $(CODEGEN_STAMP)

$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "error: $(CHROMIUM) is missing and there is no apt-get: install Chromium so that $(CHROMIUM) exists" >&2; exit 1; }
	$(SUDO) apt-get install -y chromium || { $(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; } || { echo "error: apt-get could not install chromium, which the dashboard tests need at $(CHROMIUM)" >&2; exit 1; }
	@test -x $(CHROMIUM) || { echo "error: chromium is installed but $(CHROMIUM) is not there" >&2; exit 1; }

install: $(STAMP) $(CODEGEN_STAMP) $(CHROMIUM)

# The server needs no browser nor generator: only the tests install them.
serve: $(STAMP)
	$(VENV)/bin/asktell serve

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Two test processes (most integration tests wait on servers and browsers); the tests that start
# job workers or Ray tasks or look for them in /proc run one after another in one of them (one
# xdist group: tests/conftest.py). Then, alone, the freeze test, which times the server (marker
# serial).
test: lint $(CODEGEN_STAMP) $(CHROMIUM)
	$(PY) -m pytest -n 2 --dist loadgroup -m "not serial"
	$(PY) -m pytest -m serial

bench: $(STAMP)
	$(PY) -m bench.service_throughput
