# make run   : set up .venv (tested versions from constraints.txt) and run the default experiment
# make test  : set up .venv and run the fast test tier (in-process, no timing; minutes)
# make test-process : the tests that need their own processes (kill/resume, parallel sweeps, browser)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install run test test-process test-full bench clean

install: $(STAMP)

# torch first, pinned to the CPU build: otherwise sentence-transformers pulls a multi-GB CUDA build
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt torch
	$(PIP) install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

run: install
	$(PY) -m ragexp

test: install
	$(PY) -m pytest -m "not slow and not process"

test-process: install
	$(PY) -m pytest -m "process and not slow"

# every tier, with the optional Optuna search and Ray extras (kept out of the default install)
test-full: install
	$(PIP) install --quiet -c constraints.txt -e '.[test,optuna,ray]'
	$(PY) -m pytest

clean:
	rm -rf outputs multirun/[0-9]* .pytest_cache

# speed and memory figures on ../shared/data/hotpotqa_ircot_dev500 -> bench/results.json, bench/results.md
bench: install
	$(PY) bench/run.py
