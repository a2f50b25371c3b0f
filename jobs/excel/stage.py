"""The Ray Data stage of the Excel path: work rows (workbooks, CSV files) into chunk rows.

One chunk row per data row, carrying its file, sheet and table title as heading path and breadcrumb
(embedded with the text); the document's first row carries `doc_stats`, what the reader and the
table finder skipped or found. What a person must be told of a workbook (formula cells saved without
their values) is logged as a warning naming the file and sheet, and counted in `doc_stats`. A
workbook that cannot be read becomes one error row, so one bad file never fails its batch. Rows are
built by jobs.chunks.build, as the Markdown path's are.
"""

from __future__ import annotations

import json
import logging
from collections import Counter

from jobs.chunks.build import chunk_rows
from jobs.chunks.metadata import workbook_metadata
from jobs.config import ExcelConfig, QualityConfig
from jobs.embed.tokens import token_counter
from jobs.errors import is_bug
from jobs.excel.cells import SEPARATOR
from jobs.excel.render import iter_drafts
from jobs.excel.split import embed_text
from jobs.excel.templates import TemplateTexts
from jobs.rows import doc_marker, error_row, storable
from jobs.sources.reads import work_local_file

__all__ = ["excel_to_chunks"]

log = logging.getLogger(__name__)


def excel_to_chunks(rows: list[dict], *, excel: ExcelConfig, quality: QualityConfig,
                    embedding_model: str, storage=None, templates: TemplateTexts | None = None) -> list[dict]:
    """Stage: work rows (workbooks) -> chunk rows, one per data row, or one error row per workbook.
    A workbook in an object store (or carried in the work item) is copied to a local temporary file
    first: openpyxl and the zip guards need a real file (`storage`: jobs.sources.storage.StorageOptions)."""
    out = []
    for work in rows:
        try:
            out.extend(_workbook_chunks(work, excel, quality, embedding_model, storage, templates))
        except Exception as exc:
            if is_bug(exc):
                raise
            out.append(error_row(work, "parse_excel", exc))
    return out


def _workbook_chunks(work: dict, excel: ExcelConfig, quality: QualityConfig, embedding_model: str,
                     storage=None, templates: TemplateTexts | None = None) -> list[dict]:
    counter = token_counter(embedding_model)
    counts: Counter = Counter()
    notes: list[str] = []
    with work_local_file(work, storage, max_bytes=excel.max_file_bytes) as path:
        drafts = list(iter_drafts(path, work["source_path"], excel, counts, templates=templates, counter=counter,
                                  notes=notes))
    for note in notes:  # counted in doc_stats too (the run's metrics.json `text_changes`)
        log.warning("%s: %s", work["source_path"], note)
    for d in drafts:  # a cell's `_x0000_` escape reads back as NUL
        stored = tuple(storable(v, counts) for v in (d.sheet, d.text, d.heading_path))
        if stored != (d.sheet, d.text, d.heading_path):
            d.sheet, d.text, d.heading_path, d.tokens = *stored, None
    doc_stats = json.dumps(dict(sorted(counts.items())))
    if not drafts:
        return [doc_marker(work, "empty", doc_stats=doc_stats)]
    crumbs = [SEPARATOR.join(d.heading_path) for d in drafts]
    embed_texts = [embed_text(d) for d in drafts]
    # Rows jobs.excel.split measured against the window keep that count; the rest are counted in one call.
    todo = [i for i, d in enumerate(drafts) if d.tokens is None]
    token_counts = [d.tokens for d in drafts]
    for i, n in zip(todo, counter.count([embed_texts[i] for i in todo])):
        token_counts[i] = n
    rows = [{"heading_path": d.heading_path, "breadcrumb": crumb, "text": d.text, "embed_text": embed_text,
             "sheet": d.sheet, "row": d.row,
             "tags": ["row", f"template:{d.template}"] + ([f"part:{d.part[0]}/{d.part[1]}"] if d.part else [])}
            for d, crumb, embed_text in zip(drafts, crumbs, embed_texts)]
    # A row cut into parts (jobs.excel.split) has a chunk per part: `#row.k` tells them apart.
    locators = [f"{work['source_path']}##{d.sheet}#{d.row}" + (f".{d.part[0]}" if d.part else "") for d in drafts]
    return chunk_rows(work, rows, source_type="excel", locators=locators,
                      token_counts=token_counts, token_limit=counter.limit, quality=quality, doc_stats=doc_stats,
                      verdicts=[d.verdict for d in drafts], metadata=workbook_metadata([d.sheet for d in drafts]))
