"""`corpusmill report`: turn one finished run directory into QA artifacts a person can review.

Reads only what the run left on disk (chunk Parquet parts, errors.parquet, run.json, qa/metrics.json),
so a report can be rebuilt for any past run without the database or Ray, and writes next to
metrics.json under `qa/`: breakdown.json, sample.jsonl, flagged.json/.csv, three PNG plots and a
single self-contained report.html (rendered from templates/report.html.j2, which escapes everything it shows).
Over 400 lines on purpose: one pass over the parts feeds every artifact, so the scan and its outputs
stay together.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import heapq
import io
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # report machines have no display; must precede the pyplot import

import matplotlib.pyplot as plt
import pyarrow.parquet as pq
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from matplotlib.patches import Patch

from jobs.checks.distribution import distribution, length_summary

# The embedding column is left out: the report never needs vectors, and on a large run they dwarf the rest.
_COLUMNS = ["chunk_id", "source_path", "source_type", "heading_path", "text", "seq", "tags",
            "token_count", "word_count", "quality", "omitted", "omit_reason"]
QUALITY_ORDER = ("ok", "short", "fragment", "too_long", "context_dead")
HEADING_SEP = " › "
PREVIEW_CHARS = 300
HTML_FLAGGED_ROWS = 50
_BATCH_ROWS = 10_000  # rows of a part read at a time
NO_TAG = "(none)"

_QUALITY_COLOURS = {"ok": "#2e7d32", "short": "#f9a825", "fragment": "#ef6c00", "too_long": "#6a1b9a",
                    "context_dead": "#c62828"}
_SOURCE_COLOURS = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]


@dataclass
class _Tally:
    """Chunks of one group: how many, how many omitted, and their tokens and words tallied (value -> chunks)."""

    chunks: int = 0
    omitted: int = 0
    tokens: Counter = field(default_factory=Counter)
    words: Counter = field(default_factory=Counter)

    def add(self, tokens: int, words: int, omitted: bool) -> None:
        self.chunks += 1
        self.omitted += omitted
        self.tokens[tokens] += 1
        self.words[words] += 1

    def summary(self) -> dict:
        return {"chunks": self.chunks, "embedded": self.chunks - self.omitted, "omitted": self.omitted,
                **length_summary(self.tokens, self.words)}


@dataclass
class _Scan:
    """What the report needs of a run's chunks, gathered in one pass over its Parquet, a batch at a time:
    tallies whose size follows the distinct values (token counts, tags, files), the sample (a bounded
    heap) and the flagged chunks with the start of their text — never the run's texts."""

    sample_size: int
    seed: int
    totals: _Tally = field(default_factory=_Tally)
    quality: Counter = field(default_factory=Counter)
    quality_omitted: Counter = field(default_factory=Counter)
    per_file: Counter = field(default_factory=Counter)
    by_source_type: dict = field(default_factory=lambda: defaultdict(_Tally))
    by_tag: dict = field(default_factory=lambda: defaultdict(_Tally))
    omit_reasons: Counter = field(default_factory=Counter)
    embedded_tokens: dict = field(default_factory=lambda: defaultdict(Counter))  # source type -> token tally
    flagged: list = field(default_factory=list)
    _heap: list = field(default_factory=list)  # (-draw, chunk_id, row): the sample_size smallest draws kept

    def __len__(self) -> int:
        return self.totals.chunks

    def add(self, r: dict) -> None:
        path, st = r["source_path"] or "", r["source_type"] or "unknown"
        tokens, words, quality, omitted = r["token_count"] or 0, r["word_count"] or 0, r["quality"] or "unknown", \
            bool(r["omitted"])
        self.totals.add(tokens, words, omitted)
        self.quality[quality] += 1
        self.quality_omitted[quality] += omitted
        self.per_file[path] += 1
        self.by_source_type[st].add(tokens, words, omitted)
        for tag in r["tags"] or [NO_TAG]:
            self.by_tag[tag].add(tokens, words, omitted)
        if omitted:
            self.omit_reasons[_reason(r["omit_reason"])] += 1
        else:
            self.embedded_tokens[st][tokens] += 1
            self._draw(r, path, tokens, quality)
        if quality != "ok" or omitted:
            self.flagged.append({"chunk_id": r["chunk_id"], "source_path": path, "heading_path": r["heading_path"] or [],
                                 "quality": quality, "omitted": omitted, "omit_reason": r["omit_reason"],
                                 "token_count": tokens, "word_count": words,
                                 "text_preview": (r["text"] or "")[:PREVIEW_CHARS], "_seq": r["seq"]})

    def _draw(self, r: dict, path: str, tokens: int, quality: str) -> None:
        """A seeded draw per chunk, from its id alone: the same seed samples the same chunks whatever order
        the parts hold them in, and only sample_size of them are ever held."""
        if self.sample_size <= 0:
            return
        digest = hashlib.blake2b(f"{self.seed}:{r['chunk_id']}".encode(), digest_size=8).digest()
        item = (-int.from_bytes(digest, "big"), r["chunk_id"],
                {"chunk_id": r["chunk_id"], "source_path": path, "heading_path": r["heading_path"] or [],
                 "quality": quality, "token_count": tokens, "text": r["text"] or "", "_seq": r["seq"]})
        if len(self._heap) < self.sample_size:
            heapq.heappush(self._heap, item)
        elif item[:2] > self._heap[0][:2]:
            heapq.heapreplace(self._heap, item)

    def sample(self) -> list[dict]:
        return _in_document_order([row for _, _, row in self._heap])


def _in_document_order(rows: list[dict]) -> list[dict]:
    ordered = sorted(rows, key=lambda r: (r["source_path"], r["_seq"] if r["_seq"] is not None else -1, r["chunk_id"]))
    return [{k: v for k, v in r.items() if k != "_seq"} for r in ordered]


def write_report(run_dir: Path, sample_size: int = 20, seed: int = 0) -> dict[str, Path]:
    """Write the QA artifacts for `run_dir` under `run_dir/qa` and return name → path of each file written.

    Plots are skipped (and the HTML says so) when the run has no chunks; everything else is always written.
    """
    run_dir = Path(run_dir)
    qa_dir = run_dir / "qa"
    qa_dir.mkdir(parents=True, exist_ok=True)
    run_info = _read_json(run_dir / "run.json")
    metrics = _read_json(qa_dir / "metrics.json")
    failures = _read_failures(run_dir / "errors.parquet", metrics)
    chunks = _scan(run_dir / "chunks", sample_size, seed, {f["source_path"] for f in failures})

    breakdown = build_breakdown(chunks)
    sample = chunks.sample()
    flagged = _in_document_order(chunks.flagged)
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


def _scan(chunks_dir: Path, sample_size: int, seed: int, failed: set[str]) -> _Scan:
    """The chunks the database holds from this run, as `load` would commit them again: a document's rows
    from the last part that holds it (a resumed run or a retried task writes a document again), each
    chunk once (its last row), and none of a document the run recorded `failed` (its part was written
    before the database refused it)."""
    # Named parts only: a run killed mid-write can leave a `.parquet.tmp` that a whole-directory read would pick up.
    parts = sorted(chunks_dir.glob("part-*.parquet")) if chunks_dir.is_dir() else []
    last: dict[str | None, int] = {}  # source_path -> the last part holding the document
    for i, p in enumerate(parts):
        last.update((path, i) for path in pq.read_table(p, columns=["source_path"]).column(0).unique().to_pylist())
    scan = _Scan(sample_size, seed)
    for i, p in enumerate(parts):
        ids = pq.read_table(p, columns=["source_path", "chunk_id"])
        rows = {(path, chunk): j for j, (path, chunk) in enumerate(zip(ids.column(0).to_pylist(), ids.column(1).to_pylist()))
                if last[path] == i and path not in failed}
        keep, start = set(rows.values()), 0
        for batch in pq.ParquetFile(p).iter_batches(batch_size=_BATCH_ROWS, columns=_COLUMNS):
            for j, r in enumerate(batch.to_pylist(), start):
                if j in keep:
                    scan.add(r)
            start += batch.num_rows
    return scan


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

def _groups(tallies: dict) -> dict[str, dict]:
    return {key: t.summary() for key, t in sorted(tallies.items(), key=lambda kv: (-kv[1].chunks, kv[0]))}


def _reason(reason: str | None) -> str:
    # Reasons read "fragment: 2 words < 3"; the part before ':' is the stable category to count by.
    return (reason or "unspecified").split(":", 1)[0].strip() or "unspecified"


def build_breakdown(chunks: _Scan) -> dict:
    """Counts and token/word statistics over all chunks (omitted ones included), by source type and structural tag.

    A chunk carries several tags (h2 and p and list...), so it counts once under each of them.
    """
    quality, quality_omitted = chunks.quality, chunks.quality_omitted
    order = [q for q in QUALITY_ORDER if q in quality] + sorted(set(quality) - set(QUALITY_ORDER))
    totals = chunks.totals.summary()
    return {
        "scope": ("The chunks the run committed, omitted ones included: each once, in its document's latest "
                  "version, none of a document recorded failed"),
        "totals": {"chunks": totals["chunks"], "embedded": totals["embedded"], "omitted": totals["omitted"],
                   "files": len(chunks.per_file), "flagged": len(chunks.flagged),
                   **length_summary(chunks.totals.tokens, chunks.totals.words)},
        "by_source_type": _groups(chunks.by_source_type),
        "by_tag": _groups(chunks.by_tag),
        "by_quality": {q: {"chunks": quality[q], "embedded": quality[q] - quality_omitted[q],
                           "omitted": quality_omitted[q]} for q in order},
        "omitted_by_reason": dict(chunks.omit_reasons.most_common()),
        "chunks_per_file": {"files": len(chunks.per_file), **distribution(list(chunks.per_file.values()))},
    }


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


def _plot_tokens(chunks: _Scan, limit: tuple[int, str] | None):
    by_type = {st: tally for st, tally in chunks.embedded_tokens.items() if tally}
    types = sorted(by_type, key=lambda k: -sum(by_type[k].values())) or ["(no embedded chunks)"]
    everything = [t for tally in by_type.values() for t in tally] or [0]
    bins = _int_bins(everything, limit[0] if limit else None)
    # One panel per source type: a small Excel set would vanish under a large Markdown histogram if overlaid.
    fig, axes = plt.subplots(len(types), 1, figsize=(10, 1.2 + 2.6 * len(types)), sharex=True, squeeze=False)
    for k, (ax, st) in enumerate(zip(axes[:, 0], types)):
        tally = by_type.get(st, Counter())
        ax.hist(list(tally), bins=bins, weights=list(tally.values()), color=_SOURCE_COLOURS[k % len(_SOURCE_COLOURS)],
                edgecolor="white", linewidth=0.5)
        ax.set_title(f"{st}: {sum(tally.values()):,} embedded chunks", fontsize=12, loc="left")
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


def _plot_chunks_per_file(chunks: _Scan):
    counts = list(chunks.per_file.values())
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

def _num(value) -> str:
    if value is None:
        return "–"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.1f}".rstrip("0").rstrip(".")


def _text(value) -> str:
    return "" if value is None else str(value)


# autoescape=True rather than select_autoescape(): the template is HTML but named .j2. Every value handed to it is
# plain data (chunk text, file names, error messages), escaped there and nowhere else.
_ENV = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True,
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                   # metrics.json and run.json fields may be null; they print as nothing, never as "None".
                   finalize=lambda value: "" if value is None else value)
_ENV.filters["num"] = _num
_ENV.filters["pct"] = lambda value, digits=2: f"{value:.{digits}%}"


def _shared(shared: dict | None) -> str:
    if not shared:
        return "-"
    return (f"{shared['copies']:,} copies of {shared['texts']:,} texts in {shared['documents']:,} documents"
            + (f"; {shared['whole_copies']:,} documents all copy" if shared.get("whole_copies") else ""))


def _index_rows(index: dict) -> list[tuple[str, str]]:
    """Index health measured in the database after the load, as (metric, value) text."""
    tokens = index.get("tokens") or {}
    dup = index.get("duplicate_neighbour_rate")
    # A large collection's figures come from a bounded sample (jobs/checks/index_metrics.py): say so.
    rows = (index.get("sampled") or {}).get("rows")
    of = f" (sample of {rows:,} chunks)" if rows else ""
    probes = (index.get("sampled") or {}).get("duplicate_probes")
    return [
        ("vectors", _num(index.get("vectors"))),
        ("empty vector rate" + of, f"{index.get('empty_vector_rate', 0):.2%}"),
        (f"duplicate-neighbour rate (cosine > {_text(index.get('near_duplicate_cosine'))})"
         + (f" (sample of {probes:,} chunks)" if probes else ""),
         "-" if dup is None else f"{dup:.2%} ({_text(index.get('method'))})"),
        ("tokens: median / p95 / max" + of, " / ".join(_text(tokens.get(k)) for k in ("median", "p95", "max"))),
        ("near-zero token share" + of, f"{index.get('near_zero_share', 0):.2%}"),
        ("at-limit token share" + of, "-" if index.get("at_limit_share") is None else f"{index['at_limit_share']:.2%}"),
        ("text shared across documents (stored once)", _shared(index.get("shared_text"))),
    ]


def vector_cards(chunks: dict) -> list[tuple[str, int, bool]]:
    """The run's vectors computed and reused (#20), where its metrics.json counts them."""
    if "vectors_reused" not in chunks:
        return []
    return [("vectors computed", chunks["vectors_computed"], False), ("vectors reused", chunks["vectors_reused"], False)]


def render_html(run_dir: Path, run_info: dict, metrics: dict, breakdown: dict, failures: list[dict], flagged: list[dict],
                sample: list[dict], plots: dict[str, bytes], limit: tuple[int, str] | None, sample_size: int,
                seed: int) -> str:
    totals = breakdown["totals"]
    files = metrics.get("files") or {}
    failed_files = files.get("failed", len(failures)) if files else len(failures)
    reported = (metrics.get("chunks") or {}).get("total")
    index = metrics.get("index")
    discovery = metrics.get("discovery")
    # Entries discovery passed over (from the plan); normalised so a key an older run did not write reads as empty.
    skipped = [{k: s.get(k) for k in ("path", "reason", "target", "root")}
               for s in (discovery or {}).get("skipped_links") or []]
    captions = {
        "tokens_by_source_type.png": "Token counts of embedded chunks, one panel per source type"
                                     + (f"; dashed line: {limit[1]}." if limit else "; the run records no token limit."),
        "quality_labels.png": "Every chunk by quality label; the hatched part of a bar was omitted (not embedded).",
        "chunks_per_file.png": "How many chunks each source file produced.",
    }
    return _ENV.get_template("report.html.j2").render(
        run_id=run_info.get("run_id") or run_dir.name,
        collection=run_info.get("collection") or "unknown",
        fingerprint=run_info.get("fingerprint") or "unknown",
        plan=run_info.get("plan") or {},
        cards=[("files done", files.get("done") if files else totals["files"], False),
               ("files failed", failed_files, bool(failed_files)),
               ("chunks", totals["chunks"], False), ("embedded", totals["embedded"], False),
               *vector_cards(metrics.get("chunks") or {}),
               ("omitted", totals["omitted"], False), ("flagged", totals["flagged"], False)],
        has_metrics_files=bool(files),
        reported_chunks=reported if isinstance(reported, int) and reported != totals["chunks"] else None,
        totals=totals,
        figures=[{"uri": "data:image/png;base64," + base64.b64encode(png).decode("ascii"), "caption": captions[name]}
                 for name, png in plots.items()],
        breakdown=breakdown,
        quality_colours=_QUALITY_COLOURS,
        index_rows=_index_rows(index) if index else None,
        index_warnings=(index or {}).get("warnings") or [],
        gate_failures=[g["message"] for g in metrics.get("gates") or []],
        skipped=skipped,
        skipped_by_reason=sorted(Counter(s["reason"] for s in skipped).items(), key=lambda kv: _text(kv[0])),
        discovery_recorded=discovery is not None,
        failures=failures,
        flagged=flagged,
        sample=sample,
        row_cap=HTML_FLAGGED_ROWS,
        preview_chars=PREVIEW_CHARS,
        heading_sep=HEADING_SEP,
        seed=seed,
        sample_size=sample_size,
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        run_dir=str(run_dir),
    )
