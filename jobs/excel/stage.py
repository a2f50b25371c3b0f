"""Excel workbooks (and CSV files) into one chunk per table row, each row carrying its column headers.

Reading streams (openpyxl read-only) and is guarded: file size, zip-bomb and DTD checks run on the
zip directory before openpyxl opens anything, and legacy .xls is refused with a way to convert it.
Hidden and chart sheets are skipped and counted (`doc_stats` on the document's first row).

Tables are found, not assumed (`split_tables`): junk rows above a table are skipped, a one-cell row
above the header becomes the table's title, merged header cells are filled across, a header line
over another joins it as `Parent › Child`, and a blank gap followed by a new header starts a new
table. `excel.header_rows` pins the header where the heuristics guess wrong.

A row is rendered by the first template that fits its table (jobs.excel.templates) or as
`Header: value; …`, with values shown the way the workbook formats them. Then the row filters judge
it; an omitted row stays in the output with `omit_reason` = `<rule>: <what a person can check>`.
"""

from __future__ import annotations

import csv
import datetime as dt
import fnmatch
import io
import json
import os
import re
import warnings
import zipfile
import zlib
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from openpyxl.utils import get_column_letter

from jobs.chunks.ids import chunk_id, sha256_text
from jobs.chunks.quality import label, word_count
from jobs.config import ExcelConfig, QualityConfig
from jobs.embed.tokens import token_counter
from jobs.errors import ConfigError
from jobs.excel.templates import (
    SEPARATOR,
    Template,
    TemplateRegistry,
    TemplateTexts,
    clean_header,
    clean_text,
    load_templates,
    registry_from_texts,
    render_fallback,
)
from jobs.rows import doc_marker, error_row, storable

__all__ = ["SEPARATOR", "detect_header", "excel_to_chunks", "format_value", "preview", "read_workbook",
           "require_defusedxml", "split_tables", "write_discard_report"]


# openpyxl warns about what it drops ("Unknown extension", "no default style"): nothing a reader of the
# rows can act on, and once per sheet it floods the worker logs.
warnings.filterwarnings("ignore", category=UserWarning, module=r"openpyxl\.")


def require_defusedxml() -> None:
    """openpyxl parses untrusted XML; insist that it does so through defusedxml.

    defusedxml being importable is not enough: openpyxl decides once, when it is first imported,
    whether to use it (`openpyxl.xml.DEFUSEDXML`, off when OPENPYXL_DEFUSEDXML is anything but
    "True"), and binds its parsers then (openpyxl.xml.functions: `iterparse` reads every sheet and
    the shared strings). So the flag and the bound parser are what is checked."""
    try:
        import defusedxml  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the package depends on it
        raise RuntimeError("defusedxml must be installed to read workbooks safely (pip install defusedxml)") from exc
    import defusedxml.ElementTree
    import openpyxl.xml
    from openpyxl.xml import functions

    env = os.environ.get("OPENPYXL_DEFUSEDXML")
    why = f"OPENPYXL_DEFUSEDXML={env!r} in this process's environment" if env not in (None, "True") else \
        "defusedxml was not importable when openpyxl was first imported"
    if not openpyxl.xml.DEFUSEDXML:
        raise RuntimeError(f"openpyxl is not using defusedxml (openpyxl.xml.DEFUSEDXML is False: {why}); workbooks "
                           "are not read without it. Unset OPENPYXL_DEFUSEDXML (or set it to True) and restart")
    if functions.iterparse is not defusedxml.ElementTree.iterparse:
        parser = f"{getattr(functions.iterparse, '__module__', '?')}.{getattr(functions.iterparse, '__name__', '?')}"
        raise RuntimeError(f"openpyxl's XML parser is {parser}, not defusedxml's; workbooks are not read without it "
                           "(openpyxl.xml.functions was replaced after import?)")


# --- guards: checked before openpyxl opens the file ----------------------------------------------

_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # BIFF .xls, and password-protected .xlsx, live in OLE2
LEGACY_HINT = ("re-save it as .xlsx in Excel (File › Save As › Excel Workbook) or run "
               "`libreoffice --headless --convert-to xlsx FILE`")
_RATIO_MIN_BYTES = 1024 * 1024  # small parts (themes, styles) compress wildly without harm; the summed size covers them
_DTD = re.compile(rb"<!(?:DOCTYPE|ENTITY)", re.I)  # a DTD is where entity bombs ("billion laughs") are declared
_DTD_CARRY = len(b"<!DOCTYPE") - 1  # bytes kept from one block to the next, so a split marker is still seen
_DTD_BLOCK = 1024 * 1024  # decompressed bytes held at a time while a part is scanned
_XML_PARTS = (".xml", ".rels", ".vml")  # always scanned, whatever they hold
_SNIFF_BYTES = 512  # any other part is scanned when it opens like XML: openpyxl follows the package's
# relationships, not file names, so a sheet or a drawing may live in a part named anything
_BOMS = b"\xef\xbb\xbf\xff\xfe"  # the bytes of the UTF-8 and UTF-16 byte order marks
_DECLARED_ENCODING = re.compile(rb"^<\?xml\s[^>]*?\bencoding\s*=\s*[\"']([^\"']{1,40})[\"']")


def check_workbook_file(path: Path, cfg: ExcelConfig) -> None:
    """Refuse, with a ValueError naming the limit and its config key, what must not reach openpyxl."""
    size = path.stat().st_size
    if size > cfg.max_file_bytes:
        raise ValueError(f"workbook is {size:,} bytes, over excel.max_file_bytes={cfg.max_file_bytes:,}")
    with open(path, "rb") as fh:
        magic = fh.read(8)
    if path.suffix.lower() == ".xls" or magic == _OLE2_MAGIC:
        raise ValueError(f"legacy .xls workbook (or a password-protected one), which openpyxl cannot read; {LEGACY_HINT}")
    if path.suffix.lower() == ".xlsb":
        raise ValueError(f"binary .xlsb workbook, which openpyxl cannot read; {LEGACY_HINT}")
    if not zipfile.is_zipfile(path):
        raise ValueError("not an .xlsx/.xlsm file (not a zip archive); re-save it from Excel as .xlsx")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ValueError(f"not a readable zip archive ({exc}); re-save it from Excel as .xlsx") from exc
    with archive:
        infos = archive.infolist()
        if len(infos) > cfg.max_zip_entries:
            raise ValueError(f"workbook zip holds {len(infos):,} entries, over excel.max_zip_entries={cfg.max_zip_entries:,}")
        total = sum(i.file_size for i in infos)
        if total > cfg.max_uncompressed_bytes:
            raise ValueError(f"workbook expands to {total:,} bytes, over excel.max_uncompressed_bytes="
                             f"{cfg.max_uncompressed_bytes:,} (a zip bomb?)")
        for info in infos:
            ratio = info.file_size / max(info.compress_size, 1)
            if info.file_size >= _RATIO_MIN_BYTES and ratio > cfg.max_compression_ratio:
                raise ValueError(f"zip entry {info.filename} expands {ratio:,.0f}x ({info.compress_size:,} -> "
                                 f"{info.file_size:,} bytes), over excel.max_compression_ratio="
                                 f"{cfg.max_compression_ratio:g} (a zip bomb?)")
        for info in infos:
            if not info.is_dir():
                _refuse_dtd(archive, info)


def _markup(block: bytes) -> bytes:
    """The ASCII markup of a block: UTF-16 (and UTF-32) parts hold it with NUL bytes in between."""
    return block.replace(b"\x00", b"")


def _refuse_dtd(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Refuse a part that declares a DTD anywhere in it, or an encoding this scan cannot read.

    Every part whose name says XML is scanned, and every other part that opens like XML; the whole
    part, decompressed a block at a time (memory stays at one block, whatever the part's size). A
    DTD is only legal before the root element, but an XML parser is not what decides here: a marker
    anywhere is refused, at the cost of refusing a workbook no spreadsheet program writes."""
    name = info.filename
    try:
        with archive.open(info) as fh:
            block = fh.read(_SNIFF_BYTES)  # an image is not decompressed further than this
            head = _markup(block).lstrip(_BOMS).lstrip()
            if not name.lower().endswith(_XML_PARTS) and not head.startswith(b"<"):
                return  # an image, a binary: nothing parses it as XML
            declared = _DECLARED_ENCODING.match(head)
            if declared and not _markup_is_ascii(declared.group(1).decode("ascii", "replace")):
                raise ValueError(f"zip entry {name} declares encoding {declared.group(1).decode('ascii', 'replace')!r}, "
                                 "in which a DTD cannot be told apart; Excel writes UTF-8. Re-save the workbook in Excel")
            carry = b""
            while block:
                text = carry + _markup(block)
                if _DTD.search(text):
                    raise ValueError(f"zip entry {name} declares a DTD (<!DOCTYPE/<!ENTITY), which Excel never "
                                     "writes; refused as a possible entity-expansion ('billion laughs') attack")
                carry = text[-_DTD_CARRY:]
                block = fh.read(_DTD_BLOCK)
    except (RuntimeError, NotImplementedError, zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
        # encrypted, an unknown compression method, a torn or corrupt entry (CRC, deflate stream)
        raise ValueError(f"zip entry {name} cannot be read ({exc}); re-save the workbook in Excel") from exc


def _markup_is_ascii(encoding: str) -> bool:
    """Whether markup in `encoding` reads as ASCII once NUL bytes are dropped: UTF-8 and the other
    ASCII supersets, and UTF-16/UTF-32. EBCDIC code pages and UTF-7, which some XML parsers accept,
    would hide a `<!DOCTYPE` from the scan."""
    import codecs

    try:
        info = codecs.lookup(encoding)
    except LookupError:
        return False  # unknown to Python: openpyxl's parser could not read it either
    if info.name.startswith(("utf-16", "utf-32")):
        return True
    try:
        return _markup("<!DOCTYPE ENTITY>".encode(info.name)) == b"<!DOCTYPE ENTITY>" and info.name != "utf-7"
    except (UnicodeError, LookupError):
        return False


def _unreadable(exc: Exception) -> ValueError:
    return ValueError(f"openpyxl could not read the workbook: {type(exc).__name__}: {exc}; re-save it in Excel")


# --- values as the workbook shows them ----------------------------------------------------------

# Formula errors say nothing about the row; they read as empty cells.
_EXCEL_ERRORS = {"#N/A", "#DIV/0!", "#REF!", "#VALUE!", "#NAME?", "#NUM!", "#NULL!", "#SPILL!", "#CALC!"}
# One token of an Excel number-format section.
_FMT_TOKEN = re.compile(
    r'"(?P<quoted>[^"]*)"'                      # "literal text"
    r"|\\(?P<escaped>.)"                        # \x: one literal character
    r"|[_*]."                                   # _x pads by the width of x, *x fills with x: layout only
    r"|\[\$(?P<currency>[^\]\-]*)[^\]]*\]"      # [$€-407]: a currency symbol and its locale
    r"|\[[^\]]*\]"                              # [Red], [>=100]: colours and conditions
    r"|(?P<number>[#0?,.]*[#0?][#0?,.]*)"       # the digits: 0 and # placeholders, thousands comma, point
    r"|(?P<exp>[Ee][+-][0#]+)"                  # scientific exponent
    r"|(?P<general>General)"
    r"|(?P<other>.)",
    re.S,
)
_DATE_TOKEN = re.compile(r'yyyy|yy|mmmm|mmm|mm|m|dddd|ddd|dd|d|"[^"]*"|\\.|\[[^\]]*\]|[_*].|.', re.I | re.S)
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _general(value: float) -> str:
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.10g}"
    return str(value)


def _digits(value: float, block: str, exp: str | None) -> str:
    stripped = block.rstrip(",")
    value /= 1000 ** (len(block) - len(stripped))  # a trailing comma shows thousands: "#,##0," -> 12 for 12,345
    integer, _, fraction = stripped.partition(".")
    most = sum(ch in "0#?" for ch in fraction)
    least = fraction.count("0")
    if exp:
        return f"{value:.{most}E}"
    text = f"{value:{',' if ',' in integer else ''}.{most}f}"
    if most > least:  # "#" decimals are optional digits: 0.## shows 1.5, not 1.50
        keep = len(text) - (most - least)
        text = text[:keep] + text[keep:].rstrip("0")
        text = text.rstrip(".")
    return text


def _sections(fmt: str) -> list[str]:
    """positive;negative;zero;text, splitting on ';' outside quotes and escapes."""
    sections, current, quoted, escaped = [], [], False, False
    for ch in fmt:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == ";" and not quoted:
            sections.append("".join(current))
            current = []
            continue
        current.append(ch)
    return sections + ["".join(current)]


def _format_number(value: float, fmt: str) -> str:
    sections = _sections(fmt)
    section, signed = sections[0], value < 0
    if value < 0 and len(sections) > 1:
        section, signed = sections[1], False  # the section says how negatives look, e.g. (81)
    elif value == 0 and len(sections) > 2:
        section = sections[2]
    if "?/" in section:
        return _general(value)  # fractions: rare, and the general form says the same
    out: list[str] = []
    block = exp = None
    general = percent = False
    for m in _FMT_TOKEN.finditer(section):
        kind = m.lastgroup
        if kind in ("quoted", "escaped", "currency"):
            out.append(m.group(kind))
        elif kind == "number" and block is None:
            block = m.group("number")
            out.append("\0")
        elif kind == "exp":
            exp = m.group("exp")
        elif kind == "general" and block is None:
            general = True
            out.append("\0")
        elif kind == "other":
            ch = m.group("other")
            if ch.isalpha():
                return _general(value)  # date or time codes on a plain number: no reliable rendering
            percent = percent or ch == "%"
            if ch != "@":
                out.append(ch)
    if block is None and not general:
        return "".join(out).strip()  # a section with no digits, e.g. "—" for zero
    magnitude = abs(value) * (100 if percent else 1)
    shown = _general(magnitude) if general else _digits(magnitude, block, exp)
    text = "".join(out).replace("\0", shown).strip()
    return f"-{text}" if signed and shown.strip("0.,") else text


def _named_date(value: dt.date, fmt: str | None) -> str | None:
    """Dates whose format spells the month (`d mmmm yyyy`) read as the workbook shows them; others are ISO."""
    fmt = (fmt or "").split(";")[0]
    if "mmm" not in fmt.lower() or re.search(r"[hs]", re.sub(r'"[^"]*"|\[[^\]]*\]', "", fmt), re.I):
        return None
    out = []
    for tok in _DATE_TOKEN.findall(fmt):
        t = tok.lower()
        if t == "yyyy":
            out.append(f"{value.year:04d}")
        elif t == "yy":
            out.append(f"{value.year % 100:02d}")
        elif t in ("mmmm", "mmm"):
            out.append(_MONTHS[value.month - 1] if t == "mmmm" else _MONTHS[value.month - 1][:3])
        elif t in ("mm", "m"):
            out.append(f"{value.month:02d}" if t == "mm" else str(value.month))
        elif t in ("dddd", "ddd"):
            out.append(_DAYS[value.weekday()] if t == "dddd" else _DAYS[value.weekday()][:3])
        elif t in ("dd", "d"):
            out.append(f"{value.day:02d}" if t == "dd" else str(value.day))
        elif tok.startswith('"'):
            out.append(tok[1:-1])
        elif tok.startswith("\\"):
            out.append(tok[1:])
        elif not tok.startswith(("[", "_", "*")):
            out.append(tok)
    return "".join(out).strip() or None


def format_value(value, number_format: str | None = None) -> str:
    """A cell as the workbook shows it: percent, thousands, currency and negatives in parentheses follow the
    number format; dates are ISO unless the format spells the month; text is cleaned (tags, escapes, spaces)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dt.datetime):
        named = _named_date(value, number_format)
        if named:
            return named
        return value.date().isoformat() if value.time() == dt.time(0) else value.isoformat(sep=" ", timespec="minutes")
    if isinstance(value, dt.date):
        return _named_date(value, number_format) or value.isoformat()
    if isinstance(value, (dt.time, dt.timedelta)):
        return value.isoformat() if isinstance(value, dt.time) else str(value)
    if isinstance(value, (int, float)):
        try:
            return _format_number(value, number_format or "General")
        except (ValueError, OverflowError):
            return _general(value)
    text = clean_text(str(value))
    return "" if text in _EXCEL_ERRORS else text


# --- rows ---------------------------------------------------------------------------------------

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
        return None if not stripped or stripped in _EXCEL_ERRORS else value
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
    from openpyxl.utils.cell import range_boundaries

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
        for c1, r1, c2, r2, value, fmt in self.active:
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
    import openpyxl

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
        raise ValueError(f"CSV file is {size:,} bytes, over excel.max_file_bytes={cfg.max_file_bytes:,}")
    with open(path, "rb") as fh:
        sample_bytes = fh.read(64 * 1024)
    try:
        sample = sample_bytes.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.start < len(sample_bytes) - 3:  # not just a character cut at the sample's end
            raise ValueError(f"CSV file is not UTF-8 (byte {exc.start}); re-save it as 'CSV UTF-8'") from exc
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
                    raise ValueError(f"CSV line {reader.line_num}: {exc}") from exc
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


# --- tables: headers found, not assumed ---------------------------------------------------------

_MAX_HEADER_ROWS = 2  # a header line plus one parent line; more would swallow notes written above a table
_EVIDENCE_ROWS = 5  # rows below a candidate header that are looked at for typed values
_HEADER_CELL_WORDS = 15  # longer cells are notes or data, not column names
_TITLE_WORDS = 20
_YEAR = re.compile(r"(?:19|20)\d\d")  # 1900-2099: a year heading a column is a label, not a value


def _year_like(value) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value).is_integer() and 1900 <= value <= 2099
    return isinstance(value, str) and bool(_YEAR.fullmatch(value.strip()))


def _header_like(row: Row, single_ok: bool = False) -> bool:
    """Column names: text (or years), short, at least half distinct, two or more unless the table has one column."""
    cells = [(v, k) for v, k in zip(row.values, row.kinds) if k]
    if not cells or (len(cells) < 2 and not single_ok):
        return False
    texts = 0
    for value, kind in cells:
        if kind == TEXT:
            if word_count(str(value)) > _HEADER_CELL_WORDS:
                return False
            texts += 1
        elif not _year_like(value):
            return False
    labels = [format_value(v).casefold() for v, _ in cells]
    return texts > 0 and len(set(labels)) >= 0.5 * len(labels)  # repeated under year groups, but not all alike


def _title_like(row: Row) -> bool:
    """One short text cell: a table's caption, or a section line above it."""
    filled = [(v, k) for v, k in zip(row.values, row.kinds) if k]
    return len(filled) == 1 and filled[0][1] == TEXT and word_count(format_value(filled[0][0])) <= _TITLE_WORDS


def _evidence(window: list[Row], h: int) -> int:
    """Columns named by text (or a year) in row h whose first value below is a number, date or boolean: what
    makes a header a header rather than another text row."""
    body = [r for r in window[h + 1:] if not r.blank][:_EVIDENCE_ROWS]
    found = 0
    for col, (kind, value) in enumerate(zip(window[h].kinds, window[h].values)):
        if kind != TEXT and not (kind and _year_like(value)):
            continue
        for r in body:
            below = r.kind(col)
            if below:
                found += below == TYPED
                break
    return found


def _find_header(window: list[Row], *, strict: bool, current: tuple | None = None) -> int | None:
    """Index in `window` of a table's (last) header row, or None.

    First table of a sheet (`strict` False): the earliest text row with typed values right below it,
    unless the sheet's first row is itself a full-width header well above that row (then the
    typed values belong to a key/value table). Failing both, the first text row as wide as the table.
    After a blank gap inside a table (`strict`): only the block right after the gap is looked at, it
    may open with titles and a parent header line, and the header needs typed values below it (or
    repeats the current header) — otherwise the rows after the gap continue the table."""
    nonblank = [i for i, r in enumerate(window) if not r.blank]
    if not nonblank:
        return None
    widest = max(window[i].width for i in nonblank)
    single = widest == 1
    if strict:
        for pos, i in enumerate(nonblank):
            row = window[i]
            if i > nonblank[0] + pos:  # a blank row: the block right after the gap has ended
                return None
            if current is not None and row.key() == current:
                return i
            if _header_like(row, single) and _evidence(window, i):
                return i
            if pos >= 2 + _MAX_HEADER_ROWS - 1 or not (_title_like(row) or _header_like(row, single)):
                return None
        return None
    evidenced = next((i for i in nonblank if _header_like(window[i], single) and _evidence(window, i)), None)
    first = window[nonblank[0]]
    if _header_like(first, single) and first.width >= 0.8 * widest and (
            evidenced is None or evidenced > nonblank[0] + _MAX_HEADER_ROWS - 1):
        return nonblank[0]
    least = 1 if single else max(2, 0.6 * widest)
    wide = next((i for i in nonblank if _header_like(window[i], single) and window[i].width >= least), None)
    if evidenced is None:
        return wide
    # A text-only table in a block above the evidenced header is a table of its own, not junk above it.
    if wide is not None and wide < evidenced and wide + 1 < len(window) and not window[wide + 1].blank and \
            any(window[k].blank for k in range(wide, evidenced)):
        return wide
    return evidenced


def _settle(window: list[Row], h: int) -> int:
    """Move h down onto a header line right below it that is wider, or under merged cells of row h: that
    line names the columns and row h groups them (`Sales` merged over `2022 | 2023`)."""
    for _ in range(_MAX_HEADER_ROWS - 1):
        if h + 1 >= len(window):
            break
        row, below = window[h], window[h + 1]
        if below.blank or not _header_like(below) or not _evidence(window, h + 1) or \
                not (below.width > row.width or row.spans):
            break
        h += 1
    return h


def _groups(parent: Row, child: Row) -> bool:
    """Does `parent` group the columns named in `child`: two or more labels, or one merged over some of them
    (a single cell merged over the whole table is its title)."""
    if not _header_like(parent, single_ok=True):
        return False
    if len({format_value(v) for v in parent.values if v is not None}) >= 2:
        return True
    named = {c for c, k in enumerate(child.kinds) if k}
    return any(c2 > c1 and not named <= set(range(c1, c2 + 1)) for c1, c2 in parent.spans)


def _header_top(window: list[Row], h: int) -> int:
    """First line of the header ending at h: a parent line directly above joins it when the header block
    starts a block (blank row, title or window start above it)."""
    top = h
    while h - top < _MAX_HEADER_ROWS - 1 and top > 0:
        above = window[top - 1]
        if above.blank or not _groups(above, window[h]):
            break
        top -= 1
    if top < h and top > 0 and not (window[top - 1].blank or _title_like(window[top - 1])):
        return h  # text written above a header, not a parent line of it
    return top


def _title(window: list[Row], top: int) -> tuple[str | None, int]:
    """(title, rows used): up to two one-cell rows right above the header, blank rows between allowed."""
    i = top - 1
    while i >= 0 and window[i].blank:
        i -= 1
    lines: list[str] = []
    while i >= 0 and len(lines) < 2 and _title_like(window[i]):
        lines.insert(0, format_value(next(v for v in window[i].values if v is not None)))
        i -= 1
    return (": ".join(lines) or None), len(lines)


@dataclass
class Table:
    sheet: str
    number: int  # 1-based within the sheet
    title: str | None
    header_row: int | None  # Excel row number of the (last) header line; None = no header
    headers: list[str]
    key: tuple | None = None  # the header row's values, to spot it repeated further down
    template: Template | None = None
    binding: dict | None = None

    def label(self, col: int) -> str:
        if col < len(self.headers) and self.headers[col]:
            return self.headers[col]
        return f"Column {get_column_letter(col + 1)}"


def header_labels(lines: list[Row]) -> list[str]:
    """Per column, the header lines joined as `Parent › Child`. A merged header cell covers its range; an
    unmerged parent label covers the run of adjacent named columns under it when it is the only one there."""
    ncols = max(len(line.values) for line in lines)
    grid: list[list[str]] = []
    for line in lines:
        texts = [""] * ncols
        for c, (v, f) in enumerate(zip(line.values, line.formats)):
            if v is not None:
                texts[c] = clean_header(format_value(v, f if isinstance(v, dt.date) else None))
        for c1, c2 in line.spans:
            if c1 < ncols and texts[c1]:
                for c in range(c1 + 1, min(c2, ncols - 1) + 1):
                    texts[c] = texts[c] or texts[c1]
        grid.append(texts)
    child = grid[-1]
    for texts, line in zip(grid[:-1], lines[:-1]):
        merged = {c for c1, c2 in line.spans for c in range(c1, c2 + 1)}
        own = [c for c in range(ncols) if texts[c] and c not in merged]
        for c in own:
            if not child[c]:
                continue
            a, b = c, c
            while a > 0 and child[a - 1]:
                a -= 1
            while b < ncols - 1 and child[b + 1]:
                b += 1
            if sum(1 for x in own if a <= x <= b) == 1:
                for x in range(a, b + 1):
                    texts[x] = texts[x] or texts[c]
    headers = []
    for c in range(ncols):
        parts: list[str] = []
        for texts in grid:
            if texts[c] and texts[c] not in parts:
                parts.append(texts[c])
        headers.append(SEPARATOR.join(parts))
    return headers


def _make_table(sheet: str, number: int, lines: list[Row], title: str | None) -> Table:
    if title and title.casefold() == sheet.strip().casefold():
        title = None  # "Stanley Cups › Stanley Cups" says nothing twice
    if not lines:
        return Table(sheet, number, title, None, [])
    return Table(sheet, number, title, lines[-1].number, header_labels(lines), lines[-1].key())


class _Pushback:
    def __init__(self, rows: Iterator[Row]):
        self.rows = rows
        self.buffer: deque[Row] = deque()

    def __iter__(self):
        return self

    def __next__(self) -> Row:
        return self.buffer.popleft() if self.buffer else next(self.rows)

    def push(self, rows: list[Row]) -> None:
        self.buffer.extendleft(reversed(rows))


def _window(stream: _Pushback, size: int) -> list[Row]:
    out: list[Row] = []
    for row in stream:
        if not out and row.blank:
            continue
        out.append(row)
        if len(out) >= size:
            break
    return out


def split_tables(rows: Iterator[Row], sheet: str, *, scan: int, pin: int | None = None,
                 counts: Counter | None = None) -> Iterator[tuple[Table, Row]]:
    """(table, data row) for every non-blank data row of a sheet, holding at most `scan` rows at a time."""
    counts = counts if counts is not None else Counter()
    if pin is not None:
        yield from _pinned_tables(rows, sheet, pin, counts)
        return
    stream = _Pushback(iter(rows))
    table: Table | None = None
    number = 0
    while True:
        window = _window(stream, scan)
        if not window:
            return
        h = _find_header(window, strict=table is not None, current=table.key if table else None)
        if h is not None:
            h = _settle(window, h)
            top = _header_top(window, h)
            title, _ = _title(window, top)
            counts["excel_rows_above_headers"] += sum(1 for r in window[:top] if not r.blank)
            number += 1
            table = _make_table(sheet, number, window[top:h + 1], title)
            counts["excel_tables"] += 1
            stream.push(window[h + 1:])
        else:
            if table is None:
                number += 1
                table = _make_table(sheet, number, [], None)
                counts["excel_tables"] += 1
            stream.push(window)
        for row in stream:
            if row.blank:
                break  # a gap: the next window decides whether a new table starts after it
            if table.key is not None and row.key() == table.key:
                counts["excel_repeated_headers_skipped"] += 1
                continue
            yield table, row
        else:
            return


def _pinned_tables(rows: Iterator[Row], sheet: str, pin: int, counts: Counter) -> Iterator[tuple[Table, Row]]:
    """A pinned sheet is one table whose header is row `pin` (0: no header row at all)."""
    recent: deque[Row] = deque(maxlen=8)  # the rows just above the header, where its title is
    table = _make_table(sheet, 1, [], None) if pin == 0 else None
    counts["excel_tables"] += 1
    for row in rows:
        if table is None:
            if row.number < pin:
                recent.append(row)
                counts["excel_rows_above_headers"] += not row.blank
                continue
            window = list(recent)
            table = _make_table(sheet, 1, [row], _title(window, len(window))[0])
            continue
        if not row.blank:
            yield table, row


def _pinned_header(pins: list[dict], file_name: str, source_path: str, sheet: str) -> int | None:
    for pin in pins:
        if (fnmatch.fnmatch(file_name, pin["file"]) or fnmatch.fnmatch(source_path, pin["file"])) and \
                fnmatch.fnmatch(sheet.casefold(), pin["sheet"].casefold()):
            return int(pin["header_row"])
    return None


def detect_header(rows: list[list], scan: int) -> int | None:
    """Index of the header row among `rows` (lists of cell values), or None if no row looks like one."""
    window = [Row(i + 1, *_trimmed(list(r), [None] * len(r))) for i, r in enumerate(rows[:scan])]
    return _find_header(window, strict=False)


def read_workbook(path: str, cfg: ExcelConfig):
    """Yield (sheet name, column labels, Excel row number, [(value, number_format)]) for every data row."""
    counts: Counter = Counter()
    for sheet, rows in open_sheets(Path(path), cfg, counts):
        for table, row in split_tables(rows, sheet, scan=cfg.header_scan_rows, counts=counts):
            labels = [table.label(i) for i in range(max(len(row.values), len(table.headers)))]
            yield sheet, labels, row.number, list(zip(row.values, row.formats))


# --- rows into text, and the filters ------------------------------------------------------------

_WORDY = re.compile(r"[^\W\d_]{2,}")  # a word of two letters or more: text that can say what numbers mean


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


def judge(row: Row, cells: list[str], text: str, described: bool, cfg: ExcelConfig,
          patterns: list[re.Pattern]) -> tuple[str, str] | None:
    """(quality, `<rule>: <reason>`) for a row the filters omit, None for a row to embed."""
    fields = sum(1 for s in cells if s)
    if fields < cfg.min_fields:
        return "fragment", f"min_fields: {fields} non-empty cell(s), fewer than excel.min_fields={cfg.min_fields}"
    labels = [s for s, k in zip(cells, row.kinds) if k == TEXT and s]
    # Without text, a row is structural only when every cell is a mark such as "-----"; a "—" among
    # numbers is a zero.
    marks = [s for s, k in zip(cells, row.kinds) if k == TYPED and s and not any(ch.isalnum() for ch in s)]
    structural = labels or (marks if len(marks) == fields else [])
    if structural and all(any(p.fullmatch(s) for p in patterns) for s in structural):
        shown = ", ".join(repr(s) for s in structural[:3])
        return "context_dead", (f"structural: its only text is {shown}, matching excel.structural_patterns"
                                if labels else f"structural: only separators ({shown}), matching excel.structural_patterns")
    # Numbers are context-dead only when nothing says what they are: no template, no header row.
    if not described and cfg.numeric_ratio is not None:
        numeric = sum(1 for s, k in zip(cells, row.kinds) if k == TYPED and s)
        if numeric >= cfg.numeric_ratio * fields and not any(_WORDY.search(s) for s in labels):
            return "context_dead", (f"numeric: {numeric} of {fields} cells are numbers or dates and no text cell says "
                                    f"what they describe (excel.numeric_ratio={cfg.numeric_ratio:g}; "
                                    "a header row or a template can)")
    words = word_count(text)
    if words < cfg.min_words:
        return "fragment", f"min_words: {words} words, fewer than excel.min_words={cfg.min_words}"
    if words > cfg.max_words:
        return "too_long", f"max_words: {words} words, more than excel.max_words={cfg.max_words}"
    return None


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
    cells = [format_value(v, f) for v, f in zip(row.values, row.formats)]
    text, used = None, "fallback"
    if table.template is not None:
        text = table.template.render(table.binding, row.values, cells)
        used = table.template.name if text else used
    if text is None:
        text = render_fallback([table.label(i) for i in range(len(cells))], cells)
    path = [ctx.file_name, table.sheet] + ([table.title] if table.title else [])
    verdict = judge(row, cells, text, used != "fallback" or table.header_row is not None, ctx.cfg, ctx.patterns)
    return RowDraft(table.sheet, table, row.number, cells, text, used, path, verdict)


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
        pin = _pinned_header(cfg.header_rows, ctx.file_name, source_path, name)
        for table, row in split_tables(_counted(rows, counts), name, scan=cfg.header_scan_rows, pin=pin,
                                       counts=counts):
            yield _draft(ctx, table, row)


def _counted(rows: Iterator[Row], counts: Counter) -> Iterator[Row]:
    for row in rows:
        counts["excel_rows_read"] += not row.blank
        yield row


# --- the stage ----------------------------------------------------------------------------------

def excel_to_chunks(rows: list[dict], *, excel: ExcelConfig, quality: QualityConfig,
                    embedding_model: str, storage=None, templates: TemplateTexts | None = None) -> list[dict]:
    """Stage: work rows (workbooks) -> chunk rows, one per data row, or one error row per workbook.
    A workbook in an object store (or carried in the work item) is copied to a local temporary file
    first: openpyxl and the zip guards need a real file (`storage`: jobs.sources.fs.StorageOptions)."""
    out = []
    for work in rows:
        try:
            out.extend(_workbook_chunks(work, excel, quality, embedding_model, storage, templates))
        except Exception as exc:
            out.append(error_row(work, "parse_excel", exc))
    return out


def _workbook_chunks(work: dict, excel: ExcelConfig, quality: QualityConfig, embedding_model: str,
                     storage=None, templates: TemplateTexts | None = None) -> list[dict]:
    from jobs.sources.fs import work_local_file

    counter = token_counter(embedding_model)
    counts: Counter = Counter()
    with work_local_file(work, storage, max_bytes=excel.max_file_bytes) as path:
        drafts = list(iter_drafts(path, work["source_path"], excel, counts, templates=templates))
    for d in drafts:  # a cell's `_x0000_` escape reads back as NUL
        d.sheet, d.text, d.heading_path = (storable(v, counts) for v in (d.sheet, d.text, d.heading_path))
    doc_stats = json.dumps(dict(sorted(counts.items())))
    if not drafts:
        return [doc_marker(work, "empty", doc_stats=doc_stats)]
    crumbs = [SEPARATOR.join(d.heading_path) for d in drafts]
    embed_texts = [f"{crumb}\n\n{d.text}" for crumb, d in zip(crumbs, drafts)]
    token_counts = counter.count(embed_texts)
    chunks = []
    for seq, (d, crumb, embed_text, tokens) in enumerate(zip(drafts, crumbs, embed_texts, token_counts)):
        words = word_count(d.text)
        if d.verdict:
            q, omitted, reason = d.verdict[0], True, d.verdict[1]
        else:
            q, omitted, reason = label(d.text, words, tokens, counter.limit, "excel", quality)
        text_sha = sha256_text(d.text)
        chunks.append({
            "chunk_id": chunk_id(work["collection"], f"{work['source_path']}##{d.sheet}#{d.row}", text_sha,
                                 work["pipeline_fingerprint"]),
            "collection": work["collection"],
            "doc_id": work["doc_id"],
            "source_path": work["source_path"],
            "source_type": "excel",
            "heading_path": d.heading_path,
            "breadcrumb": crumb,
            "text": d.text,
            "embed_text": embed_text,
            "seq": seq,
            "sheet": d.sheet,
            "row": d.row,
            "tags": ["row", f"template:{d.template}"],
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
            "doc_stats": doc_stats if seq == 0 else None,
        })
    return chunks


# --- QA: the discard report and the preview -----------------------------------------------------

_REPORT_COLUMNS = ["file", "sheet", "row", "rule", "reason", "text"]


def write_discard_report(run_dir: Path) -> dict[str, Path]:
    """qa/excel_discarded.parquet and .csv: every omitted Excel row of the run with its rule and reason.
    Reads the named chunk parts only: a run killed mid-write can leave a `.parquet.tmp` behind."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    wanted = ["source_path", "source_type", "sheet", "row", "omitted", "omit_reason", "text"]
    records = []
    for part in sorted((run_dir / "chunks").glob("part-*.parquet")):
        for r in pq.read_table(part, columns=wanted).to_pylist():
            if r["source_type"] == "excel" and r["omitted"]:
                rule, _, reason = (r["omit_reason"] or "").partition(":")
                records.append({"file": r["source_path"], "sheet": r["sheet"], "row": r["row"], "rule": rule.strip(),
                                "reason": reason.strip(), "text": r["text"]})
    records.sort(key=lambda r: (r["file"] or "", r["sheet"] or "", r["row"] or 0))
    schema = pa.schema([("file", pa.string()), ("sheet", pa.string()), ("row", pa.int64()), ("rule", pa.string()),
                        ("reason", pa.string()), ("text", pa.large_string())])
    qa = run_dir / "qa"
    qa.mkdir(parents=True, exist_ok=True)
    parquet_path, csv_path = qa / "excel_discarded.parquet", qa / "excel_discarded.csv"
    pq.write_table(pa.Table.from_pylist(records, schema=schema), parquet_path)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=_REPORT_COLUMNS)
    writer.writeheader()
    writer.writerows(records)
    csv_path.write_text(buf.getvalue(), encoding="utf-8")
    return {"excel_discarded.parquet": parquet_path, "excel_discarded.csv": csv_path}


@dataclass
class _TablePreview:
    table: Table
    kept: list[RowDraft] = field(default_factory=list)
    dropped: list[RowDraft] = field(default_factory=list)
    n_kept: int = 0
    n_dropped: int = 0


def preview(path: Path, *, sheet: str | None = None, n: int = 10, excel: ExcelConfig,
            quality: QualityConfig) -> str:
    """What the Excel stage makes of a workbook, per sheet and table: the header found, the template matched
    (or why none), the first `n` rendered rows and the first `n` discarded ones with their reasons. Token
    limits are not checked here (no tokenizer is loaded), so `too_long` by tokens does not show."""
    path = Path(path)
    counts: Counter = Counter()
    seen: list[str] = []
    tables: dict[tuple[str, int], _TablePreview] = {}
    for d in iter_drafts(path, path.name, excel, counts, sheet=sheet, sheets_seen=seen):
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
        lines.extend(f"    row {d.row}: {d.text}" for d in tp.kept)
    if tp.dropped:
        lines.append(f"  discarded (first {len(tp.dropped)}):")
        lines.extend(f"    row {d.row}: {d.verdict[1]}\n      {d.text}" for d in tp.dropped)
    return lines
