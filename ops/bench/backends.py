"""Embedding backends side by side (#20): encode speed and retrieval, the same texts, one run.

    python -m ops.bench.backends      # BENCH_FILES pages of BENCH_CORPUS (default: hugo-docs, all pages)

The described-pages set of the corpus (ops/bench/described.py: a page's front matter description is
the question, the page the answer; descriptions hidden from the pages) is cut into paragraph windows of
at most 150 words. Each backend (torch float32, onnx, onnx int8, openvino; those installed) embeds
every window and question as an ingest's embedding actor would (jobs.embed.encoder.Embedder: one
single-threaded encoder per core), alternating backends over BENCH_ROUNDS rounds (default 2; the best
round counts); pages are ranked by their best window (exact cosine). Reported: windows/s and its ratio
to torch, page hit@1/@5, and the lowest cosine of a backend's window vector to torch's. A model-level
comparison: no Ray, no database; the ingest-level figures are `make bench` and `make eval`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

from ops.bench import common

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
BACKENDS = [("torch", ""), ("onnx", "#onnx"), ("onnx int8", "#onnx-int8"), ("openvino", "#openvino")]
_NEEDS = {"#onnx": "optimum.onnxruntime", "#onnx-int8": "optimum.onnxruntime", "#openvino": "optimum.intel"}
MAX_WORDS = 150


def windows(text: str) -> list[str]:
    """Paragraphs grouped up to MAX_WORDS words (a long paragraph is cut by words)."""
    out, current = [], []
    for para in re.split(r"\n\s*\n", text):
        words = para.split()
        while words:
            room = MAX_WORDS - len(current)
            if room <= 0:
                out.append(" ".join(current))
                current, room = [], MAX_WORDS
            current += words[:room]
            words = words[room:]
    if current:
        out.append(" ".join(current))
    return out


def installed(suffix: str) -> bool:
    module = _NEEDS.get(suffix)
    return module is None or (importlib.util.find_spec(module.split(".")[0]) is not None
                              and importlib.util.find_spec(module) is not None)


def bench() -> dict:
    from jobs.embed.encoder import Embedder
    from ops.bench.described import build

    rounds = int(os.environ.get("BENCH_ROUNDS") or 2)
    cores = os.cpu_count() or 1
    root, files = common.corpus(common.bench_files(), "backends")
    built = build(root, common.work_dir() / "backends-described")
    golden = [json.loads(line) for line in Path(built["golden"]).read_text(encoding="utf-8").splitlines() if line.strip()]
    texts, owner = [], []
    corpus = Path(built["corpus"])
    for path in sorted(corpus.rglob("*.md")):
        for w in windows(path.read_text(encoding="utf-8", errors="replace")):
            texts.append(w)
            owner.append(path.relative_to(corpus).as_posix())
    questions = [g["question"] for g in golden]
    print(f"backends: {len(files)} pages, {len(texts)} windows, {len(questions)} questions; {cores} encoder(s) "
          f"each, {rounds} rounds", flush=True)
    refs = [(name, MODEL + suffix) for name, suffix in BACKENDS if installed(suffix)]
    embedders = {ref: Embedder(ref, device="cpu", workers=cores, torch_threads=1) for _, ref in refs}
    best: dict[str, float] = {}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(rounds):
        for _, ref in refs:  # alternating: each round runs every backend under the same load
            started = time.perf_counter()
            vectors[ref] = embedders[ref].encode(texts)
            best[ref] = min(best.get(ref, float("inf")), time.perf_counter() - started)
    pages, base, rows = np.array(owner), vectors[MODEL], []
    for name, ref in refs:
        scores = embedders[ref].encode(questions) @ vectors[ref].T
        hits = {1: 0, 5: 0}
        for i, g in enumerate(golden):
            ranked = list(dict.fromkeys(pages[np.argsort(-scores[i])][:400]))  # pages by their best window
            for k in hits:
                hits[k] += g["source_path"] in ranked[:k]
        rows.append({"backend": name, "reference": ref, "windows_per_s": round(len(texts) / best[ref], 1),
                     "ratio_to_torch": round(best[MODEL] / best[ref], 2),
                     "hit@1": round(hits[1] / len(golden), 3), "hit@5": round(hits[5] / len(golden), 3),
                     "min_cosine_to_torch": round(float((vectors[ref] * base).sum(axis=1).min()), 4)})
    return {"pages": len(files), "windows": len(texts), "questions": len(questions), "encoders": cores,
            "rounds": rounds, "backends": rows}


def report(r: dict) -> str:
    rows = r["backends"]
    return common.table(list(rows[0]), [list(x.values()) for x in rows],
                        f"embedding backends: {r['pages']} pages, {r['windows']} windows, {r['questions']} questions")


if __name__ == "__main__":
    sys.exit(common.standalone("backends", bench, report))
