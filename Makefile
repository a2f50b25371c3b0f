# corpusmill: `make run` ingests the bundled corpus, `make test` runs the whole test suite.
VENV        ?= .venv
PY          := $(VENV)/bin/python
# The CPU build of torch: this machine's pip finds it on disk. A bare `torch` would pull a CUDA build.
TORCH_SPEC  ?= torch==2.13.0
CONFIG      ?= configs/local.yaml
QUERY       ?= How do I define redirects for the development server?

.PHONY: setup run test test-fast test-gpu lint clean db-stop

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

run: setup
	$(VENV)/bin/corpusmill ingest --config $(CONFIG)
	$(VENV)/bin/corpusmill search --config $(CONFIG) --collection notes -k 3 "$(QUERY)"

test: setup
	$(PY) -m pytest

test-fast: setup
	$(PY) -m pytest -m "not slow and not gpu"

test-gpu: setup
	$(PY) -m pytest -m gpu -o addopts=""

lint: setup
	$(VENV)/bin/ruff check jobs tests

db-stop: setup
	$(VENV)/bin/corpusmill db stop

clean:
	rm -rf .corpusmill .pytest_cache
