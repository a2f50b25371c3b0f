"""`corpusmill templates preview FILE`: what the Excel stage makes of one workbook, for a person.

Per sheet and table: the header found, the template matched (or which template covers the sheet
and which columns its header lacks), the first rendered rows and the first discarded ones with
their reasons. It reads through the stage's own path (jobs.excel.render.iter_drafts), so rows
render and filter as in an ingest, with two differences: file globs see the file's name only (a
preview has no source path), and `too_long` by tokens does not show (no tokenizer is loaded here).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from jobs.chunks.quality import label, word_count
from jobs.config import ExcelConfig, QualityConfig
from jobs.embed.tokens import TokenCounter
from jobs.errors import ConfigError
from jobs.excel.render import RowDraft, iter_drafts
from jobs.excel.tables import Table
from jobs.excel.templates import TemplateRegistry, load_templates

__all__ = ["preview"]


@dataclass
class _TablePreview:
    table: Table
    kept: list[RowDraft] = field(default_factory=list)
    dropped: list[RowDraft] = field(default_factory=list)
    n_kept: int = 0
    n_dropped: int = 0


def preview(path: Path, *, sheet: str | None = None, n: int = 10, excel: ExcelConfig,
            quality: QualityConfig, counter: TokenCounter | None = None) -> str:
    """What the Excel stage makes of a workbook, per sheet and table: the header found, the template matched
    (or why none), the first `n` rendered rows (a row cut to fit the model's window, part by part) and the
    first `n` discarded ones with their reasons. `counter`: the embedding model's tokens, so rows are cut as
    an ingest cuts them; without it only `excel.max_words` cuts."""
    path = Path(path)
    counts: Counter = Counter()
    seen: list[str] = []
    tables: dict[tuple[str, int], _TablePreview] = {}
    notes: list[str] = []
    for d in iter_drafts(path, path.name, excel, counts, sheet=sheet, sheets_seen=seen, counter=counter, notes=notes):
        tp = tables.setdefault((d.sheet, d.table.number), _TablePreview(d.table))
        verdict = d.verdict
        if verdict is None:
            _, omitted, reason = label(d.text, word_count(d.text), 0, 1 << 30, "excel", quality)
            verdict = ("", reason) if omitted else None
        if verdict is None:
            tp.n_kept += 1
            if len(tp.kept) < n:
                tp.kept.append(d)
        else:
            tp.n_dropped += 1
            if len(tp.dropped) < n:
                d.verdict = verdict
                tp.dropped.append(d)
    if sheet is not None and sheet not in seen:
        raise ConfigError(f"{path.name} has no visible sheet named {sheet!r}; sheets: {', '.join(seen) or 'none'}")
    registry = load_templates(excel.templates_dir)
    out = [f"{path.name}: {counts['excel_sheets']} sheet(s) read, {counts['excel_hidden_sheets_skipped']} hidden and "
           f"{counts['excel_chart_sheets_skipped']} chart sheet(s) skipped; "
           f"{len(registry)} template(s) from {registry.directory or excel.templates_dir}"]
    out.extend(f"warning: {note}" for note in notes if sheet is None or note.startswith(f"sheet {sheet!r}:"))
    for name in seen:
        if sheet is not None and name != sheet:
            continue
        out.append(f"\n== sheet {name!r} ==")
        found = [tp for (s, _), tp in tables.items() if s == name]
        if not found:
            out.append("  no data rows")
        for tp in found:
            out.extend(_preview_table(tp, path.name, registry))
    return "\n".join(out) + "\n"


def _preview_table(tp: _TablePreview, file_name: str, registry: TemplateRegistry) -> list[str]:
    t = tp.table
    where = f"header row {t.header_row}" if t.header_row else "no header row (columns named by letter)"
    lines = [f"table {t.number}: {where}; title: {t.title or '—'}"]
    if t.why:
        lines.append(f"  why: {t.why}")
    if t.headers:
        lines.append("  header: " + " | ".join(t.label(i) for i in range(len(t.headers))))
    if t.template is not None:
        lines.append(f"  template: {t.template.name} ({Path(t.template.source).name})")
    else:
        lines.append("  template: fallback (`Header: value; …`)")
        for tmpl in registry.templates:
            if tmpl.covers(file_name, file_name, t.sheet):
                lines.append(f"    {tmpl.name} covers this sheet but the header lacks: {', '.join(tmpl.missing(t.headers))}")
    lines.append(f"  rows: {tp.n_kept} rendered, {tp.n_dropped} discarded")
    if tp.kept:
        lines.append(f"  first {len(tp.kept)} rendered:")
        lines.extend(f"    row {d.row}" + (f" (part {d.part[0]}/{d.part[1]})" if d.part else "") + f": {d.text}"
                     for d in tp.kept)
    if tp.dropped:
        lines.append(f"  discarded (first {len(tp.dropped)}):")
        lines.extend(f"    row {d.row}: {d.verdict[1]}\n      {d.text}" for d in tp.dropped)
    return lines
