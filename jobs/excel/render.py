"""Every data row of a workbook rendered to text and judged: the path from file to `RowDraft`s.

open_sheets (jobs.excel.reader) -> split_tables (jobs.excel.tables) -> group labels and sections
carried down (jobs.excel.context) -> one text per row -> judge (jobs.excel.filters), a short row
kept when it is a record of its table (jobs.excel.records). A row reads as
the sentence of the first template that fits its table (jobs.excel.templates: matched once per
table, by file, sheet and header) or as `Header: value; …`, with values shown the way the workbook
formats them. The stage and the `templates preview` command both read workbooks through
`iter_drafts`, so the preview shows what an ingest makes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from jobs.chunks.quality import word_count
from jobs.config import ExcelConfig
from jobs.embed.tokens import TokenCounter
from jobs.excel.cells import is_missing
from jobs.excel.context import RowContext, leading_names, with_section
from jobs.excel.filters import judge
from jobs.excel.formats import format_value
from jobs.excel.reader import TEXT, Row, open_sheets
from jobs.excel.records import keep_short_records
from jobs.excel.split import split_row
from jobs.excel.tables import Table, pinned_header, split_tables
from jobs.excel.templates import (
    TemplateRegistry,
    TemplateTexts,
    fallback_fields,
    load_templates,
    registry_from_texts,
    render_fields,
)

__all__ = ["RowDraft", "iter_drafts"]

# A key and its description (`_key_and_description`): a key of at most 3 words and 20 characters, a
# description of at least 2 words.
_KEY_WORDS, _KEY_CHARS, _DESCRIPTION_WORDS = 3, 20, 2


@dataclass
class RowDraft:
    sheet: str
    table: Table
    row: int
    cells: list[str]  # the cells as the workbook shows them
    kinds: list[int]  # the reader's kind of each cell (jobs.excel.reader: EMPTY, TEXT, TYPED)
    text: str
    template: str  # template name, or "fallback"
    heading_path: list[str]
    verdict: tuple[str, str] | None  # (quality, omit_reason) when a filter omits the row
    # A fallback row's fields, (label, value, first column) in text order, the first `lead` of them its own
    # names: what jobs.excel.split needs to cut a row too long to embed into parts. None for a template's.
    fields: list[tuple[str, str, int]] | None = None
    lead: int = 0
    part: tuple[int, int] | None = None  # (k, n): this is part k of n of its row
    tokens: int | None = None  # the model's tokens in its embed text, where jobs.excel.split counted them


@dataclass
class _Context:
    file_name: str
    source_path: str
    cfg: ExcelConfig
    registry: TemplateRegistry
    patterns: list[re.Pattern]
    table: Table | None = None  # the table of the last row, whose group labels `context` carries
    context: RowContext | None = None
    counts: Counter | None = None

    @classmethod
    def create(cls, source_path: str, cfg: ExcelConfig, templates: TemplateTexts | None = None) -> _Context:
        registry = (load_templates(cfg.templates_dir) if templates is None
                    else registry_from_texts(templates, str(cfg.templates_dir)))
        return cls(Path(source_path).name, source_path, cfg, registry,
                   [re.compile(p, re.I) for p in cfg.structural_patterns])


def _draft(ctx: _Context, table: Table, row: Row) -> RowDraft:
    if table.binding is None:
        matched = ctx.registry.match(ctx.file_name, ctx.source_path, table.sheet, table.headers)
        table.template, table.binding = matched if matched else (None, {})
    if ctx.table is not table:
        ctx.table, ctx.context = table, RowContext(table.header_row is not None, table.named, ctx.counts)
    row, section = ctx.context.apply(row)
    # `..`, `N/A`, `[x]`: the workbook says there is no value, so the row does not show one.
    cells = ["" if is_missing(c) else c for c in (format_value(v, f) for v, f in zip(row.values, row.formats))]
    cells = with_section(cells, section)
    text, used, unnamed, fields, lead = None, "fallback", 0, None, 0
    if table.template is not None:
        text = table.template.render(table.binding, row.values, cells)
        used = table.template.name if text else used
    if text is None:
        labels = row_labels(table, cells, row.kinds)
        pair = _key_and_description(table, cells, row.kinds)
        if pair is not None:
            # `1.1 | Supply of Energy, Australia` on a contents sheet: the key names its description.
            fields = [(cells[pair[0]], cells[pair[1]], pair[1])]
        else:
            fields = fallback_fields(labels, cells, [k == TEXT for k in row.kinds])
        text = render_fields(fields)
        names = leading_names([bool(c) for c in cells], row.kinds)
        lead = next((n for n, f in enumerate(fields) if f[2] not in names), len(fields))
        if not table.pinned and pair is None:
            # A bare row name is no value without a label, but the run of text cells after it is: a row of them
            # under no header (a table's header line read as data, `code | description`) stays omitted.
            first = next((i for i, c in enumerate(cells) if c), None)
            unnamed = sum(1 for i, c in enumerate(cells) if c and i != first and not table.named(i))
    path = [ctx.file_name, table.sheet] + ([table.title] if table.title else [])
    verdict = judge(row, cells, text, used != "fallback" or table.header_row is not None, ctx.cfg, ctx.patterns,
                    unnamed, splittable=fields is not None and len(fields) - lead >= 2)
    return RowDraft(table.sheet, table, row.number, cells, list(row.kinds), text, used, path, verdict, fields, lead)


def _key_and_description(table: Table, cells: list[str], kinds: list[int]) -> tuple[int, int] | None:
    """(key column, description column) of a row that is a key and its description, in columns no header
    names: two cells, a short code or number (`1.1`, `E12000001`, `Table 3`) before a text of two words or
    more (contents, guidance and code-list sheets). None for any other row."""
    if table.pinned:
        return None
    filled = [i for i, c in enumerate(cells) if c]
    if len(filled) != 2:
        return None
    key, value = filled
    if table.named(value) or value >= len(kinds) or kinds[value] != TEXT or \
            word_count(cells[value]) < _DESCRIPTION_WORDS:
        return None
    return (key, value) if word_count(cells[key]) <= _KEY_WORDS and len(cells[key]) <= _KEY_CHARS else None


def row_labels(table: Table, cells: list[str], kinds: list[int] | None = None) -> list[str]:
    """Column labels for the fallback text. A published table often leaves its row-header columns
    unnamed (the corner cell over `1981-82`, `Employee`, `TOKENS`; `North East | Imports` before the
    figures): those values are the row's own names, so they go out bare, never under `Column A`. With
    `kinds`, every unnamed text cell before the row's first value is such a name; without, the first cell."""
    labels = [table.label(i) for i in range(len(cells))]
    if table.header_row is not None:
        for i in leading_names([bool(c) for c in cells], kinds):
            if not table.named(i):
                labels[i] = ""
    return labels


def iter_drafts(path: Path, source_path: str, cfg: ExcelConfig, counts: Counter,
                sheet: str | None = None, sheets_seen: list[str] | None = None,
                templates: TemplateTexts | None = None, counter: TokenCounter | None = None,
                notes: list[str] | None = None) -> Iterator[RowDraft]:
    """Every data row of the workbook at `path`, rendered and judged, a row too long to embed as its parts
    (jobs.excel.split: over `max_words`, or over the model's window where `counter`, the embedding model's
    token counter, is given); `counts` collects what was skipped and split, `notes` what a person must be
    told (jobs.excel.reader.open_sheets). `templates`: the driver's template texts (a job's workers); None
    reads `cfg.templates_dir` here."""
    ctx = _Context.create(source_path, cfg, templates)
    ctx.counts = counts
    for name, rows in open_sheets(Path(path), cfg, counts, notes):
        if sheets_seen is not None:
            sheets_seen.append(name)
        if sheet is not None and name != sheet:
            continue
        pin = pinned_header(cfg.header_rows, ctx.file_name, source_path, name)
        drafts = (_draft(ctx, table, row) for table, row in split_tables(_counted(rows, counts), name,
                                                                         scan=cfg.header_scan_rows, pin=pin,
                                                                         counts=counts))
        for draft in keep_short_records(drafts, counts):
            parts = split_row(draft, cfg.max_words, counter.count if counter else None,
                              counter.limit if counter else None)
            if len(parts) > 1:
                counts["excel_rows_split"] += 1
                counts["excel_row_parts"] += len(parts)
            yield from parts


def _counted(rows: Iterator[Row], counts: Counter) -> Iterator[Row]:
    for row in rows:
        counts["excel_rows_read"] += not row.blank
        yield row
