"""The one builder of chunk rows, for both source types: a chunker supplies drafts (its text, heading
path, breadcrumb, embed text and where the chunk sits), this adds the identity, the counts and the
quality band and terms (jobs/terms.py) the contract (jobs/rows.py) asks of every chunk, so the two
paths cannot drift apart.

It lives here rather than in jobs/rows.py because it needs the ids and quality rules of this package,
and rows sits below it (tests/test_layout.py)."""

from __future__ import annotations

from jobs.chunks.ids import chunk_id, sha256_text
from jobs.chunks.quality import label, word_count
from jobs.config import QualityConfig
from jobs.terms import analyse_chunk


def chunk_rows(work: dict, drafts: list[dict], *, source_type: str, locators: list[str], token_counts: list[int],
               token_limit: int, quality: QualityConfig, doc_stats: str,
               verdicts: list[tuple[str, str] | None] | None = None, metadata: str | None = None) -> list[dict]:
    """Chunk rows of one document, in `drafts` order (which is `seq`).

    `locators` say where each chunk sits (jobs.chunks.ids.chunk_id); `token_counts` are those of each
    draft's `embed_text`. A `verdicts` entry `(quality, reason)` is a decision already taken by the
    source's own rules (an Excel row filter): the chunk is omitted with it instead of being labelled.
    `metadata`: the document's (jobs/chunks/metadata.py), the same JSON text on every chunk."""
    rows = []
    for seq, (draft, locator, tokens) in enumerate(zip(drafts, locators, token_counts, strict=True)):
        text = draft["text"]
        words = word_count(text)
        verdict = verdicts[seq] if verdicts else None
        if verdict:
            band, omitted, reason = verdict[0], True, verdict[1]
        else:
            band, omitted, reason = label(text, words, tokens, token_limit, source_type, quality)
        text_sha = sha256_text(text)
        rows.append({
            **draft,
            "chunk_id": chunk_id(work["collection"], locator, text_sha, work["pipeline_fingerprint"]),
            "collection": work["collection"],
            "doc_id": work["doc_id"],
            "source_path": work["source_path"],
            "source_type": source_type,
            "seq": seq,
            "token_count": tokens,
            "word_count": words,
            "quality": band,
            "omitted": omitted,
            "omit_reason": reason,
            "text_sha256": text_sha,
            "pipeline_fingerprint": work["pipeline_fingerprint"],
            "run_id": work["run_id"],
            "metadata": metadata,
            "row_kind": "chunk",
            "doc_rows": len(drafts),
            "content_sha256": work["content_sha256"],
            "doc_stats": doc_stats if seq == 0 else None,
            # BM25's side of the chunk, analysed here on the workers so the database only stores it.
            **analyse_chunk(draft.get("breadcrumb"), text),
        })
    return rows
