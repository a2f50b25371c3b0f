# corpusmill: `make run` ingests the bundled corpus, `make test` runs the whole test suite.
VENV        ?= .venv
PY          := $(VENV)/bin/python
# The CPU build of torch: this machine's pip finds it on disk. A bare `torch` would pull a CUDA build.
TORCH_SPEC  ?= torch==2.13.0
CONFIG      ?= configs/local.yaml
QUERY       ?= How do I define redirects for the development server?

.PHONY: setup run test test-fast test-gpu lint docs clean db-stop bench bench-gpu bench-gpu-e2e bench-scale eval eval-excel

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]' "$(TORCH_SPEC)"
	touch $@

run: setup
	$(VENV)/bin/corpusmill ingest --config $(CONFIG)
	$(VENV)/bin/corpusmill search --config $(CONFIG) --collection notes -k 3 "$(QUERY)"

# Two pytest-xdist workers (TEST_WORKERS=0: one process): much of the suite waits on Ray, PostgreSQL and
# subprocesses, so two share the 2 cores. Each worker has its own embedded PostgreSQL and Ray head; tests
# of one file run on one worker (--dist loadfile), so a module's cluster or shared ingest is made once. Not
# loadgroup: under pytest 9 xdist's xdist_group marks are silently ignored (it renames node ids pytest no longer has).
TEST_WORKERS ?= 2
PYTEST      := $(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: setup
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow and not gpu"

test-gpu: setup
	$(PY) -m pytest -m gpu -o addopts=""

lint: setup
	$(VENV)/bin/ruff check jobs tests ops

# The configuration reference, generated from the models in jobs/config.py (a test fails when it is stale).
docs: setup
	$(PY) -m jobs.tools.config_reference > docs/config-reference.md.tmp
	mv docs/config-reference.md.tmp docs/config-reference.md

# Benchmarks (ops/bench/README.md): overhead ratio, LangChain-style baseline, per stage and scaling, loading,
# GPU (its CPU path here). Tables on stdout, JSON in $(BENCH_OUT); a private CORPUSMILL_HOME, stopped after.
# BENCH_FILES=200 for a quick check on part of the corpus.
BENCH_OUT   ?= .corpusmill/bench

$(VENV)/.bench-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev,bench]' "$(TORCH_SPEC)"
	touch $@

bench: setup $(VENV)/.bench-installed
	BENCH_OUT=$(BENCH_OUT) $(PY) -m ops.bench

bench-gpu: setup
	BENCH_OUT=$(BENCH_OUT) ops/bench/gpu.sh

# The whole job on a GPU machine with no registry (ops/bench/gpu_e2e.sh, docs/gpu.md): gpu.yaml's ingest of
# E2E_CORPUS beside local.yaml's on the machine's CPUs. E2E_STEP=prepare (here) packs what the machine lacks
# and the corpus into .corpusmill/e2e/part-*; there, receive (a call per part), install, sentences, run (the default).
# Here, E2E_FILES=8 E2E_CORPUS=DIR: the dry run on CPUs.
E2E_STEP    ?= run
bench-gpu-e2e:
	BENCH_OUT=$(BENCH_OUT) ops/bench/gpu_e2e.sh $(E2E_STEP) $(E2E_CORPUS) $(if $(E2E_FILES),--files $(E2E_FILES))

# The index at 10k, 100k and 1M chunks (ops/bench/scale.py): load rows/s against raw COPY, index builds,
# sizes, per-query latency of each search mode and its growth. BENCH_SCALE_SIZES=10000,100000 for less.
bench-scale: setup $(VENV)/.bench-installed
	BENCH_OUT=$(BENCH_OUT) $(PY) -m ops.bench.scale

# Retrieval on every dev set (ops/bench/retrieval.py): the default config against baseline-naive and the
# LangChain-style script, page and passage hit@1/5/10, one table. EVAL_SETS=xquad for a quick one.
eval: setup $(VENV)/.bench-installed
	BENCH_OUT=$(BENCH_OUT) $(PY) -m ops.bench.retrieval

# Excel rows and their headers on every shared workbook (ops/bench/excel_headers.py): no Ray, no database.
eval-excel: setup
	$(PY) -m ops.bench.excel_headers

db-stop: setup
	$(VENV)/bin/corpusmill db stop

clean:
	rm -rf .corpusmill .pytest_cache
