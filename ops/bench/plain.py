"""The plain script of the overhead benchmark: only the unavoidable work, on the ingest's own inputs.

    python -m ops.bench.plain INPUTS.json TABLE

INPUTS.json (written by ops/bench/overhead.py from the ingest's Parquet output and its parser) holds the
prose blocks spaCy splits and the chunk rows, `embed_text` included. This script loads the same spaCy
pipeline with the same components, splits the prose (`nlp.pipe`, same batch size), loads the same
embedding model and encodes every `embed_text` in one call of the same encoder with the same settings
(jobs.embed.encoder: token-budget batches grouped by length, here over the whole set at once, which is
the best case for padding), then loads all rows, vectors included, with one
`COPY … FROM STDIN (FORMAT BINARY)` into a scratch table. It prints one JSON line: seconds per step.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    t_start = time.perf_counter()
    inputs_path, table = (argv or sys.argv[1:])[:2]
    with open(inputs_path, encoding="utf-8") as f:
        inputs = json.load(f)
    cfg = inputs["config"]
    steps: dict[str, float] = {}

    t0 = time.perf_counter()
    from jobs.markdown.sentences import load_sentence_pipeline

    nlp = load_sentence_pipeline(cfg["sentences_model"])
    steps["spacy_load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    prose = sorted(inputs["prose"], key=len)
    sentences = sum(1 for doc in nlp.pipe(prose, batch_size=cfg["nlp_batch_size"]) for _ in doc.sents)
    steps["spacy"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    from jobs.embed.encoder import Embedder

    embedder = Embedder(cfg["model"], device="cpu", encode_batch_size=cfg["encode_batch_size"],
                        torch_threads=cfg.get("torch_threads"), workers=cfg.get("workers", 1))
    steps["model_load"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = inputs["rows"]
    vectors = embedder.encode([r["embed_text"] for r in rows])  # all at once: grouped by length over the whole set
    steps["encode"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    import psycopg
    from pgvector.psycopg import register_vector

    from ops.bench.common import copy_rows, create_scratch_table

    with psycopg.connect(inputs["database_url"]) as conn:
        register_vector(conn)
        create_scratch_table(conn, "bench", table, vectors.shape[1])
        conn.commit()
        t_copy = time.perf_counter()
        copy_rows(conn, "bench", table, [dict(r, embedding=v) for r, v in zip(rows, vectors)])
        conn.commit()
        steps["copy"] = time.perf_counter() - t_copy
        conn.execute(f'DROP TABLE bench."{table}"')
    steps["db_setup"] = time.perf_counter() - t0 - steps["copy"]
    steps["total_in_process"] = time.perf_counter() - t_start
    print(json.dumps({"steps": {k: round(v, 3) for k, v in steps.items()}, "prose_blocks": len(prose),
                      "sentences": sentences, "rows": len(rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
