"""`corpusmill stats`: what the structure and length rules do to a corpus, without a database or Ray.

Runs the same parse → sentences → chunk code in-process over the Markdown files of a directory and
reports token distributions before chunking (per file, per section) and after (per chunk), plus the
checks a chunker must pass: no front matter in chunks, no code comment taken for a heading, few
fragments, no pile-up at the token limit.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

from jobs.checks.distribution import distribution
from jobs.config import JobConfig
from jobs.embed.tokens import token_counter
from jobs.markdown.parse import decode_source_text, parse_markdown
from jobs.markdown.sentences import SentenceSplitter
from jobs.markdown.windows import chunk_document
from jobs.sources.discover import discover
from jobs.sources.reads import read_bytes
from jobs.sources.storage import StorageOptions

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def fenced_comment_lines(text: str) -> set[str]:
    """`#` lines found only inside fenced code (a scanner independent of the parser's): if one of
    them shows up in a heading path, the parser took a code comment for a heading."""
    inside, outside, fence = set(), set(), None
    for line in text.split("\n"):
        m = _FENCE.match(line)
        stripped = line.strip()
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
            fence = None
        elif line.lstrip().startswith("#"):
            (inside if fence is not None else outside).add(line.lstrip().lstrip("#").strip())
    return inside - outside


def front_matter_block(text: str) -> str:
    for fence in ("---", "+++"):
        if text.startswith(fence + "\n"):
            end = text.find("\n" + fence, len(fence))
            return text[len(fence) + 1:end].strip() if end > 0 else ""
    return ""


def corpus_stats(cfg: JobConfig, progress=sys.stderr) -> dict:
    storage = StorageOptions.from_config(cfg.storage)
    found = discover(cfg.input.roots, cfg.input.include, cfg.input.exclude, storage,
                     follow_external_links=cfg.input.follow_external_links)
    files = [f for f in found if f.source_type == "markdown"]
    # Workbooks have no sections or sentence windows to measure; they are counted so the figures
    # are not read as the whole corpus (`corpusmill templates preview` shows what a workbook becomes).
    workbooks = sum(1 for f in found if f.source_type == "excel")
    counter = token_counter(cfg.embedding.model)
    limit = min(cfg.chunking.max_tokens, counter.limit)
    splitter = SentenceSplitter(cfg.sentences.model, nlp_batch_size=cfg.sentences.nlp_batch_size)
    file_tokens, section_tokens, sections_per_file, chunk_tokens = [], [], [], []
    quality, omitted, changes = Counter(), Counter(), Counter()
    front_matter_leaks, comment_headings, failed, embedded_words = 0, 0, [], []
    started = time.monotonic()
    for n, f in enumerate(files, 1):
        try:
            text = decode_source_text(read_bytes(f.abs_path, storage))
            parsed = parse_markdown(text, Path(f.source_path).stem,
                                    title_from_front_matter=cfg.markdown.title_from_front_matter,
                                    onenote_headings=cfg.markdown.onenote_headings)
        except Exception as exc:
            failed.append({"source_path": f.source_path, "error": f"{type(exc).__name__}: {exc}"})
            continue
        sections = parsed.sections_as_dicts()
        bodies = [" ".join(text[b["start"]:b["end"]] for b in s["blocks"]) for s in sections]
        counts = counter.count(bodies)
        file_tokens.append(sum(counts))
        section_tokens.extend(c for c, s in zip(counts, sections) if s["blocks"])
        sections_per_file.append(len(sections))
        doc = {"doc_id": f.source_path, "collection": cfg.collection, "source_path": f.source_path,
               "source_type": "markdown", "content_sha256": f.content_sha256, "pipeline_fingerprint": "stats",
               "run_id": "stats", "title": parsed.title, "text": text, "sections": sections,
               "metadata_json": json.dumps(parsed.metadata, default=str)}
        (doc,) = splitter([doc])
        rows = chunk_document(doc, cfg.chunking, cfg.quality, cfg.embedding.model, tuple(cfg.markdown.description_keys))
        fm = front_matter_block(text)
        comments = fenced_comment_lines(text)
        for r in rows:
            if r.get("doc_stats"):
                changes.update(json.loads(r["doc_stats"]))
            if r["row_kind"] != "chunk":
                continue
            quality[r["quality"]] += 1
            if r["omitted"]:
                omitted[r["omit_reason"].split(":")[0]] += 1
                continue
            chunk_tokens.append(r["token_count"])
            embedded_words.append(r["word_count"])
            front_matter_leaks += bool(fm) and len(fm) > 20 and fm in r["text"]
            comment_headings += any(h in comments for h in r["heading_path"][1:])
        if progress and (n % 100 == 0 or n == len(files)):
            print(f"stats: {n}/{len(files)} files, {time.monotonic() - started:.0f} s", file=progress)
    near_limit = sum(1 for t in chunk_tokens if t >= 0.97 * limit)
    fragments = sum(1 for w in embedded_words if w < cfg.quality.fragment_words)
    hist_edges = [0, 16, 32, 64, 96, 128, 160, 192, 224, 256, 384, 512]
    return {
        "files": len(files),
        "workbooks_skipped": workbooks,
        "failed": failed,
        "token_limit": limit,
        "file_tokens": distribution(file_tokens),
        "section_tokens": distribution(section_tokens) | {
            "oversized": sum(1 for t in section_tokens if t > limit),
            "undersized": sum(1 for t in section_tokens if t < cfg.chunking.small_section_tokens),
        },
        "sections_per_file": distribution(sections_per_file),
        "chunk_tokens": distribution(chunk_tokens) | {
            "histogram": {f"{lo}-{hi - 1}": sum(1 for t in chunk_tokens if lo <= t < hi)
                          for lo, hi in zip(hist_edges, hist_edges[1:])} | {
                f"{hist_edges[-1]}+": sum(1 for t in chunk_tokens if t >= hist_edges[-1])},
        },
        "chunks": {
            "embedded": len(chunk_tokens),
            "by_quality": dict(quality),
            "omitted_by_reason": dict(omitted),
            "fragments_under_words": cfg.quality.fragment_words,
            "fragment_share": round(fragments / len(chunk_tokens), 4) if chunk_tokens else 0.0,
            "near_limit_share": round(near_limit / len(chunk_tokens), 4) if chunk_tokens else 0.0,
            "over_limit": sum(1 for t in chunk_tokens if t > counter.limit),
        },
        "checks": {"front_matter_in_chunks": front_matter_leaks, "code_comment_headings": comment_headings},
        "text_changes": dict(sorted(changes.items())),
        "seconds": round(time.monotonic() - started, 1),
    }


def format_stats(s: dict) -> str:
    def row(name: str, d: dict) -> str:
        if not d.get("n"):
            return f"{name:<18} n 0"
        return f"{name:<18} n {d['n']:>6}  max {d['max']:>6}  p95 {d['p95']:>6}  median {d['median']:>7}  mean {d['mean']:>7}"

    c, sec = s["chunks"], s["section_tokens"]
    lines = [
        f"{s['files']} Markdown files · token limit {s['token_limit']} · {s['seconds']} s",
        row("file tokens", s["file_tokens"]),
        row("section tokens", sec) + f"  oversized {sec.get('oversized', 0)}  undersized {sec.get('undersized', 0)}",
        row("sections per file", s["sections_per_file"]),
        row("chunk tokens", s["chunk_tokens"]),
        "chunk token histogram: " + "  ".join(f"{k}:{v}" for k, v in s["chunk_tokens"].get("histogram", {}).items()),
        f"embedded chunks {c['embedded']} · by quality {c['by_quality']} · omitted {c['omitted_by_reason']}",
        f"fragments (< {c['fragments_under_words']} words) {c['fragment_share']:.1%} · within 3% of the limit "
        f"{c['near_limit_share']:.1%} · over the limit {c['over_limit']}",
        f"front matter in chunks {s['checks']['front_matter_in_chunks']} · code comments taken for headings "
        f"{s['checks']['code_comment_headings']}",
        "text changes: " + ", ".join(f"{k} {v}" for k, v in s["text_changes"].items() if v),
    ]
    if s.get("workbooks_skipped"):
        lines.append(f"{s['workbooks_skipped']} workbook(s) (Excel, CSV) skipped: stats covers Markdown only; "
                     "`corpusmill templates preview FILE` shows how a workbook's rows render")
    if s["failed"]:
        lines.append(f"{len(s['failed'])} file(s) failed: " + "; ".join(f"{x['source_path']} ({x['error']})"
                                                                        for x in s["failed"][:10]))
    return "\n".join(lines)
