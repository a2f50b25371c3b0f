#!/usr/bin/env bash
# GPU benchmark, one command (fits in 8 minutes on one H200): embedding tokens/s (all-MiniLM-L6-v2 and a
# base-size encoder; fp32 vs bf16; length-bucketed vs not), spaCy transformer-pipeline words/s, and GPU
# utilisation during an end-to-end ingest. Without CUDA it runs its CPU path on small sizes and exits 0.
# Tables on stdout, JSON in $BENCH_OUT/gpu.json (default .corpusmill/bench). Extra arguments go to
# ops/bench/gpu.py (--quick: small sizes on a GPU too).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
exec timeout "${BENCH_GPU_TIMEOUT:-480}" "$PY" -m ops.bench.gpu "$@"
