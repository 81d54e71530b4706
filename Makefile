# Two commands on a fresh machine: `make serve` and `make test`. Both install what they need
# into .venv first (torch pinned to the CPU build that lies on this machine's disk).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PIP_FLAGS ?= -q

.PHONY: install serve test lint bench

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	$(PY) -m pip install $(PIP_FLAGS) torch==2.13.0
	$(PY) -m pip install $(PIP_FLAGS) -e '.[server,dev]'
	touch $(STAMP)

install: $(STAMP)

serve: install
	$(VENV)/bin/asktell serve

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest

bench: install
	$(PY) -m bench.service_throughput
