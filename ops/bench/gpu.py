"""GPU benchmark (ops/bench/gpu.sh runs it): embedding tokens/s, spaCy transformer sentence splitting
words/s, and GPU utilisation during an end-to-end ingest. Without CUDA it runs its CPU path on small
sizes and still passes, so the script itself is tested everywhere.

    python -m ops.bench.gpu [--quick]

- Embedding: all-MiniLM-L6-v2 (the packaged model) and a base-size encoder (BERT-base shape: 12 layers,
  768 hidden, ~110M parameters, random weights built from its config; tokens/s does not depend on the
  weights), fp32 vs bf16 (bf16 only on CUDA), length-bucketed token-budget batches
  (jobs.embed.encoder.token_budget_batches) vs fixed batches in arrival order. tokens/s counts real
  tokens, not padding.
- spaCy: a transformer + parser pipeline built from a spacy-transformers config around a local
  random-weight encoder of roberta-base size (BERT-base shape with the MiniLM WordPiece vocabulary, as no
  BPE vocabulary ships offline), standing in for en_core_web_trf's cost: words/s of nlp.pipe.
- End to end (CUDA only): `corpusmill ingest` with embeddings on the GPU (float16) while nvidia-smi is
  sampled every 200 ms: mean and peak utilisation.
Texts come from tests/data/corpus (tracked in the repository, so the script runs on a bare checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ops.bench import common

FIXTURES = common.REPO / "tests" / "data" / "corpus"


def texts_from_fixtures(n: int, seed: int = 3) -> list[str]:
    """`n` texts of 16–250 words cut from the fixture corpus, in shuffled (arrival) order."""
    import random

    words = []
    for path in sorted(FIXTURES.rglob("*.md")):
        words += re.findall(r"[A-Za-z][\w'-]*|[.,;:!?]", path.read_text(encoding="utf-8", errors="replace"))
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.choice([rng.randint(16, 60), rng.randint(60, 160), rng.randint(160, 250)])
        start = rng.randrange(0, max(1, len(words) - length))
        out.append(" ".join(words[start:start + length]))
    return out


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def random_encoder_dir(path: Path, **bert_config) -> Path:
    """A BERT-shaped encoder with random weights and the MiniLM tokenizer, saved as a local HF dir
    (no download). `bert_config` overrides BertConfig's defaults, which are bert-base: 12 × 768."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from jobs.embed.models import resolve_model

    if not (path / "config.json").exists():
        BertModel(BertConfig(**bert_config)).save_pretrained(path)
        AutoTokenizer.from_pretrained(resolve_model(common.MODEL).location).save_pretrained(path)
    return path


def base_size_dir(tmp: Path) -> Path:
    """A BERT-base-shaped encoder with random weights (12 × 768, 30522 vocab)."""
    return random_encoder_dir(tmp / "bert-base-random")


def embed_bench(model_dir: str, name: str, texts: list[str], device: str, dtype: str, bucketed: bool,
                max_tokens: int, batch_size: int) -> dict:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from jobs.embed.encoder import token_budget_batches

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).to(device).eval()
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    limit = 256 if "minilm" in name.lower() else 512
    ids = tok(texts, truncation=True, max_length=limit)["input_ids"]
    lengths = [len(x) for x in ids]
    if bucketed:
        batches = token_budget_batches(lengths, max_tokens, batch_size)
    else:
        batches = [list(range(i, min(i + batch_size, len(texts)))) for i in range(0, len(texts), batch_size)]

    def run() -> int:
        padded = 0
        with torch.inference_mode():
            for batch in batches:
                enc = tok([texts[i] for i in batch], padding=True, truncation=True, max_length=limit,
                          return_tensors="pt").to(device)
                out = model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
                pooled = (out * mask).sum(1) / mask.sum(1)
                torch.nn.functional.normalize(pooled.float(), dim=1)
                padded += enc["input_ids"].numel()
        _sync(device)
        return padded

    run_warm = [texts[i] for i in batches[0]][:4]
    with torch.inference_mode():
        model(**tok(run_warm, padding=True, truncation=True, max_length=limit, return_tensors="pt").to(device))
    _sync(device)
    t0 = time.perf_counter()
    padded = run()
    seconds = time.perf_counter() - t0
    real = sum(lengths)
    return {"model": name, "device": device, "dtype": dtype, "bucketed": bucketed, "texts": len(texts),
            "tokens": real, "padded_tokens": padded, "padding_overhead": round(padded / real, 3),
            "seconds": round(seconds, 3), "tokens_per_second": round(real / seconds)}


def trf_pipeline(encoder: Path, *, mixed_precision: bool = False, window: int = 128, stride: int = 96,
                 parser_width: int = 64):
    """An initialized transformer + parser pipeline (the shape of en_core_web_trf) around a local
    encoder dir, built from a spacy-transformers config: random weights, no download."""
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example

    config = spacy.util.load_config_from_str(f"""
[nlp]
lang = "en"
pipeline = ["transformer","parser"]
batch_size = 128

[components]

[components.transformer]
factory = "transformer"
max_batch_items = 4096

[components.transformer.model]
@architectures = "spacy-transformers.TransformerModel.v3"
name = "{encoder}"
mixed_precision = {str(mixed_precision).lower()}

[components.transformer.model.get_spans]
@span_getters = "spacy-transformers.strided_spans.v1"
window = {window}
stride = {stride}

[components.transformer.model.tokenizer_config]
use_fast = true

[components.parser]
factory = "parser"

[components.parser.model]
@architectures = "spacy.TransitionBasedParser.v2"
state_type = "parser"
extra_state_tokens = false
hidden_width = {parser_width}
maxout_pieces = 2
use_upper = false

[components.parser.model.tok2vec]
@architectures = "spacy-transformers.TransformerListener.v1"
grad_factor = 1.0
pooling = {{"@layers":"reduce_mean.v1"}}
upstream = "*"
""")
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    words = ["The", "server", "starts", ".", "It", "watches", "files", "."]
    example = Example.from_dict(Doc(nlp.vocab, words=words),
                                {"heads": [1, 1, 1, 1, 5, 5, 5, 5], "deps": ["det", "ROOT", "dep", "punct",
                                                                             "nsubj", "ROOT", "dobj", "punct"]})
    nlp.initialize(lambda: [example])
    return nlp


def spacy_trf_bench(tmp: Path, prose: list[str], device: str) -> dict:
    """Transformer + parser pipeline from a config (random weights), words/s of nlp.pipe."""
    import spacy

    gpu = False
    if device == "cuda":
        try:
            gpu = spacy.require_gpu()
        except Exception as exc:  # cupy missing: measure on CPU and say so
            gpu_error = f"{type(exc).__name__}: {exc}"
    encoder = base_size_dir(tmp)
    t0 = time.perf_counter()
    nlp = trf_pipeline(encoder, mixed_precision=device == "cuda")
    init_s = time.perf_counter() - t0
    prose = sorted(prose, key=len)  # as jobs.markdown.sentences does: tight padded batches
    nlp(prose[0])
    t0 = time.perf_counter()
    n_words = n_sents = 0
    for doc in nlp.pipe(prose, batch_size=64):
        n_words += sum(1 for t in doc if not t.is_punct and not t.is_space)
        n_sents += sum(1 for _ in doc.sents)
    seconds = time.perf_counter() - t0
    out = {"pipeline": "transformer (BERT-base shape, random) + parser", "device": "cuda" if gpu else "cpu",
           "texts": len(prose), "words": n_words, "sentences": n_sents, "init_s": round(init_s, 2),
           "seconds": round(seconds, 3), "words_per_second": round(n_words / seconds)}
    if device == "cuda" and not gpu:
        out["note"] = f"spaCy could not use the GPU ({gpu_error}); measured on CPU"
    return out


def sample_gpu(stop: threading.Event, samples: list) -> None:
    cmd = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
    while not stop.is_set():
        try:
            line = subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
            util, mem = (float(x) for x in line.split(","))
            samples.append((time.time(), util, mem))
        except Exception:
            pass
        stop.wait(0.2)


def e2e_gpu_ingest(tmp: Path, copies: int) -> dict:
    """`corpusmill ingest` with embeddings on the GPU (float16), sampling utilisation."""
    import yaml

    cfg = yaml.safe_load(common.CONFIG.read_text(encoding="utf-8"))
    cfg["excel"]["templates_dir"] = str(common.CONFIG.parent / cfg["excel"]["templates_dir"])  # relative to local.yaml
    cfg["embedding"].update(device="cuda", dtype="float16", encode_batch_size=256)
    cfg["embedding"]["resources"].update(num_gpus=1, batch_size=256)
    cfg["ray"]["progress_bars"] = False
    config = tmp / "gpu-bench.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    corpus = tmp / "e2e-corpus"
    for k in range(copies):
        for f in FIXTURES.rglob("*.md"):
            target = corpus / f"copy{k:03d}" / f.relative_to(FIXTURES)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
    stop, samples = threading.Event(), []
    thread = threading.Thread(target=sample_gpu, args=(stop, samples), daemon=True)
    thread.start()
    try:
        r = common.ingest(corpus, "bench_gpu_e2e", config=config, tag="gpu-e2e")
    finally:
        stop.set()
        thread.join()
    utils = [u for _, u, _ in samples]
    return {"files": sum(1 for _ in corpus.rglob("*.md")), "wall_s": round(r["wall_s"], 2),
            "vectors": r["metrics"]["chunks"]["embedded"], "samples": len(samples),
            "gpu_util_mean": round(sum(utils) / len(utils), 1) if utils else None,
            "gpu_util_max": max(utils) if utils else None,
            "gpu_util_busy_share": round(sum(1 for u in utils if u > 0) / len(utils), 3) if utils else None,
            "gpu_mem_max_mib": max((m for _, _, m in samples), default=None),
            "stages": r["metrics"]["stages"].get("stages")}


def bench(quick: bool) -> dict:
    import torch

    from jobs.embed.models import resolve_model

    device = _device()
    big = device == "cuda" and not quick
    out: dict = {"device": device, "torch": torch.__version__, "machine": common.machine(),
                 "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None, "embedding": [],
                 "spacy": None, "e2e": None, "skipped": []}
    if device == "cpu":
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    tmp = Path(tempfile.mkdtemp(prefix="cmgpu-"))
    try:
        minilm = resolve_model(common.MODEL).location
        base = str(base_size_dir(tmp))
        sizes = {"minilm": 8192 if big else 48, "base": 4096 if big else 16}
        dtypes = ["float32", "bfloat16"] if device == "cuda" else ["float32"]
        if device == "cpu":
            out["skipped"].append("bf16: measured on CUDA only")
        for name, path, key in (("all-MiniLM-L6-v2", minilm, "minilm"), ("BERT-base-size (random)", base, "base")):
            texts = texts_from_fixtures(sizes[key])
            for dtype in dtypes:
                for bucketed in (False, True):
                    out["embedding"].append(embed_bench(
                        path, name, texts, device, dtype, bucketed,
                        max_tokens=65536 if device == "cuda" else 4096, batch_size=256 if device == "cuda" else 32))
        prose = texts_from_fixtures(2000 if big else 12, seed=5)
        try:
            out["spacy"] = spacy_trf_bench(tmp, prose, device)
        except Exception as exc:  # recorded, never fatal: the embedding figures still stand
            out["skipped"].append(f"spaCy transformer pipeline: {type(exc).__name__}: {exc}")
        if device == "cuda" and shutil.which("nvidia-smi"):
            try:
                out["e2e"] = e2e_gpu_ingest(tmp, copies=2 if quick else 60)
            except Exception as exc:
                out["skipped"].append(f"end-to-end ingest: {type(exc).__name__}: {str(exc)[-500:]}")
        else:
            out["skipped"].append("end-to-end GPU utilisation: no CUDA device")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def report(r: dict) -> str:
    emb = common.table(
        ["model", "dtype", "batches", "texts", "tokens", "padding", "seconds", "tokens/s"],
        [[e["model"], e["dtype"], "length-bucketed" if e["bucketed"] else "arrival order", e["texts"], e["tokens"],
          e["padding_overhead"], e["seconds"], e["tokens_per_second"]] for e in r["embedding"]],
        f"Embedding on {r['device']}" + (f" ({r['gpu']})" if r["gpu"] else ""))
    parts = [emb]
    if r["spacy"]:
        s = r["spacy"]
        parts.append(common.table(["spaCy pipeline", "device", "texts", "words", "seconds", "words/s"],
                                  [[s["pipeline"], s["device"], s["texts"], s["words"], s["seconds"],
                                    s["words_per_second"]]], "spaCy transformer-pipeline sentence splitting"))
    if r["e2e"]:
        e = r["e2e"]
        parts.append(common.table(["end-to-end ingest", "files", "vectors", "wall s", "GPU util mean %", "max %"],
                                  [["corpusmill ingest, embed on GPU fp16", e["files"], e["vectors"], e["wall_s"],
                                    e["gpu_util_mean"], e["gpu_util_max"]]], "GPU utilisation during an ingest"))
    if r["skipped"]:
        parts.append("skipped: " + "; ".join(r["skipped"]))
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes even on a GPU")
    args = parser.parse_args(argv)
    with common.session():
        r = bench(args.quick)
    common.save("gpu", r)
    print(report(r))
    print(json.dumps({"device": r["device"], "embedding_results": len(r["embedding"])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
