"""Every data row of a workbook rendered to text and judged: the path from file to `RowDraft`s.

open_sheets (jobs.excel.reader) -> split_tables (jobs.excel.tables) -> one text per row -> judge
(jobs.excel.filters). A row reads as the sentence of the first template that fits its table
(jobs.excel.templates: matched once per table, by file, sheet and header) or as `Header: value; …`,
with values shown the way the workbook formats them. The stage and the `templates preview` command
both read workbooks through `iter_drafts`, so the preview shows what an ingest makes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from jobs.config import ExcelConfig
from jobs.excel.cells import is_missing
from jobs.excel.filters import judge
from jobs.excel.formats import format_value
from jobs.excel.reader import Row, open_sheets
from jobs.excel.tables import Table, pinned_header, split_tables
from jobs.excel.templates import TemplateRegistry, TemplateTexts, load_templates, registry_from_texts, render_fallback

__all__ = ["RowDraft", "iter_drafts"]


@dataclass
class RowDraft:
    sheet: str
    table: Table
    row: int
    cells: list[str]  # the cells as the workbook shows them
    text: str
    template: str  # template name, or "fallback"
    heading_path: list[str]
    verdict: tuple[str, str] | None  # (quality, omit_reason) when a filter omits the row


@dataclass
class _Context:
    file_name: str
    source_path: str
    cfg: ExcelConfig
    registry: TemplateRegistry
    patterns: list[re.Pattern]

    @classmethod
    def create(cls, source_path: str, cfg: ExcelConfig, templates: TemplateTexts | None = None) -> "_Context":
        registry = (load_templates(cfg.templates_dir) if templates is None
                    else registry_from_texts(templates, str(cfg.templates_dir)))
        return cls(Path(source_path).name, source_path, cfg, registry,
                   [re.compile(p, re.I) for p in cfg.structural_patterns])


def _draft(ctx: _Context, table: Table, row: Row) -> RowDraft:
    if table.binding is None:
        matched = ctx.registry.match(ctx.file_name, ctx.source_path, table.sheet, table.headers)
        table.template, table.binding = matched if matched else (None, {})
    # `..`, `N/A`, `[x]`: the workbook says there is no value, so the row does not show one.
    cells = ["" if is_missing(c) else c for c in (format_value(v, f) for v, f in zip(row.values, row.formats))]
    text, used, unnamed = None, "fallback", 0
    if table.template is not None:
        text = table.template.render(table.binding, row.values, cells)
        used = table.template.name if text else used
    if text is None:
        labels = row_labels(table, cells)
        text = render_fallback(labels, cells)
        if not table.pinned:
            unnamed = sum(1 for i, c in enumerate(cells) if c and labels[i] and not table.named(i))
    path = [ctx.file_name, table.sheet] + ([table.title] if table.title else [])
    verdict = judge(row, cells, text, used != "fallback" or table.header_row is not None, ctx.cfg, ctx.patterns,
                    unnamed)
    return RowDraft(table.sheet, table, row.number, cells, text, used, path, verdict)


def row_labels(table: Table, cells: list[str]) -> list[str]:
    """Column labels for the fallback text. A published table often leaves its row-header column
    unnamed (the corner cell over `1981-82`, `Employee`, `TOKENS`): that value is the row's own name,
    so it goes out bare, never under `Column A`."""
    labels = [table.label(i) for i in range(len(cells))]
    first = next((i for i, c in enumerate(cells) if c), None)
    if table.header_row is not None and first is not None and not table.named(first):
        labels[first] = ""
    return labels


def iter_drafts(path: Path, source_path: str, cfg: ExcelConfig, counts: Counter,
                sheet: str | None = None, sheets_seen: list[str] | None = None,
                templates: TemplateTexts | None = None) -> Iterator[RowDraft]:
    """Every data row of the workbook at `path`, rendered and judged; `counts` collects what was skipped.
    `templates`: the driver's template texts (a job's workers); None reads `cfg.templates_dir` here."""
    ctx = _Context.create(source_path, cfg, templates)
    for name, rows in open_sheets(Path(path), cfg, counts):
        if sheets_seen is not None:
            sheets_seen.append(name)
        if sheet is not None and name != sheet:
            continue
        pin = pinned_header(cfg.header_rows, ctx.file_name, source_path, name)
        for table, row in split_tables(_counted(rows, counts), name, scan=cfg.header_scan_rows, pin=pin,
                                       counts=counts):
            yield _draft(ctx, table, row)


def _counted(rows: Iterator[Row], counts: Counter) -> Iterator[Row]:
    for row in rows:
        counts["excel_rows_read"] += not row.blank
        yield row
