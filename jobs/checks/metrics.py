"""Per-run QA artifacts: metrics.json and a short summary.md under the run's qa/ folder."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.checks.distribution import length_summary

if TYPE_CHECKING:  # the writers' counts, for the annotations only (metrics reads their fields)
    from jobs.store.sink_stats import SinkStats


def _histogram(tally: Counter, edges: list[int]) -> dict[str, int]:
    out = {}
    for lo, hi in zip(edges, edges[1:] + [None]):
        key = f"{lo}-{hi - 1}" if hi else f"{lo}+"
        out[key] = sum(n for v, n in tally.items() if v >= lo and (hi is None or v < hi))
    return out


def run_metrics(stats: SinkStats, plan_counts: dict, seconds: float) -> dict:
    tokens, words = stats.tokens, stats.words
    return {
        "files": {**plan_counts, "done": stats.docs_done, "empty": stats.docs_empty, "failed": stats.docs_failed},
        "chunks": {
            "total": stats.chunks,
            "embedded": stats.vectors,
            "omitted": stats.omitted,
            # of the chunks embedded: vectors computed now, and reused (a text the collection or the batch held)
            "vectors_computed": stats.chunks - stats.omitted - stats.reused,
            "vectors_reused": stats.reused,
            # embedded, but another document holds the same text: recorded once (jobs/store/shared_text.py)
            "shared": stats.shared,
            "documents_released": stats.released,
            "by_source_type": dict(stats.by_source_type),
            "by_quality": dict(stats.quality),
            "omitted_by_reason": dict(stats.omit_reasons),
        },
        "embedded_chunks": {
            **length_summary(tokens, words),
            "token_histogram": _histogram(tokens, [0, 16, 32, 64, 128, 192, 256, 384, 512]),
        },
        "text_changes": dict(sorted(stats.text_changes.items())),
        "failures": stats.failures,
        "seconds": round(seconds, 2),
    }


def files_line(f: dict) -> str:
    """What a run did with the files (its metrics' `files`), as `ingest` prints it and summary.md says it.
    Files that failed before on the content they still hold are told apart from this run's failures:
    they were not processed again."""
    line = (f"{f['add']} added, {f['update']} updated, {f['retry']} retried, {f['skip']} skipped, "
            f"{f['delete']} deleted, {f['failed']} failed")
    if f.get("failed_before"):
        line += f" (new), {f['failed_before']} failed before (not retried; --retry-failed)"
    return line


def write_summary(path: Path, metrics: dict) -> None:
    f, c, e = metrics["files"], metrics["chunks"], metrics["embedded_chunks"]
    lines = [
        "# Run summary",
        "",
        f"- files: {files_line(f)}",
        f"- chunks: {c['total']} ({c['embedded']} embedded, {c['omitted']} omitted"
        + (f", {c['shared']} not stored again: another document holds their text" if c.get("shared") else "") + ")",
        f"- vectors: {c.get('vectors_computed', c['embedded'])} computed, {c.get('vectors_reused', 0)} reused "
        "(texts the collection or this run already held)",
        f"- by quality: {', '.join(f'{k} {v}' for k, v in sorted(c['by_quality'].items())) or '-'}",
        f"- omitted by reason: {', '.join(f'{k} {v}' for k, v in sorted(c['omitted_by_reason'].items())) or '-'}",
        f"- embedded chunk tokens: mean {e['tokens_mean']}, median {e['tokens_median']}",
        f"- time: {metrics['seconds']} s",
    ]
    formulas = metrics.get("text_changes", {}).get("excel_formulas_without_value")
    if formulas:  # read as empty: the run's log names each file and sheet
        lines.append(f"- {formulas} Excel formula cells saved without their values read as empty (see the run's "
                     "warnings; open and save those workbooks in Excel or LibreOffice to compute them)")
    if c.get("documents_released"):
        lines.append(f"- {c['documents_released']} other documents marked pending: they shared text only a replaced "
                     "or removed document held; the next run re-chunks them")
    if metrics["failures"]:
        lines += ["", "## Failed files", ""]
        lines += [f"- `{x['source_path']}` [{x['stage']}] {x['error_class']}: {x['message']}" for x in metrics["failures"]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
