"""The streaming reader: a workbook (or a CSV file) as one stream of `Row`s per visible sheet.

openpyxl reads in read-only mode, so memory stays flat whatever the sheet's size; the guards
(jobs.excel.guards) run before it opens anything. Read-only mode does not load merged cells, so
their ranges are scanned from the sheet's XML and filled in as the rows pass: a vertical merge
repeats its value down its rows, a horizontal one is kept as a span for the header. Cells are read as
their cached values: a formula cell without one (a workbook written by openpyxl or pandas and never
opened in Excel) reads as empty, and is counted and told per sheet (formula_note). Hidden and
chart sheets are skipped and counted. A CSV file is one sheet named after the file, as in Excel; its
delimiter is one that its header line holds (csv_dialect), and a header line without one is one column.
"""

from __future__ import annotations

import csv
import re
import warnings
import zipfile
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import openpyxl
from openpyxl.utils.cell import range_boundaries

from jobs.config import ExcelConfig
from jobs.errors import FileRefused, NotUtf8Error, UnreadableFile
from jobs.excel.formats import EXCEL_ERRORS, format_value
from jobs.excel.guards import check_workbook_file, require_defusedxml

__all__ = ["EMPTY", "TEXT", "TYPED", "Row", "SheetScan", "csv_dialect", "formula_note", "open_sheets",
           "read_merged_ranges", "scan_sheet"]

# openpyxl warns about what it drops ("Unknown extension", "no default style"): nothing a reader of the
# rows can act on, and once per sheet it floods the worker logs.
warnings.filterwarnings("ignore", category=UserWarning, module=r"openpyxl\.")


def _unreadable(exc: Exception) -> UnreadableFile:
    return UnreadableFile(f"openpyxl could not read the workbook: {type(exc).__name__}: {exc}; re-save it in Excel")


EMPTY, TEXT, TYPED = 0, 1, 2
_LETTER = re.compile(r"[^\W\d_]")  # a letter in any script (digits and "_" excluded from \w)


def _kind(value) -> int:
    if value is None:
        return EMPTY
    if isinstance(value, str):
        return TEXT if _LETTER.search(value) else TYPED  # "27.05.2004", "12,553", "—" count as values
    return TYPED


def indent_level(value, alignment_indent: float = 0, spaces: bool = True) -> int:
    """How far a text cell is indented, comparable between the rows of one sheet: Excel's indent (the
    alignment's `indent`, in steps) before leading spaces, two a step from three on (one or two are a stray
    space, not a level). `spaces` False: a CSV file's leading spaces are padding as often as indents."""
    if not isinstance(value, str):
        return 0
    pad = len(value) - len(value.lstrip(" \u00a0")) if spaces else 0
    return int(alignment_indent or 0) * 100 + (pad // 2 if pad >= 3 else 0)


# Excel indents text from the side it is aligned to: only a left-aligned label's indent is a level.
_LEFT = {None, "general", "left", "justify", "distributed"}


def _first_indents(values: list, cells=None) -> tuple:
    """The indents tuple of a row: its first filled cell's level, when that is text and indented. Without
    `cells` (a CSV row) leading spaces do not count."""
    for i, v in enumerate(values):
        if v is None:
            continue
        steps = 0
        if cells is not None:
            alignment = getattr(cells[i], "alignment", None)
            if alignment is not None and getattr(alignment, "horizontal", None) in _LEFT:
                steps = getattr(alignment, "indent", 0) or 0
        level = indent_level(v, steps, spaces=cells is not None)
        return (0,) * i + (level,) if level else ()
    return ()


def _centred_spans(values: list, cells) -> list[tuple[int, int]]:
    """Excel's "centre across selection": a label whose alignment is centerContinuous, and the empty
    cells after it that share that alignment, show as one cell over their columns, as a merge does (a
    group label over its columns in a header line). Only a text cell with an empty one after it is
    looked at: each look-up reads the cell's style."""
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, str) or i + 1 >= len(cells) or (i + 1 < len(values) and values[i + 1] is not None):
            continue
        if getattr(getattr(cells[i], "alignment", None), "horizontal", None) != "centerContinuous":
            continue
        last = i
        while (last + 1 < len(cells) and (last + 1 >= len(values) or values[last + 1] is None)
               and getattr(getattr(cells[last + 1], "alignment", None), "horizontal", None) == "centerContinuous"):
            last += 1
        if last > i:
            out.append((i, last))
    return out


def _normalize(value):
    if isinstance(value, str):
        stripped = value.strip()
        return None if not stripped or stripped in EXCEL_ERRORS else value
    return value


@dataclass(eq=False)
class Row:
    """One sheet row: cell values (None = empty), their number formats, the horizontal merged ranges
    that cross it as (first, last) 0-based columns, and how far its first cell is indented (`indent_level`:
    published tables show a row's parent by indenting its children's labels)."""

    number: int
    values: list
    formats: list
    spans: tuple = ()
    indents: tuple = ()  # per column; the first filled cell's only
    kinds: list = field(init=False)

    def __post_init__(self):
        self.kinds = [_kind(v) for v in self.values]

    @property
    def blank(self) -> bool:
        return not any(self.kinds)

    @property
    def width(self) -> int:
        return sum(1 for k in self.kinds if k)

    def kind(self, col: int) -> int:
        return self.kinds[col] if col < len(self.kinds) else EMPTY

    def indent(self, col: int) -> int:
        return self.indents[col] if col < len(self.indents) else 0

    def key(self) -> tuple:
        return tuple(format_value(v).casefold() for v in self.values)


# A merged range's value sits in its top-left cell only. <mergeCell ref="B4:E4"/> comes after all the
# rows in the sheet XML, so it is read by scanning the part's bytes; a tag cannot occur in cell text,
# where "<" is always escaped. The optional prefix covers documents written as <x:mergeCell>.
_MERGE_REF = re.compile(rb'<(?:\w+:)?mergeCell\b[^>]*?\bref="([A-Za-z]{1,3}\d+(?::[A-Za-z]{1,3}\d+)?)"')
# A cell's formula is its first child (<c><f>B2*12</f><v>14400</v></c>; a shared formula's other cells
# hold <f t="shared" si="0"/>), and its value is the cached result: a program that does not calculate
# (openpyxl, pandas) writes <v/> or no <v>, which openpyxl's data_only mode reads as an empty cell. A
# computed empty text (`=IF(A2="","",A2)`) is an empty <v> too, but on a cell typed t="str".
_FORMULA_CELL = re.compile(rb'<(?:\w+:)?c\b([^>]*)>\s*<(?:\w+:)?f\b[^>]*?(?:/>|>[^<]*</(?:\w+:)?f\s*>)\s*'
                           rb'(?:<(?:\w+:)?v\b[^>]*?(?:/>|>([^<]*)</(?:\w+:)?v\s*>))?')
_TEXT_RESULT = re.compile(rb'\st\s*=\s*["\']str["\']')
_MAX_MERGES = 100_000
_SCAN_BLOCK = 1024 * 1024
_SCAN_CARRY = 64 * 1024  # longer than any cell (a formula is at most 8,192 characters, escaped up to 6 bytes each)


@dataclass
class SheetScan:
    """What the sheet's XML says that read-only openpyxl does not: its merged ranges, (min_col, min_row,
    max_col, max_row) 1-based, and how many formula cells hold no computed value."""

    merges: list[tuple[int, int, int, int]] = field(default_factory=list)
    formulas_without_value: int = 0


def scan_sheet(archive: zipfile.ZipFile, part: str | None) -> SheetScan:
    """One streaming pass over the sheet part in 1 MiB blocks, so memory stays flat however large the
    sheet. A cell is counted in the block where it starts, unless it starts in the block's last
    _SCAN_CARRY bytes: those go round with the next block, so that a cell cut by the block's end is
    seen whole (and a formula at the end is not taken for one without its value, still to come)."""
    if not part:
        return SheetScan()
    part = part.lstrip("/")
    if part not in archive.namelist():
        return SheetScan()
    found: set[bytes] = set()
    uncomputed = 0
    carry = b""
    with archive.open(part) as fh:
        while True:
            block = fh.read(_SCAN_BLOCK)
            buf = carry + block
            if len(found) < _MAX_MERGES:
                found.update(m.group(1) for m in _MERGE_REF.finditer(buf))  # a set: the carry is scanned twice
            cut = max(len(buf) - _SCAN_CARRY, 0) if block else len(buf)
            formulas = _FORMULA_CELL.finditer(buf) if b"<f" in buf or b":f" in buf else ()  # most sheets: none
            for m in formulas:
                if m.start() >= cut:
                    break
                uncomputed += not m.group(2) and not _TEXT_RESULT.search(m.group(1))
            if not block:
                break
            carry = buf[cut:]
    ranges = []
    for ref in found:
        try:
            ranges.append(tuple(range_boundaries(ref.decode("ascii"))))
        except ValueError:
            continue
    return SheetScan(sorted(ranges, key=lambda r: (r[1], r[0])), uncomputed)


def read_merged_ranges(archive: zipfile.ZipFile, part: str | None) -> list[tuple[int, int, int, int]]:
    """(min_col, min_row, max_col, max_row), 1-based, of the sheet part's merged cells (scan_sheet)."""
    return scan_sheet(archive, part).merges


def formula_note(sheet: str, count: int) -> str:
    """What a person is told of a sheet whose formulas hold no computed value."""
    return (f"sheet {sheet!r}: {count} formula cell(s) have no computed value (the workbook was written by a "
            "program that does not calculate, such as openpyxl or pandas) and are read as empty; open and save "
            "the workbook in Excel or LibreOffice to compute them")


class _Merges:
    """Fills merged cells while rows stream: a vertical merge repeats its value (and its indent) down the
    first column (a category merged over its rows belongs to each), a horizontal one is reported as a span
    (used for headers)."""

    def __init__(self, ranges: list[tuple[int, int, int, int]]):
        self.pending = deque(ranges)  # sorted by first row
        self.active: list[list] = []  # [min_col, min_row, max_col, max_row, value, fmt, indent]

    def row(self, number: int, values: list, formats: list, indents: tuple = ()) -> Row:
        while self.pending and self.pending[0][1] <= number:
            c1, r1, c2, r2 = self.pending.popleft()
            if r2 < number:
                continue
            i = c1 - 1
            top = values[i] if r1 == number and i < len(values) else None
            fmt = formats[i] if r1 == number and i < len(formats) else None
            level = indents[i] if r1 == number and i < len(indents) else 0
            self.active.append([c1, r1, c2, r2, top, fmt, level])
        spans = []
        for c1, r1, c2, _r2, value, fmt, level in self.active:
            if c2 > c1:
                spans.append((c1 - 1, c2 - 1))
            i = c1 - 1
            if r1 < number and value is not None:
                if i >= len(values):
                    values.extend([None] * (i + 1 - len(values)))
                    formats.extend([None] * (i + 1 - len(formats)))
                if values[i] is None:
                    values[i], formats[i] = value, fmt
                    if level and not any(v is not None for v in values[:i]):  # the label a merge repeats keeps its indent
                        indents = (0,) * i + (level,)
        self.active = [a for a in self.active if a[3] > number]
        return Row(number, values, formats, tuple(spans), indents)


def _trimmed(values: list, formats: list) -> tuple[list, list]:
    values = [_normalize(v) for v in values]
    while values and values[-1] is None:
        values.pop()
    return values, formats[: len(values)]


def _sheet_rows(ws, merges: _Merges) -> Iterator[Row]:
    try:
        ws.reset_dimensions()  # the stored dimension can be wrong; read every row that is there
        cells_by_row = ws.iter_rows(min_row=1, min_col=1)
    except Exception as exc:
        raise _unreadable(exc) from exc
    number = 0
    while True:
        try:
            cells = next(cells_by_row, None)
            if cells is None:
                return
            values = [getattr(c, "value", None) for c in cells]
            # Read-only cells look their style up on access; only non-empty cells need a format, and only the
            # first one its alignment.
            formats = [c.number_format if v is not None else None for c, v in zip(cells, values)]
            values, formats = _trimmed(values, formats)
            indents = _first_indents(values, cells)
            centred = _centred_spans(values, cells)
        except Exception as exc:
            raise _unreadable(exc) from exc
        number += 1
        row = merges.row(number, values, formats, indents)
        if centred:
            row.spans = tuple(sorted({*row.spans, *centred}))
        yield row


def _workbook_sheets(path: Path, cfg: ExcelConfig, counts: Counter,
                     notes: list[str] | None) -> Iterator[tuple[str, Iterator[Row]]]:
    check_workbook_file(path, cfg)
    require_defusedxml()
    try:
        wb = openpyxl.load_workbook(str(path), read_only=True, data_only=True)
    except Exception as exc:
        raise _unreadable(exc) from exc
    try:
        counts["excel_chart_sheets_skipped"] += len(wb.chartsheets)
        with zipfile.ZipFile(path) as archive:
            for ws in wb.worksheets:
                if getattr(ws, "sheet_state", "visible") != "visible":
                    counts["excel_hidden_sheets_skipped"] += 1
                    continue
                counts["excel_sheets"] += 1
                # Read-only mode does not load merged cells; the sheet's part path is openpyxl's own attribute,
                # and without it the sheet is simply read without merges (and formulas are not counted).
                scan = scan_sheet(archive, getattr(ws, "_worksheet_path", None))
                if scan.formulas_without_value:
                    counts["excel_formulas_without_value"] += scan.formulas_without_value
                    if notes is not None:
                        notes.append(formula_note(ws.title, scan.formulas_without_value))
                yield ws.title, _sheet_rows(ws, _Merges(scan.merges))
    finally:
        wb.close()


_DELIMITERS = ",;\t|"


class _OneColumn(csv.excel):
    """A CSV file whose first line holds no delimiter: one column, its values' commas and semicolons text.
    csv needs a delimiter still; the unit separator (a control character) occurs in no text file."""

    delimiter = "\x1f"


def _header_delimiters(sample: str) -> str:
    """The candidate delimiters that the first non-blank line of `sample` holds outside double quotes, the
    most frequent first ("" when it holds none)."""
    found: Counter = Counter()
    quoted = started = False
    for ch in sample:
        if ch == '"':
            quoted, started = not quoted, True
        elif quoted:
            continue
        elif ch in _DELIMITERS:
            found[ch] += 1
        elif ch in "\r\n":
            if started or found:
                break
        elif not ch.isspace():
            started = True
    return "".join(d for d, _ in found.most_common())


def _table_below(sample: str) -> str:
    """The delimiter of a table under a title line (`Quarterly report` over `Region,Q1,Q2`): one that every
    later whole line of `sample` holds, the same number of times, outside quotes ("" when none does)."""
    lines = sample.splitlines()[1:]
    if lines and not sample.endswith(("\n", "\r")):
        lines.pop()  # cut short by the sample's end
    lines = [line for line in lines if line.strip()]
    if len(lines) < 2:
        return ""
    for d in _DELIMITERS:
        per_line = {_outside_quotes(line).count(d) for line in lines}
        if len(per_line) == 1 and per_line != {0}:
            return d
    return ""


def _outside_quotes(line: str) -> str:
    return "".join(part for i, part in enumerate(line.split('"')) if i % 2 == 0)


def csv_dialect(sample: str) -> type[csv.Dialect]:
    """The dialect of a CSV file from its first bytes. The header line decides which delimiters are in
    play: one holding none of `,` `;` tab `|` outside quotes is a one-column file, however many commas
    its values hold (csv's Sniffer would fail there, and `,` split every value at its commas), unless
    it is a title over a table whose every line holds one delimiter alike (_table_below). Among the
    delimiters the header holds, the Sniffer picks by how consistently the lines hold them, else the
    commonest."""
    in_header = _header_delimiters(sample)
    if not in_header:
        below = _table_below(sample.lstrip("\r\n"))
        return type("_Titled", (csv.excel,), {"delimiter": below}) if below else _OneColumn
    try:
        return csv.Sniffer().sniff(sample, delimiters=in_header)
    except csv.Error:
        return type("_Sniffed", (csv.excel,), {"delimiter": in_header[0]})


def _csv_sheets(path: Path, cfg: ExcelConfig, counts: Counter) -> Iterator[tuple[str, Iterator[Row]]]:
    size = path.stat().st_size
    if size > cfg.max_file_bytes:
        raise FileRefused(f"CSV file is {size:,} bytes, over excel.max_file_bytes={cfg.max_file_bytes:,}")
    with open(path, "rb") as fh:
        sample_bytes = fh.read(64 * 1024)
    try:
        sample = sample_bytes.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.start < len(sample_bytes) - 3:  # not just a character cut at the sample's end
            raise NotUtf8Error(f"CSV file is not UTF-8 (byte {exc.start}); re-save it as 'CSV UTF-8'") from exc
        sample = sample_bytes[: exc.start].decode("utf-8-sig")
    dialect = csv_dialect(sample)
    one_column = dialect is _OneColumn
    counts["excel_sheets"] += 1

    def rows() -> Iterator[Row]:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh, dialect)
            number = 0
            while True:
                try:
                    record = next(reader, None)
                except (csv.Error, UnicodeDecodeError) as exc:
                    raise UnreadableFile(f"CSV line {reader.line_num}: {exc}") from exc
                if record is None:
                    return
                number += 1
                if one_column and len(record) > 1:  # the separator's character in a value: still one column
                    record = [_OneColumn.delimiter.join(record)]
                values, formats = _trimmed(list(record), [None] * len(record))
                yield Row(number, values, formats, (), _first_indents(values))

    # Excel names a CSV file's only sheet after the file; so does this.
    yield path.stem, rows()


def open_sheets(path: Path, cfg: ExcelConfig, counts: Counter,
                notes: list[str] | None = None) -> Iterator[tuple[str, Iterator[Row]]]:
    """(sheet name, row stream) per visible worksheet; a .csv file is one sheet. `counts` collects what
    was skipped; `notes` receives, as each sheet opens, what a person must be told about it (formula
    cells without a computed value, formula_note)."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return _csv_sheets(path, cfg, counts)
    return _workbook_sheets(path, cfg, counts, notes)
