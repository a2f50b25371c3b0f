"""The streaming reader: a workbook (or a CSV file) as one stream of `Row`s per visible sheet.

openpyxl reads in read-only mode, so memory stays flat whatever the sheet's size; the guards
(jobs.excel.guards) run before it opens anything. Read-only mode does not load merged cells, so
their ranges are scanned from the sheet's XML and filled in as the rows pass: a vertical merge
repeats its value down its rows, a horizontal one is kept as a span for the header. Hidden and
chart sheets are skipped and counted. A CSV file is one sheet named after the file, as in Excel.
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

__all__ = ["EMPTY", "TEXT", "TYPED", "Row", "open_sheets", "read_merged_ranges"]

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


def _normalize(value):
    if isinstance(value, str):
        stripped = value.strip()
        return None if not stripped or stripped in EXCEL_ERRORS else value
    return value


@dataclass(eq=False)
class Row:
    """One sheet row: cell values (None = empty), their number formats, and the horizontal merged ranges
    that cross it as (first, last) 0-based columns."""

    number: int
    values: list
    formats: list
    spans: tuple = ()
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

    def key(self) -> tuple:
        return tuple(format_value(v).casefold() for v in self.values)


# A merged range's value sits in its top-left cell only. <mergeCell ref="B4:E4"/> comes after all the
# rows in the sheet XML, so it is read by scanning the part's bytes; a tag cannot occur in cell text,
# where "<" is always escaped. The optional prefix covers documents written as <x:mergeCell>.
_MERGE_REF = re.compile(rb'<(?:\w+:)?mergeCell\b[^>]*?\bref="([A-Za-z]{1,3}\d+(?::[A-Za-z]{1,3}\d+)?)"')
_MAX_MERGES = 100_000
_SCAN_BLOCK = 1024 * 1024


def read_merged_ranges(archive: zipfile.ZipFile, part: str | None) -> list[tuple[int, int, int, int]]:
    """(min_col, min_row, max_col, max_row), 1-based, of the sheet part's merged cells: a streaming scan
    in 1 MiB blocks, so memory stays flat however large the sheet."""
    if not part:
        return []
    part = part.lstrip("/")
    if part not in archive.namelist():
        return []
    found: set[bytes] = set()
    tail = b""
    with archive.open(part) as fh:
        while len(found) < _MAX_MERGES:
            block = fh.read(_SCAN_BLOCK)
            if not block:
                break
            buf = tail + block
            found.update(m.group(1) for m in _MERGE_REF.finditer(buf))
            tail = buf[-512:]  # a tag cut by the block boundary is whole in the next buffer
    ranges = []
    for ref in found:
        try:
            ranges.append(tuple(range_boundaries(ref.decode("ascii"))))
        except ValueError:
            continue
    return sorted(ranges, key=lambda r: (r[1], r[0]))


class _Merges:
    """Fills merged cells while rows stream: a vertical merge repeats its value down the first column (a
    category merged over its rows belongs to each), a horizontal one is reported as a span (used for headers)."""

    def __init__(self, ranges: list[tuple[int, int, int, int]]):
        self.pending = deque(ranges)  # sorted by first row
        self.active: list[list] = []  # [min_col, min_row, max_col, max_row, value, fmt]

    def row(self, number: int, values: list, formats: list) -> Row:
        while self.pending and self.pending[0][1] <= number:
            c1, r1, c2, r2 = self.pending.popleft()
            if r2 < number:
                continue
            i = c1 - 1
            top = values[i] if r1 == number and i < len(values) else None
            fmt = formats[i] if r1 == number and i < len(formats) else None
            self.active.append([c1, r1, c2, r2, top, fmt])
        spans = []
        for c1, r1, c2, _r2, value, fmt in self.active:
            if c2 > c1:
                spans.append((c1 - 1, c2 - 1))
            i = c1 - 1
            if r1 < number and value is not None:
                if i >= len(values):
                    values.extend([None] * (i + 1 - len(values)))
                    formats.extend([None] * (i + 1 - len(formats)))
                if values[i] is None:
                    values[i], formats[i] = value, fmt
        self.active = [a for a in self.active if a[3] > number]
        return Row(number, values, formats, tuple(spans))


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
            # Read-only cells look their style up on access; only non-empty cells need a format.
            formats = [c.number_format if v is not None else None for c, v in zip(cells, values)]
        except Exception as exc:
            raise _unreadable(exc) from exc
        number += 1
        yield merges.row(number, *_trimmed(values, formats))


def _workbook_sheets(path: Path, cfg: ExcelConfig, counts: Counter) -> Iterator[tuple[str, Iterator[Row]]]:
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
                # and without it the sheet is simply read without merges.
                merges = _Merges(read_merged_ranges(archive, getattr(ws, "_worksheet_path", None)))
                yield ws.title, _sheet_rows(ws, merges)
    finally:
        wb.close()


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
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
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
                values, formats = _trimmed(list(record), [None] * len(record))
                yield Row(number, values, formats)

    # Excel names a CSV file's only sheet after the file; so does this.
    yield path.stem, rows()


def open_sheets(path: Path, cfg: ExcelConfig, counts: Counter) -> Iterator[tuple[str, Iterator[Row]]]:
    """(sheet name, row stream) per visible worksheet; a .csv file is one sheet."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        return _csv_sheets(path, cfg, counts)
    return _workbook_sheets(path, cfg, counts)
