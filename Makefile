# `make test` sets up everything it needs (a .venv unless a virtual environment is active).
SHELL := /bin/bash
PYTHON ?= python3
ifdef VIRTUAL_ENV
PY := $(VIRTUAL_ENV)/bin/python
else
PY := $(CURDIR)/.venv/bin/python
endif

.PHONY: install test test-slow test-browser lint format data quickstart quickstart-tiny clean
# Empty: `make quickstart` takes the recipe for the machine (scripts/run_experiment.py).
CONFIG ?=
# DATA_FROM=DIR copies Multi30k from a local mirror instead of downloading it.
DATA_FROM ?=

# The install is done again only when pyproject.toml (or the torch installer) is newer than
# the stamp it leaves in the environment (17-30 s saved per target); `make clean` or deleting
# the stamp forces it.
STAMP := $(patsubst %/bin/python,%,$(PY))/.tmt-installed

$(PY):
	$(PYTHON) -m venv .venv

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install_torch.py | $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) scripts/install_torch.py
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

lint: install
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .

format: install
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# pytest-xdist spreads the tests over up to 4 processes, one per core, each with one torch
# thread (tests/conftest.py); its own kernel-choice folder keeps each one's numbers fixed.
# A 2-core Xeon: 398 s in one process, 255 s in two; a 2-core AVX2-only AMD EPYC, where importing
# torch alone takes 2.5 s: 392 s in two (docs/results.md). PYTEST_ARGS="-n 0" runs them in one.
test: lint
	$(PY) -m pytest -q -n auto --maxprocesses 4 $(PYTEST_ARGS)

# The tests marked slow (minutes; `make test` skips them), some on the full corpora in ../shared.
test-slow: install
	$(PY) -m pytest -q --runslow -m slow $(PYTEST_ARGS)

# The web page in headless Chromium (tests/serve/test_browser.py). Debian's chromium and
# chromium-driver are installed when missing and apt-get can (as root); else the test skips.
test-browser: install
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq chromium chromium-driver >/dev/null) \
	      || echo "note: apt-get could not install chromium; the browser test skips"; \
	  else \
	    echo "note: no chromium and no apt-get as root to install it; the browser test skips"; \
	  fi; \
	fi
	$(PY) -m pytest -q tests/serve/test_browser.py $(PYTEST_ARGS)

# Idempotent: complete files are kept.
data: install
	$(PY) -m transformer_mt data multi30k $(if $(DATA_FROM),--from $(DATA_FROM))

# The main job end to end: train CONFIG (by default the GPU recipe where torch sees CUDA, 3
# minutes, else the CPU one, 60), average the checkpoints it keeps (train.keep_last, as the
# README's results were), translate test2016, print BLEU.
quickstart: data
	$(PY) scripts/run_experiment.py $(if $(CONFIG),--config $(CONFIG))

# The same in about five minutes with a small model.
quickstart-tiny: data
	$(PY) scripts/run_experiment.py --config configs/multi30k_tiny.yaml

clean:
	rm -rf .venv build *.egg-info .pytest_cache .ruff_cache
