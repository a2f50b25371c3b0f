"""Small builders for chunk and document rows, shared by the database tests."""

import numpy as np

from jobs.chunks.ids import sha256_text


def chunk_row(doc_id, seq, text, vec, collection, token_count=20):
    return {"chunk_id": f"{doc_id}-{seq}", "collection": collection, "doc_id": doc_id, "source_path": f"{doc_id}.md",
            "source_type": "markdown", "heading_path": ["T", "H"], "breadcrumb": "T › H", "text": text,
            "embed_text": f"T › H\n\n{text}", "seq": seq, "char_start": 0, "char_end": len(text), "sheet": None,
            "row": None, "tags": ["p"], "token_count": token_count, "word_count": 2, "quality": "ok", "omitted": False,
            "omit_reason": None, "text_sha256": sha256_text(text), "pipeline_fingerprint": "fp", "run_id": "r1",
            "embedding": vec, "embedding_model": "m"}


def doc_row(doc_id, sha="sha1"):
    return {"doc_id": doc_id, "source_path": f"{doc_id}.md", "source_type": "markdown", "content_sha256": sha,
            "pipeline_fingerprint": "fp"}


def unit_vector(i, dim):
    v = np.zeros(dim, dtype=np.float32)
    v[i % dim] = 1
    return v
