"""Excel workbooks into one chunk per row, each row carrying its column headers.

A number without its header means nothing in a prompt, so a row is rendered as
`Header: value; Header: value` for its non-empty cells, prefixed by `file › sheet`. Values are shown
the way the workbook formats them (percent, dates, thousands), not as raw floats. Hidden and chart
sheets are skipped. The header row is found, not assumed: the first row, among the first
`header_scan_rows`, that is mostly text and about as wide as the table below it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import zipfile
from pathlib import Path

from jobs.chunk.ids import chunk_id, sha256_text
from jobs.chunk.quality import label, word_count
from jobs.chunk.tokens import token_counter
from jobs.config import ExcelConfig, QualityConfig
from jobs.rows import doc_marker, error_row

SEPARATOR = " › "


def require_defusedxml() -> None:
    """openpyxl parses untrusted XML; it uses defusedxml when installed, so insist on it."""
    try:
        import defusedxml  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the package depends on it
        raise RuntimeError("defusedxml must be installed to read workbooks safely (pip install defusedxml)") from exc


def format_value(value, number_format: str | None = None) -> str:
    if value is None:
        return ""
    fmt = number_format or "General"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time(0) else value.isoformat(sep=" ", timespec="minutes")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (int, float)):
        if "%" in fmt:
            decimals = len(fmt.split(".")[1].rstrip("%")) if "." in fmt else 0
            return f"{value * 100:.{decimals}f}%"
        if "," in fmt or "#,##" in fmt:
            decimals = len(fmt.split(".")[1].split(";")[0].strip("_)")) if "." in fmt else 0
            return f"{value:,.{min(decimals, 6)}f}"
        if isinstance(value, float):
            return f"{value:.10g}" if not value.is_integer() else str(int(value))
        return str(value)
    return " ".join(str(value).split())


def _is_texty(v) -> bool:
    return isinstance(v, str) and any(ch.isalpha() for ch in v)


def detect_header(rows: list[list], scan: int) -> int | None:
    """Index of the header row among `rows` (cell values), or None if no row looks like one."""
    window = rows[:scan]
    widths = [sum(1 for v in r if v not in (None, "")) for r in window]
    if not widths or max(widths) < 2:
        return None
    for i, row in enumerate(window):
        filled = [v for v in row if v not in (None, "")]
        if len(filled) >= max(2, 0.6 * max(widths)) and sum(_is_texty(v) for v in filled) >= 0.6 * len(filled):
            return i
    return None


def read_workbook(path: str, cfg: ExcelConfig):
    """Yield (sheet name, header labels, excel row number, [(value, number_format)]) for every data row."""
    import openpyxl

    require_defusedxml()
    size = Path(path).stat().st_size
    if size > cfg.max_file_bytes:
        raise ValueError(f"workbook is {size} bytes, over excel.max_file_bytes={cfg.max_file_bytes}")
    if not zipfile.is_zipfile(path):
        raise ValueError("not an .xlsx/.xlsm file (not a zip archive); re-save it from Excel as .xlsx")
    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        for ws in wb.worksheets:
            if getattr(ws, "sheet_state", "visible") != "visible" or not hasattr(ws, "iter_rows"):
                continue  # hidden sheets and chart sheets hold no rows to retrieve
            rows = ws.iter_rows()
            # Stream: only the rows scanned for the header are held in memory.
            head = [_cells(r) for r in itertools.islice(rows, cfg.header_scan_rows)]
            h = detect_header([[v for v, _ in r] for r in head], cfg.header_scan_rows)
            headers = [format_value(v) for v, _ in head[h]] if h is not None else []
            first = h + 1 if h is not None else 0
            for index, cells in enumerate(itertools.chain(head[first:], (_cells(r) for r in rows)), start=first):
                yield ws.title, headers, index + 1, cells
    finally:
        wb.close()


def _cells(row) -> list[tuple]:
    # Read-only mode yields EmptyCell objects for gaps; they have a value but no number_format.
    return [(getattr(c, "value", None), getattr(c, "number_format", None)) for c in row]


def render_row(headers: list[str], cells: list[tuple]) -> tuple[str, int]:
    """(`Header: value; …` text, number of non-empty fields)."""
    parts = []
    for i, (value, fmt) in enumerate(cells):
        shown = format_value(value, fmt)
        if not shown:
            continue
        header = headers[i] if i < len(headers) and headers[i] else f"Column {i + 1}"
        parts.append(f"{header}: {shown}")
    return "; ".join(parts), len(parts)


def excel_to_chunks(rows: list[dict], *, excel: ExcelConfig, quality: QualityConfig,
                    embedding_model: str) -> list[dict]:
    """Stage: work rows (workbooks) -> chunk rows, one per data row, or one error row per workbook."""
    out = []
    for work in rows:
        try:
            out.extend(_workbook_chunks(work, excel, quality, embedding_model))
        except Exception as exc:
            out.append(error_row(work, "parse_excel", exc))
    return out


def _workbook_chunks(work: dict, excel: ExcelConfig, quality: QualityConfig, embedding_model: str) -> list[dict]:
    counter = token_counter(embedding_model)
    file_label = Path(work["source_path"]).name
    drafts = []
    for sheet, headers, row_no, cells in read_workbook(work["abs_path"], excel):
        body, fields = render_row(headers, cells)
        if fields == 0:
            continue  # blank rows are layout, not data
        heading_path = [file_label, sheet]
        crumb = SEPARATOR.join(heading_path)
        drafts.append((sheet, row_no, heading_path, crumb, body, fields))
    if not drafts:
        return [doc_marker(work, "empty")]
    embed_texts = [f"{crumb}\n\n{body}" for _, _, _, crumb, body, _ in drafts]
    token_counts = counter.count(embed_texts)
    chunks = []
    for seq, ((sheet, row_no, path, crumb, body, fields), embed_text, tokens) in enumerate(
        zip(drafts, embed_texts, token_counts)
    ):
        words = word_count(body)
        q, omitted, reason = label(body, words, tokens, counter.limit, "excel", quality)
        if not omitted and fields < quality.min_fields:
            q, omitted, reason = "fragment", True, f"fragment: {fields} non-empty field(s) < {quality.min_fields}"
        text_sha = sha256_text(body)
        chunks.append({
            "chunk_id": chunk_id(work["collection"], f"{work['source_path']}##{sheet}#{row_no}", text_sha,
                                 work["pipeline_fingerprint"]),
            "collection": work["collection"],
            "doc_id": work["doc_id"],
            "source_path": work["source_path"],
            "source_type": "excel",
            "heading_path": path,
            "breadcrumb": crumb,
            "text": body,
            "embed_text": embed_text,
            "seq": seq,
            "sheet": sheet,
            "row": row_no,
            "tags": ["row"],
            "token_count": tokens,
            "word_count": words,
            "quality": q,
            "omitted": omitted,
            "omit_reason": reason,
            "text_sha256": text_sha,
            "pipeline_fingerprint": work["pipeline_fingerprint"],
            "run_id": work["run_id"],
            "row_kind": "chunk",
            "doc_rows": len(drafts),
            "content_sha256": work["content_sha256"],
        })
    return chunks
