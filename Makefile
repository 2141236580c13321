# `make test` sets up everything it needs (a .venv unless a virtual environment is active).
SHELL := /bin/bash
PYTHON ?= python3
ifdef VIRTUAL_ENV
PY := $(VIRTUAL_ENV)/bin/python
else
PY := $(CURDIR)/.venv/bin/python
endif

.PHONY: install test lint format quickstart quickstart-tiny clean

$(PY):
	$(PYTHON) -m venv .venv

install: $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) scripts/install_torch.py
	$(PY) -m pip install --quiet -e ".[dev]"

lint: install
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

format: install
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

test: lint
	$(PY) -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf .venv build *.egg-info .pytest_cache .ruff_cache
