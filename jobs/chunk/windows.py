"""Sentence windows inside each section (never across sections), bounded by the model's token limit.

Scope before length: a window holds up to `window_sentences` units of one section; the next window
starts `overlap` units before the previous one ended. The token bound counts the breadcrumb prefix
too, since that is what the model sees. A single unit over the limit (a long code block or table)
becomes its own chunk, labelled `too_long`, rather than being cut mid-structure.
"""

from __future__ import annotations

import json

from jobs.chunk.ids import chunk_id, sha256_text
from jobs.chunk.quality import label, word_count
from jobs.chunk.tokens import token_counter
from jobs.config import ChunkingConfig, QualityConfig
from jobs.rows import doc_marker, error_row

_UNIT_TAG = {"sent": "p"}


def breadcrumb_parts(title: str, heading_path: list[str]) -> list[str]:
    """The document title always leads; a first heading that repeats the title is not doubled."""
    rest = heading_path[1:] if heading_path and heading_path[0] == title else heading_path
    return [title] + list(rest)


def window_bounds(unit_tokens: list[int], prefix_tokens: int, max_tokens: int,
                  window: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) unit ranges. Overlap scales with a window cut short by the token bound, so
    short windows never overlap almost entirely (which would multiply chunks)."""
    bounds, n, i = [], len(unit_tokens), 0
    while i < n:
        j, tokens = i, prefix_tokens
        while j < n and j - i < window and (j == i or tokens + unit_tokens[j] <= max_tokens):
            tokens += unit_tokens[j]
            j += 1
        bounds.append((i, j))
        if j >= n:
            break
        step_back = ((j - i) * overlap) // window
        i = max(i + 1, j - step_back)
    return bounds


def chunk_document(doc: dict, chunking: ChunkingConfig, quality: QualityConfig, embedding_model: str) -> list[dict]:
    text = doc["text"]
    sections = json.loads(doc["sections_json"])
    units_per_section = json.loads(doc["units_json"])
    counter = token_counter(embedding_model)
    max_tokens = min(chunking.max_tokens, counter.limit)
    title = doc["title"]

    drafts = []  # (section, heading_path, breadcrumb, start, end, tags)
    for section, units in zip(sections, units_per_section):
        if not units:
            continue
        path = breadcrumb_parts(title, section["heading_path"])
        crumb = chunking.breadcrumb_separator.join(path)
        prefix_tokens, *unit_tokens = counter.count([crumb + "\n\n"] + [text[a:b] for a, b, _ in units])
        for lo, hi in window_bounds(unit_tokens, prefix_tokens, max_tokens,
                                    chunking.window_sentences, chunking.overlap_sentences):
            kinds = {_UNIT_TAG.get(u[2], u[2]) for u in units[lo:hi]}
            if section["level"]:
                kinds.add(f"h{section['level']}")
            drafts.append((path, crumb, units[lo][0], units[hi - 1][1], sorted(kinds)))

    if not drafts:
        return [doc_marker(doc, "empty")]
    embed_texts = [f"{crumb}\n\n{text[a:b]}" for _, crumb, a, b, _ in drafts]
    token_counts = counter.count(embed_texts)
    out = []
    for seq, ((path, crumb, a, b, tags), embed_text, tokens) in enumerate(zip(drafts, embed_texts, token_counts)):
        body = text[a:b]
        words = word_count(body)
        q, omitted, reason = label(body, words, tokens, counter.limit, "markdown", quality)
        text_sha = sha256_text(body)
        out.append({
            "chunk_id": chunk_id(doc["collection"], doc["source_path"], seq, text_sha, doc["pipeline_fingerprint"]),
            "collection": doc["collection"],
            "doc_id": doc["doc_id"],
            "source_path": doc["source_path"],
            "source_type": "markdown",
            "heading_path": path,
            "breadcrumb": crumb,
            "text": body,
            "embed_text": embed_text,
            "seq": seq,
            "char_start": a,
            "char_end": b,
            "tags": tags,
            "token_count": tokens,
            "word_count": words,
            "quality": q,
            "omitted": omitted,
            "omit_reason": reason,
            "text_sha256": text_sha,
            "pipeline_fingerprint": doc["pipeline_fingerprint"],
            "run_id": doc["run_id"],
            "row_kind": "chunk",
            "doc_rows": len(drafts),
            "content_sha256": doc["content_sha256"],
        })
    return out


def chunk_documents(rows: list[dict], *, chunking: ChunkingConfig, quality: QualityConfig,
                    embedding_model: str) -> list[dict]:
    """Stage: document rows with sentence units -> chunk rows (or one error/empty row per document)."""
    out = []
    for doc in rows:
        if doc.get("error_stage"):
            out.append(doc_marker(doc, "error", error_stage=doc["error_stage"],
                                  error_class=doc["error_class"], error_message=doc["error_message"]))
            continue
        try:
            out.extend(chunk_document(doc, chunking, quality, embedding_model))
        except Exception as exc:
            out.append(error_row(doc, "chunk", exc))
    return out
