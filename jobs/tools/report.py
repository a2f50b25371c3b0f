"""`corpusmill report`: turn one finished run directory into QA artifacts a person can review.

Reads only what the run left on disk (chunk Parquet parts, errors.parquet, run.json, qa/metrics.json),
so a report can be rebuilt for any past run without the database or Ray, and writes next to
metrics.json under `qa/`: breakdown.json, sample.jsonl, flagged.json/.csv, three PNG plots and a
single self-contained report.html.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import random
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # report machines have no display; must precede the pyplot import

import matplotlib.pyplot as plt  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

# The embedding column is left out: the report never needs vectors, and on a large run they dwarf the rest.
_COLUMNS = ["chunk_id", "source_path", "source_type", "heading_path", "text", "seq", "tags",
            "token_count", "word_count", "quality", "omitted", "omit_reason"]
QUALITY_ORDER = ("ok", "short", "fragment", "too_long", "context_dead")
HEADING_SEP = " › "
PREVIEW_CHARS = 300
HTML_FLAGGED_ROWS = 50
NO_TAG = "(none)"

_QUALITY_COLOURS = {"ok": "#2e7d32", "short": "#f9a825", "fragment": "#ef6c00", "too_long": "#6a1b9a",
                    "context_dead": "#c62828"}
_SOURCE_COLOURS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]


@dataclass
class _Chunks:
    """Column lists of the run's chunks, ordered by (source_path, seq) so every artifact reads in document order."""

    chunk_id: list[str]
    source_path: list[str]
    source_type: list[str]
    heading_path: list[list[str]]
    text: list[str]
    tags: list[list[str]]
    token_count: list[int]
    word_count: list[int]
    quality: list[str]
    omitted: list[bool]
    omit_reason: list[str | None]

    def __len__(self) -> int:
        return len(self.chunk_id)


def write_report(run_dir: Path, sample_size: int = 20, seed: int = 0) -> dict[str, Path]:
    """Write the QA artifacts for `run_dir` under `run_dir/qa` and return name → path of each file written.

    Plots are skipped (and the HTML says so) when the run has no chunks; everything else is always written.
    """
    run_dir = Path(run_dir)
    qa_dir = run_dir / "qa"
    qa_dir.mkdir(parents=True, exist_ok=True)
    run_info = _read_json(run_dir / "run.json")
    metrics = _read_json(qa_dir / "metrics.json")
    chunks = _read_chunks(run_dir / "chunks")
    failures = _read_failures(run_dir / "errors.parquet", metrics)

    breakdown = build_breakdown(chunks)
    sample = build_sample(chunks, sample_size, seed)
    flagged = build_flagged(chunks)
    limit = token_limit(metrics, run_info)

    written: dict[str, Path] = {}
    written["breakdown.json"] = _write_text(qa_dir / "breakdown.json", json.dumps(breakdown, indent=2, ensure_ascii=False))
    written["sample.jsonl"] = _write_text(qa_dir / "sample.jsonl",
                                          "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in sample), newline=False)
    written["flagged.json"] = _write_text(qa_dir / "flagged.json", json.dumps(flagged, indent=2, ensure_ascii=False))
    written["flagged.csv"] = _write_flagged_csv(qa_dir / "flagged.csv", flagged)

    plots: dict[str, bytes] = {}
    if len(chunks):
        plots = {
            "tokens_by_source_type.png": _plot_tokens(chunks, limit),
            "quality_labels.png": _plot_quality(breakdown),
            "chunks_per_file.png": _plot_chunks_per_file(chunks),
        }
        for name, png in plots.items():
            path = qa_dir / name
            path.write_bytes(png)
            written[name] = path

    page = render_html(run_dir, run_info, metrics, breakdown, failures, flagged, sample, plots, limit, sample_size, seed)
    written["report.html"] = _write_text(qa_dir / "report.html", page)
    return written


# ---------------------------------------------------------------------------------------------- reading

def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def _read_chunks(chunks_dir: Path) -> _Chunks:
    # Named parts only: a run killed mid-write can leave a `.parquet.tmp` that a whole-directory read would pick up.
    parts = sorted(chunks_dir.glob("part-*.parquet")) if chunks_dir.is_dir() else []
    tables = [pq.read_table(p, columns=_COLUMNS) for p in parts]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return _Chunks(*([] for _ in range(11)))
    table = pa.concat_tables(tables).sort_by([("source_path", "ascending"), ("seq", "ascending"),
                                               ("chunk_id", "ascending")])
    col = {name: table.column(name).to_pylist() for name in _COLUMNS}
    return _Chunks(
        chunk_id=col["chunk_id"],
        source_path=[p or "" for p in col["source_path"]],
        source_type=[t or "unknown" for t in col["source_type"]],
        heading_path=[h or [] for h in col["heading_path"]],
        text=[t or "" for t in col["text"]],
        tags=[t or [] for t in col["tags"]],
        token_count=[t or 0 for t in col["token_count"]],
        word_count=[w or 0 for w in col["word_count"]],
        quality=[q or "unknown" for q in col["quality"]],
        omitted=[bool(o) for o in col["omitted"]],
        omit_reason=col["omit_reason"],
    )


def _read_failures(path: Path, metrics: dict) -> list[dict]:
    keys = ("source_path", "stage", "error_class", "message")
    if path.is_file():
        rows = pq.read_table(path).to_pylist()
    else:
        # Older runs, or ones where writing errors.parquet failed, still carry the list in metrics.json.
        rows = metrics.get("failures") or []
    return [{k: r.get(k) for k in keys} for r in rows]


def token_limit(metrics: dict, run_info: dict) -> tuple[int, str] | None:
    """The token limit to draw on the histogram and what it is, or None when the run does not record one.

    A limit stated in metrics.json is the effective (model-clamped) one; the configured `max_tokens` in run.json
    is only an upper bound on it, so it is labelled as such rather than passed off as the model's limit.
    """
    for where in (metrics, metrics.get("embedded_chunks") or {}):
        for key in ("token_limit", "model_token_limit", "max_seq_length"):
            if isinstance(where.get(key), int) and where[key] > 0:
                return where[key], f"token limit ({where[key]})"
    configured = ((run_info.get("config") or {}).get("chunking") or {}).get("max_tokens")
    if isinstance(configured, int) and configured > 0:
        return configured, f"configured max_tokens ({configured})"
    return None


# ---------------------------------------------------------------------------------------------- tables

def _stats(tokens: list[int], words: list[int]) -> dict:
    if not tokens:
        return {"tokens_mean": None, "tokens_median": None, "words_mean": None, "words_median": None}
    return {
        "tokens_mean": round(statistics.fmean(tokens), 1),
        "tokens_median": statistics.median(tokens),
        "words_mean": round(statistics.fmean(words), 1),
        "words_median": statistics.median(words),
    }


def _group(chunks: _Chunks, keys_of) -> dict[str, dict]:
    members: dict[str, list[int]] = defaultdict(list)
    for i in range(len(chunks)):
        for key in keys_of(i):
            members[key].append(i)
    out = {}
    for key, idx in sorted(members.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        omitted = sum(chunks.omitted[i] for i in idx)
        out[key] = {"chunks": len(idx), "embedded": len(idx) - omitted, "omitted": omitted,
                    **_stats([chunks.token_count[i] for i in idx], [chunks.word_count[i] for i in idx])}
    return out


def _reason(reason: str | None) -> str:
    # Reasons read "fragment: 2 words < 3"; the part before ':' is the stable category to count by.
    return (reason or "unspecified").split(":", 1)[0].strip() or "unspecified"


def build_breakdown(chunks: _Chunks) -> dict:
    """Counts and token/word statistics over all chunks (omitted ones included), by source type and structural tag.

    A chunk carries several tags (h2 and p and list...), so it counts once under each of them.
    """
    n = len(chunks)
    omitted = sum(chunks.omitted)
    quality = Counter(chunks.quality)
    quality_omitted = Counter(q for q, o in zip(chunks.quality, chunks.omitted) if o)
    order = [q for q in QUALITY_ORDER if q in quality] + sorted(set(quality) - set(QUALITY_ORDER))
    per_file = Counter(chunks.source_path)
    return {
        "scope": "All chunks in the run's Parquet, omitted ones included",
        "totals": {"chunks": n, "embedded": n - omitted, "omitted": omitted, "files": len(per_file),
                   "flagged": sum(1 for q, o in zip(chunks.quality, chunks.omitted) if q != "ok" or o),
                   **_stats(chunks.token_count, chunks.word_count)},
        "by_source_type": _group(chunks, lambda i: [chunks.source_type[i]]),
        "by_tag": _group(chunks, lambda i: chunks.tags[i] or [NO_TAG]),
        "by_quality": {q: {"chunks": quality[q], "embedded": quality[q] - quality_omitted[q],
                           "omitted": quality_omitted[q]} for q in order},
        "omitted_by_reason": dict(Counter(_reason(r) for r, o in zip(chunks.omit_reason, chunks.omitted) if o)
                                  .most_common()),
        "chunks_per_file": {"files": len(per_file), **_distribution(list(per_file.values()))},
    }


def _distribution(values: list[int]) -> dict:
    if not values:
        return {"min": None, "median": None, "mean": None, "max": None}
    return {"min": min(values), "median": statistics.median(values), "mean": round(statistics.fmean(values), 1),
            "max": max(values)}


def build_sample(chunks: _Chunks, sample_size: int, seed: int) -> list[dict]:
    """A seeded random sample of embedded chunks, in document order.

    Candidates are ordered by chunk_id before drawing, so the same seed picks the same chunks even when a
    re-run writes them into parts in a different order.
    """
    candidates = sorted((i for i in range(len(chunks)) if not chunks.omitted[i]), key=lambda i: chunks.chunk_id[i])
    picked = sorted(random.Random(seed).sample(candidates, min(max(sample_size, 0), len(candidates))))
    return [{"chunk_id": chunks.chunk_id[i], "source_path": chunks.source_path[i], "heading_path": chunks.heading_path[i],
             "quality": chunks.quality[i], "token_count": chunks.token_count[i], "text": chunks.text[i]}
            for i in picked]


def build_flagged(chunks: _Chunks) -> list[dict]:
    """Every chunk that is omitted or whose quality label is not 'ok', with the start of its text."""
    return [{"chunk_id": chunks.chunk_id[i], "source_path": chunks.source_path[i], "heading_path": chunks.heading_path[i],
             "quality": chunks.quality[i], "omitted": chunks.omitted[i], "omit_reason": chunks.omit_reason[i],
             "token_count": chunks.token_count[i], "word_count": chunks.word_count[i],
             "text_preview": chunks.text[i][:PREVIEW_CHARS]}
            for i in range(len(chunks)) if chunks.quality[i] != "ok" or chunks.omitted[i]]


def _write_text(path: Path, text: str, newline: bool = True) -> Path:
    path.write_text(text + ("\n" if newline else ""), encoding="utf-8")
    return path


def _write_flagged_csv(path: Path, flagged: list[dict]) -> Path:
    fields = ["chunk_id", "source_path", "heading_path", "quality", "omitted", "omit_reason", "token_count",
              "word_count", "text_preview"]
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for row in flagged:
            writer.writerow({**row, "heading_path": HEADING_SEP.join(row["heading_path"]),
                             "omit_reason": row["omit_reason"] or ""})
    return path


# ---------------------------------------------------------------------------------------------- plots

def _figure_png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)  # pyplot keeps every open figure alive; a long-lived process would leak them
    return buf.getvalue()


def _style(ax) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e0e0e0", linewidth=0.8)
    ax.set_axisbelow(True)


def _int_bins(values: list[int], extra: int | None = None, max_bins: int = 40) -> list[float]:
    # Integer-aligned edges so a bar never straddles two counts; wide ranges fall back to max_bins equal bins.
    lo = min(values)
    hi = max(values + ([extra] if extra else []))
    width = max(1, -(-(hi - lo + 1) // max_bins))
    return [lo - 0.5 + k * width for k in range((hi - lo) // width + 2)]


def _plot_tokens(chunks: _Chunks, limit: tuple[int, str] | None):
    by_type: dict[str, list[int]] = defaultdict(list)
    for t, o, st in zip(chunks.token_count, chunks.omitted, chunks.source_type):
        if not o:
            by_type[st].append(t)
    types = sorted(by_type, key=lambda k: -len(by_type[k])) or ["(no embedded chunks)"]
    everything = [t for v in by_type.values() for t in v] or [0]
    bins = _int_bins(everything, limit[0] if limit else None)
    # One panel per source type: a small Excel set would vanish under a large Markdown histogram if overlaid.
    fig, axes = plt.subplots(len(types), 1, figsize=(10, 1.2 + 2.6 * len(types)), sharex=True, squeeze=False)
    for k, (ax, st) in enumerate(zip(axes[:, 0], types)):
        values = by_type.get(st, [])
        ax.hist(values, bins=bins, color=_SOURCE_COLOURS[k % len(_SOURCE_COLOURS)], edgecolor="white", linewidth=0.5)
        ax.set_title(f"{st}: {len(values):,} embedded chunks", fontsize=12, loc="left")
        ax.set_ylabel("chunks", fontsize=11)
        ax.yaxis.get_major_locator().set_params(integer=True)
        if limit:
            ax.axvline(limit[0], color="#c62828", linestyle="--", linewidth=1.6, label=limit[1])
            ax.legend(fontsize=10, frameon=False, loc="upper right")
        _style(ax)
        ax.tick_params(labelsize=10)
    axes[-1, 0].set_xlabel("tokens per chunk", fontsize=11)
    fig.suptitle("Token count per embedded chunk, by source type", fontsize=14, fontweight="bold")
    fig.tight_layout()
    return _figure_png(fig)


def _plot_quality(breakdown: dict):
    labels = list(breakdown["by_quality"])
    embedded = [breakdown["by_quality"][q]["embedded"] for q in labels]
    omitted = [breakdown["by_quality"][q]["omitted"] for q in labels]
    colours = [_QUALITY_COLOURS.get(q, "#607d8b") for q in labels]
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.6 * len(labels)))
    y = list(range(len(labels)))
    ax.barh(y, embedded, color=colours, label="embedded")
    ax.barh(y, omitted, left=embedded, color=colours, alpha=0.35, hatch="//", edgecolor="white", label="omitted")
    top = max(e + o for e, o in zip(embedded, omitted))
    for yi, e, o in zip(y, embedded, omitted):
        note = f"{e + o:,}" + (f"  ({o:,} omitted)" if o else "")
        ax.text(e + o + top * 0.01, yi, note, va="center", fontsize=10)
    ax.set_yticks(y, labels, fontsize=11)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.25)
    ax.set_xlabel("chunks", fontsize=11)
    ax.set_title("Chunks per quality label", fontsize=14, fontweight="bold")
    # Neutral swatches: the bars' own colours encode the label, so a coloured legend would suggest a label.
    ax.legend(handles=[Patch(facecolor="#78909c", label="embedded"),
                       Patch(facecolor="#78909c", alpha=0.35, hatch="//", edgecolor="white", label="omitted")],
              fontsize=10, frameon=False, loc="lower right")
    _style(ax)
    ax.grid(axis="y", visible=False)
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.8)
    fig.tight_layout()
    return _figure_png(fig)


def _plot_chunks_per_file(chunks: _Chunks):
    counts = list(Counter(chunks.source_path).values())
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.hist(counts, bins=_int_bins(counts), color="#1f77b4", edgecolor="white", linewidth=0.5)
    ax.set_xlabel("chunks in the file", fontsize=11)
    ax.set_ylabel("source files", fontsize=11)
    ax.set_title(f"Chunks per source file ({len(counts):,} files, median {statistics.median(counts):g}, "
                 f"max {max(counts):,})", fontsize=14, fontweight="bold")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)
    _style(ax)
    fig.tight_layout()
    return _figure_png(fig)


# ---------------------------------------------------------------------------------------------- HTML

_CSS = """
:root { --ink: #1f2933; --muted: #616e7c; --line: #e4e7eb; --bg-alt: #f7f9fb; --accent: #1f5fa8; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff; font: 15px/1.5 -apple-system, BlinkMacSystemFont, "Segoe UI",
  Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 32px 28px 64px; }
header { border-bottom: 3px solid var(--accent); padding-bottom: 16px; margin-bottom: 8px; }
h1 { font-size: 26px; margin: 0 0 6px; }
h2 { font-size: 20px; margin: 40px 0 12px; padding-bottom: 6px; border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 24px 0 8px; }
.meta { color: var(--muted); margin: 0; }
.meta code, td code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px;
  background: var(--bg-alt); padding: 1px 5px; border-radius: 3px; overflow-wrap: anywhere; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(140px, 1fr)); gap: 12px; margin: 20px 0 4px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; background: var(--bg-alt); }
.card .n { font-size: 24px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .k { color: var(--muted); font-size: 13px; }
.card.bad .n { color: #c62828; }
nav { font-size: 14px; margin-top: 14px; }
nav a { color: var(--accent); text-decoration: none; margin-right: 14px; }
.note { color: var(--muted); font-size: 14px; }
.warn { background: #fff8e1; border-left: 4px solid #f9a825; padding: 8px 12px; margin: 12px 0; }
figure { margin: 16px 0 28px; }
figure img { width: 100%; max-width: 1000px; height: auto; border: 1px solid var(--line); border-radius: 4px; }
figcaption { color: var(--muted); font-size: 14px; margin-top: 4px; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 16px; font-size: 14px; }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--bg-alt); font-weight: 600; border-bottom: 2px solid var(--line); }
tbody tr:nth-child(even) { background: #fbfcfd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { min-width: 300px; width: 42%; }
td.reason { max-width: 200px; }
.clip { white-space: pre-wrap; overflow-wrap: anywhere; max-height: 7.5em; overflow: auto; }
td.path { min-width: 180px; overflow-wrap: anywhere; }
.tables { display: grid; grid-template-columns: 1fr 1fr; gap: 0 28px; }
@media (max-width: 800px) { .tables { grid-template-columns: 1fr; } }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px; color: #fff; white-space: nowrap; }
.badge.light { color: var(--ink); }
.sample { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; margin: 0 0 12px; }
.sample .where { font-size: 13px; color: var(--muted); margin-bottom: 6px; }
.sample .body { white-space: pre-wrap; overflow-wrap: anywhere; max-height: 14em; overflow: auto; font-size: 14px; }
footer { margin-top: 48px; color: var(--muted); font-size: 13px; }
"""


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _num(value) -> str:
    if value is None:
        return "–"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}".rstrip("0").rstrip(".")


def _badge(quality: str) -> str:
    # White on the amber of `short` is unreadable; dark text keeps the plot's colour and the contrast.
    light = " light" if quality == "short" else ""
    return f'<span class="badge{light}" style="background:{_QUALITY_COLOURS.get(quality, "#607d8b")}">{_e(quality)}</span>'


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset(), classes: dict[int, str] = None) -> str:
    """Cells in `rows` must already be escaped HTML; headers are escaped here."""
    classes = dict(classes or {}) | {i: "num" for i in numeric}
    head = "".join(f'<th class="{classes[i]}">{_e(h)}</th>' if i in classes else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="{classes[i]}">{c}</td>' if i in classes else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _group_table(title: str, groups: dict[str, dict]) -> str:
    rows = [[f"<code>{_e(k)}</code>", _num(g["chunks"]), _num(g["embedded"]), _num(g["omitted"]), _num(g["tokens_mean"]),
             _num(g["tokens_median"]), _num(g["words_mean"]), _num(g["words_median"])] for k, g in groups.items()]
    return _table([title, "chunks", "embedded", "omitted", "tokens mean", "tokens median", "words mean",
                   "words median"], rows, numeric=set(range(1, 8)))


def _cards(items: list[tuple[str, object, bool]]) -> str:
    return '<div class="cards">' + "".join(
        f'<div class="card{" bad" if bad else ""}"><div class="n">{_num(v) if v is not None else "–"}</div>'
        f'<div class="k">{_e(k)}</div></div>' for k, v, bad in items) + "</div>"


def _index_section(metrics: dict) -> list[str]:
    """Index health measured in the database after the load, and the quality gates' verdicts."""
    out = ['<h2 id="index">Index health and quality gates</h2>']
    index = metrics.get("index")
    if not index:
        return out + ['<p class="note">Not measured: this run changed nothing in the collection.</p>']
    tokens = index.get("tokens") or {}
    rows = [
        ["vectors", _num(index.get("vectors"))],
        ["empty vector rate", f"{index.get('empty_vector_rate', 0):.2%}"],
        ["duplicate-neighbour rate (cosine > " + _e(index.get("near_duplicate_cosine")) + ")",
         "-" if index.get("duplicate_neighbour_rate") is None else f"{index['duplicate_neighbour_rate']:.2%}"
         + f" ({_e(index.get('method'))})"],
        ["tokens: median / p95 / max", f"{_e(tokens.get('median'))} / {_e(tokens.get('p95'))} / {_e(tokens.get('max'))}"],
        ["near-zero token share", f"{index.get('near_zero_share', 0):.2%}"],
        ["at-limit token share", "-" if index.get("at_limit_share") is None else f"{index['at_limit_share']:.2%}"],
    ]
    out.append(_table(["metric", "value"], rows, numeric={1}))
    for warning in index.get("warnings") or []:
        out.append(f'<p class="warn">{_e(warning)}</p>')
    gates = metrics.get("gates") or []
    out.append(''.join(f'<p class="warn">Gate failed: {_e(g["message"])}</p>' for g in gates)
               or '<p class="note">Every configured quality gate passed.</p>')
    return out


def _discovery_section(metrics: dict) -> list[str]:
    """Local entries discovery passed over (metrics.json `discovery`, from the plan): links whose target is
    outside the input root, link loops, broken links. None of them was read, so nothing of theirs is in
    the index; a person decides whether a link should have been a copy or `input.follow_external_links`."""
    discovery = metrics.get("discovery")
    skipped = (discovery or {}).get("skipped_links") or []
    out = [f'<h2 id="discovery">Skipped in discovery ({_num(len(skipped))})</h2>']
    if not skipped:
        return out + ['<p class="note">' + ("Nothing was skipped." if discovery is not None
                                            else "Not recorded by this run.") + "</p>"]
    by_reason = Counter(s.get("reason") for s in skipped)
    out.append('<p class="note">' + ", ".join(f"{_e(r)} {_num(n)}" for r, n in sorted(by_reason.items()))
               + ". These entries were not read; every one is listed in <code>metrics.json</code> "
               "(<code>discovery.skipped_links</code>).</p>")
    shown = skipped[:HTML_FLAGGED_ROWS]
    if len(skipped) > len(shown):
        out.append(f'<p class="note">Showing the first {len(shown)} of {len(skipped):,}.</p>')
    out.append(_table(["path", "reason", "target", "root"],
                      [[f"<code>{_e(s.get('path'))}</code>", _e(s.get("reason")),
                        f"<code>{_e(s.get('target') or '?')}</code>", f"<code>{_e(s.get('root'))}</code>"]
                       for s in shown], classes={0: "path", 2: "path"}))
    return out


def render_html(run_dir: Path, run_info: dict, metrics: dict, breakdown: dict, failures: list[dict], flagged: list[dict],
                sample: list[dict], plots: dict[str, bytes], limit: tuple[int, str] | None, sample_size: int,
                seed: int) -> str:
    totals = breakdown["totals"]
    files = metrics.get("files") or {}
    run_id = run_info.get("run_id") or run_dir.name
    failed_files = files.get("failed", len(failures)) if files else len(failures)
    out: list[str] = []

    out.append("<header>")
    out.append(f"<h1>QA report · run {_e(run_id)}</h1>")
    out.append(f'<p class="meta">collection <code>{_e(run_info.get("collection") or "unknown")}</code> · '
               f'fingerprint <code>{_e(run_info.get("fingerprint") or "unknown")}</code></p>')
    if run_info.get("plan"):
        plan = ", ".join(f"{_e(k)} {_num(v)}" for k, v in run_info["plan"].items())
        out.append(f'<p class="meta">plan: {plan}</p>')
    out.append(_cards([
        ("files done", files.get("done") if files else totals["files"], False),
        ("files failed", failed_files, bool(failed_files)),
        ("chunks", totals["chunks"], False),
        ("embedded", totals["embedded"], False),
        ("omitted", totals["omitted"], False),
        ("flagged", totals["flagged"], False),
    ]))
    if not files:
        out.append('<p class="note">No qa/metrics.json: "files done" counts the files that have chunks.</p>')
    out.append('<nav><a href="#plots">Plots</a><a href="#quality">Quality</a><a href="#breakdown">Breakdown</a>'
               '<a href="#index">Index &amp; gates</a><a href="#discovery">Skipped in discovery</a>'
               '<a href="#failed">Failed files</a>'
               '<a href="#flagged">Flagged chunks</a><a href="#sample">Sample</a></nav>')
    out.append("</header>")

    reported = (metrics.get("chunks") or {}).get("total")
    if isinstance(reported, int) and reported != totals["chunks"]:
        out.append(f'<p class="warn">metrics.json reports {_num(reported)} chunks but the Parquet parts hold '
                   f'{_num(totals["chunks"])}: parts may be missing, or the run was resumed.</p>')
    if not totals["chunks"]:
        out.append('<p class="warn">This run produced no chunks: there is nothing to plot, break down or sample.</p>')

    out.append('<h2 id="plots">Plots</h2>')
    if plots:
        captions = {
            "tokens_by_source_type.png": "Token counts of embedded chunks, one panel per source type"
                                         + (f"; dashed line: {limit[1]}." if limit else "; the run records no token limit."),
            "quality_labels.png": "Every chunk by quality label; the hatched part of a bar was omitted (not embedded).",
            "chunks_per_file.png": "How many chunks each source file produced.",
        }
        for name, png in plots.items():
            uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            out.append(f'<figure><img src="{uri}" alt="{_e(captions[name])}">'
                       f"<figcaption>{_e(captions[name])}</figcaption></figure>")
    else:
        out.append('<p class="note">Plots skipped: the run has no chunks.</p>')

    out.append('<h2 id="quality">Quality labels</h2><div class="tables"><div><h3 style="margin-top:0">By label</h3>')
    n = totals["chunks"] or 1
    out.append(_table(["label", "chunks", "share", "embedded", "omitted"],
                      [[_badge(q), _num(g["chunks"]), f"{g['chunks'] / n:.1%}", _num(g["embedded"]), _num(g["omitted"])]
                       for q, g in breakdown["by_quality"].items()], numeric={1, 2, 3, 4})
               if breakdown["by_quality"] else '<p class="note">No chunks.</p>')
    out.append("</div><div><h3 style=\"margin-top:0\">Omitted, by reason</h3>")
    out.append(_table(["reason", "chunks"], [[_e(r), _num(c)] for r, c in breakdown["omitted_by_reason"].items()],
                      numeric={1}) if breakdown["omitted_by_reason"] else '<p class="note">Nothing was omitted.</p>')
    out.append("</div></div>")

    out.append('<h2 id="breakdown">Breakdown</h2>')
    out.append(f'<p class="note">{_e(breakdown["scope"])}. A chunk counts once under each of its structural tags.</p>')
    out.append("<h3>By source type</h3>")
    out.append(_group_table("source type", breakdown["by_source_type"]) if breakdown["by_source_type"]
               else '<p class="note">No chunks.</p>')
    out.append("<h3>By structural tag</h3>")
    out.append(_group_table("tag", breakdown["by_tag"]) if breakdown["by_tag"] else '<p class="note">No chunks.</p>')

    out.extend(_index_section(metrics))
    out.extend(_discovery_section(metrics))

    out.append(f'<h2 id="failed">Failed files ({_num(len(failures))})</h2>')
    if failures:
        out.append(_table(["source path", "stage", "error", "message"],
                          [[_e(f["source_path"]), _e(f["stage"]), f"<code>{_e(f['error_class'])}</code>",
                            f'<div class="clip">{_e(f["message"])}</div>'] for f in failures],
                          classes={0: "path", 3: "text"}))
    else:
        out.append('<p class="note">No file failed.</p>')

    out.append(f'<h2 id="flagged">Flagged chunks ({_num(len(flagged))})</h2>')
    if flagged:
        shown = flagged[:HTML_FLAGGED_ROWS]
        note = (f"Showing the first {len(shown)} of {len(flagged):,} flagged chunks" if len(flagged) > len(shown)
                else f"All {len(flagged):,} flagged chunks")
        out.append(f'<p class="note">{_e(note)} (quality not <code>ok</code>, or omitted); every one is in '
                   "<code>flagged.csv</code> and <code>flagged.json</code>. Text is cut at "
                   f"{PREVIEW_CHARS} characters.</p>")
        out.append(_table(["source / heading", "quality", "omit reason", "tokens", "words", "text"],
                          [[f"{_e(f['source_path'])}<br><span class=\"note\">{_e(HEADING_SEP.join(f['heading_path']))}</span>",
                            _badge(f["quality"]) + (" <span class=\"note\">omitted</span>" if f["omitted"] else ""),
                            _e(f["omit_reason"] or ""), _num(f["token_count"]), _num(f["word_count"]),
                            f'<div class="clip">{_e(f["text_preview"])}</div>'] for f in shown],
                          numeric={3, 4}, classes={0: "path", 2: "reason", 5: "text"}))
    else:
        out.append('<p class="note">No chunk was flagged.</p>')

    out.append(f'<h2 id="sample">Sample of embedded chunks ({_num(len(sample))})</h2>')
    if sample:
        out.append(f'<p class="note">Drawn at random with seed {seed} (up to {sample_size}); also in '
                   "<code>sample.jsonl</code>.</p>")
        for s in sample:
            out.append(f'<div class="sample"><div class="where">{_e(s["source_path"])} · '
                       f'{_e(HEADING_SEP.join(s["heading_path"]))} · {_badge(s["quality"])} · '
                       f'{_num(s["token_count"])} tokens</div><div class="body">{_e(s["text"])}</div></div>')
    else:
        out.append('<p class="note">No embedded chunks to sample.</p>')

    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out.append(f"<footer>Generated {_e(generated)} from <code>{_e(run_dir)}</code>.</footer>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>QA report · {_e(run_id)}</title><style>{_CSS}</style></head><body><main>"
            + "\n".join(out) + "</main></body></html>")
