"""Tables in a sheet's row stream: headers found, not assumed.

Junk rows above a table are skipped, a one-cell row above the header becomes the table's title (a
units line such as `£ million` or `2018=100` too), merged header cells are filled across, a header
line over another joins it as `Parent › Child`, and a blank gap followed by a new header starts a
new table. Between a header and its data, the header's own lines filled down again (vertical
merges), a row of series codes (ONS CDIDs `MV36 | MV37`) and time-series attribute rows (ABS `Unit`,
`Series ID`; a column's unit goes into its label) are header, not data. `split_tables` holds at
most `excel.header_scan_rows` rows at a time, so a sheet of any length streams through. Where the
heuristics guess wrong, `excel.header_rows` pins the header (`pinned_header`).

Over 400 lines on purpose: the header heuristics above read one another's state row by row; split,
each part would need the others' bookkeeping.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass

from openpyxl.utils import get_column_letter

from jobs.chunks.quality import word_count
from jobs.excel.cells import SEPARATOR, clean_header, clean_label, is_missing, unglue_digits
from jobs.excel.formats import format_value
from jobs.excel.reader import TEXT, TYPED, Row
from jobs.excel.templates import Template, file_matches, sheet_matches
from jobs.excel.titles import UNIT_LINE, table_title

__all__ = ["Table", "header_labels", "pinned_header", "split_tables", "year_like"]

_MAX_HEADER_ROWS = 2  # a header line plus one parent line; 3 took readxl key/value rows (clippy, type-me) for headers
# Merged cells are deliberate grouping: a line of them may sit above two others (ABS: Response clear ›
# Yes › no.). Unmerged text is not trusted that far (readxl's key/value rows).
_MAX_MERGED_HEADER_ROWS = 3
# A row-header cell merged down over the lines (`Characteristic`, `Description`) ties them into one header
# as firmly as merged parents do, a line more: place over group over measure over unit (Census, BLS).
_MAX_CORNER_HEADER_ROWS = 4
_EVIDENCE_ROWS = 5  # rows below a candidate header that are looked at for typed values
# Longer cells are notes or data, not column names. Published tables name columns at length ("Rate of all
# reported non-fatal injuries per 100,000 employees", 19 words), so the bound is loose; the evidence
# below a header (typed values) is what tells it from a row of notes.
_HEADER_CELL_WORDS = 30
_TITLE_WORDS = 20
# 1900-2099, or a financial year (2014-15, 2014/15, 2014–2015): a year heading a column is a label, not a value
_YEAR = re.compile(r"(?:19|20)\d\d(?:\s*[-/–]\s*(?:\d\d|(?:19|20)\d\d))?")


_UNIT_SIGN = re.compile(r"\s*[%‰$£€¥#]\s*")  # a unit line's cells (`no. | % | no. | %`): names, not values
# Time-series attribute rows (`_attribute_rows`): at most this many, each keyed by a short name; the key
# that gives a column's unit (ABS `Unit`, ONS `PreUnit`/`Unit`, `Unit of measure`).
_MAX_ATTRIBUTE_ROWS = 12
_ATTRIBUTE_KEY_WORDS = 4
_UNIT_KEY = re.compile(r"(?:pre\s*)?units?(?:\s+of\s+measure(?:ment)?)?", re.I)
# A band heading a column (`85+`, `0-4`, `<5`, `10–19`): ages and sizes, named by numbers.
_BAND = re.compile(r"\s*[<>≤≥]?\s*\d{1,3}\s*(?:\+|[-–]\s*\d{1,3})?\s*")


# A series or column code (ONS CDID `MV36`, `MVLR`, ABS `A84426298K`, `C1`): one token of capitals and digits
# with a capital; a row of codes has digits in most of them (`USA | NHS | EU` is a row of names). Quarters and
# halves (`Q1`, `H2`) are period names, which head columns.
_CODE = re.compile(r"(?=[A-Z0-9]*[A-Z])[A-Z0-9]{2,12}")
_PERIOD = re.compile(r"[QH]\d")


def year_like(value) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value).is_integer() and 1900 <= value <= 2099
    return isinstance(value, str) and bool(_YEAR.fullmatch(clean_label(value.strip())))  # `2015 *`: a year


def _header_like(row: Row, single_ok: bool = False, alike_ok: bool = False) -> bool:
    """Column names: text (or years, or a unit sign such as `%`), short, two or more unless the table has
    one column. Missing-value marks (`..`, `N/A`) name nothing and are left out. The names differ, unless
    `alike_ok` (the caller has typed values below as evidence): a line repeating one status or unit over
    every column (`outturn`, `£m`) is a header line under another. A line of years alone (`1998-99 |
    1999-00 | …`) is one too when it has three or more, all different."""
    cells = [(v, k) for v, k in zip(row.values, row.kinds) if k and not is_missing(format_value(v), dashes=True)]
    if not cells or (len(cells) < 2 and not single_ok):
        return False
    texts = 0
    for value, kind in cells:
        shown = format_value(value)
        if kind == TEXT or _UNIT_SIGN.fullmatch(shown) or (texts and isinstance(value, str) and _BAND.fullmatch(shown)):
            if word_count(clean_label(str(value))) > _HEADER_CELL_WORDS:
                return False
            texts += 1
        elif not year_like(value):
            return False
    labels = {clean_label(format_value(v)).casefold() for v, _ in cells}
    if texts == 0:
        return len(cells) >= 3 and len(labels) == len(cells)
    return len(labels) >= 2 or len(cells) == 1 or alike_ok


def _title_like(row: Row) -> bool:
    """One short text cell: a table's caption, a section line above it, or its units line (`£ million`,
    `%`, an index base `2018=100`), which goes into the title and so into every row's breadcrumb."""
    filled = [(v, k) for v, k in zip(row.values, row.kinds) if k]
    if len(filled) != 1:
        return False
    shown = format_value(filled[0][0])
    return word_count(shown) <= _TITLE_WORDS if filled[0][1] == TEXT else bool(UNIT_LINE.fullmatch(shown))


def _evidence(window: list[Row], h: int) -> int:
    """Columns named by text (or a year) in row h whose first value below is a number, date or boolean: what
    makes a header a header rather than another text row."""
    body = [r for r in window[h + 1:] if not r.blank][:_EVIDENCE_ROWS]
    found = 0
    for col, (kind, value) in enumerate(zip(window[h].kinds, window[h].values)):
        if kind != TEXT and not (kind and year_like(value)):
            continue
        for r in body:
            below = r.kind(col)
            if below:
                found += below == TYPED
                break
    return found


def _find_header(window: list[Row], *, strict: bool, current: tuple | None = None,
                 previous: Row | None = None) -> tuple[int | None, str]:
    """(index in `window` of a table's (last) header row, or None; why, in words for `templates preview`).

    First table of a sheet (`strict` False): the earliest text row with typed values right below it,
    unless the sheet's first row is itself a full-width header well above that row (then the
    typed values belong to a key/value table). Failing both, the first text row as wide as the table.
    After a blank gap inside a table (`strict`): only the block right after the gap is looked at, it
    may open with titles and a parent header line, and the header needs typed values below it (or
    repeats the current header) — otherwise the rows after the gap continue the table, as they do when the
    block opens with a value where the table's last row had one in the row-header column (`1997 | Q1 | …`
    under `2019 | …`: the quarters after the years, not a header of a year and a quarter)."""
    nonblank = [i for i, r in enumerate(window) if not r.blank]
    if not nonblank:
        return None, "no rows"
    widest = max(window[i].width for i in nonblank)
    single = widest == 1
    if strict:
        for pos, i in enumerate(nonblank):
            row = window[i]
            if i > nonblank[0] + pos:  # a blank row: the block right after the gap has ended
                return None, "the rows after a blank gap continue the table"
            if current is not None and row.key() == current:
                return i, "the table's header repeated after a blank gap"
            if pos == 0 and previous is not None and _continues(row, previous):
                return None, "the rows after a blank gap continue the table (a value in its row-header column)"
            if _header_like(row, single, alike_ok=True) and (found := _evidence(window, i)):
                return i, f"names over typed values in {found} column(s), after a blank gap"
            if pos >= 2 + _MAX_HEADER_ROWS - 1 or not (_title_like(row) or _header_like(row, single)):
                return None, "the rows after a blank gap continue the table"
        return None, "the rows after a blank gap continue the table"
    evidenced = next((i for i in nonblank if _header_like(window[i], single, alike_ok=True) and _evidence(window, i)),
                     None)
    first = window[nonblank[0]]
    if _header_like(first, single) and first.width >= 0.8 * widest and (
            evidenced is None or evidenced > nonblank[0] + _MAX_HEADER_ROWS - 1):
        return nonblank[0], "the sheet's first row names the columns across the table"
    least = 1 if single else max(2, 0.6 * widest)
    wide = next((i for i in nonblank if _header_like(window[i], single) and window[i].width >= least), None)
    wide_why = "the first row of short names as wide as the table (no typed values below it)"
    if evidenced is None:
        if wide is None:
            return None, (f"no row of short names over typed values, nor one as wide as the table, in the first "
                          f"{len(window)} rows (excel.header_scan_rows)")
        return wide, wide_why
    # A text-only table in a block above the evidenced header is a table of its own, not junk above it.
    if wide is not None and wide < evidenced and wide + 1 < len(window) and not window[wide + 1].blank and \
            any(window[k].blank for k in range(wide, evidenced)):
        return wide, wide_why + ", above a gap"
    return evidenced, f"the first row of short names over typed values ({_evidence(window, evidenced)} column(s))"


def _continues(row: Row, previous: Row) -> bool:
    first = next((c for c, k in enumerate(row.kinds) if k), None)
    return first is not None and row.kinds[first] == TYPED and previous.kind(first) == TYPED and \
        first == next((c for c, k in enumerate(previous.kinds) if k), None)


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
    # A merged parent may repeat one name over its groups (`All kindergartners` over each vaccine's columns).
    if not _header_like(parent, single_ok=True, alike_ok=bool(parent.spans)):
        return False
    if len({format_value(v) for v in parent.values if v is not None}) >= 2:
        return True
    named = {c for c, k in enumerate(child.kinds) if k}
    return any(c2 > c1 and not named <= set(range(c1, c2 + 1)) for c1, c2 in parent.spans)


def _same_corner(line: Row, header: Row) -> bool:
    """Does `line` hold the header's first label in the same column: a row-header cell (`Characteristic`)
    merged down over the whole header block, which ties its lines together as merged parents do."""
    first = next((c for c, k in enumerate(header.kinds) if k), None)
    return (first is not None and header.kinds[first] == TEXT and line.kind(first) == TEXT
            and not any(line.kinds[:first]) and line.values[first] == header.values[first])


def _header_top(window: list[Row], h: int) -> int:
    """First line of the header ending at h: a parent line directly above joins it when the header block
    starts a block (blank row, title or window start above it), or when the header's corner cell is merged
    down over both."""
    top = h
    while top > 0:
        above = window[top - 1]
        most = (_MAX_CORNER_HEADER_ROWS if _same_corner(above, window[h]) else
                _MAX_MERGED_HEADER_ROWS if above.spans else _MAX_HEADER_ROWS)
        if h - top >= most - 1 or above.blank or not _groups(above, window[top]):
            break
        top -= 1
    if top < h and top > 0 and not (window[top - 1].blank or _title_like(window[top - 1])
                                    or _same_corner(window[top], window[h])):
        return h  # text written above a header, not a parent line of it
    return top


def _line_texts(line: Row) -> list[set[str]]:
    """Per column, the text a header line shows there (a merged cell's across its range)."""
    texts = [{clean_header(format_value(v)).casefold()} if v is not None else set() for v in line.values]
    for c1, c2 in line.spans:
        if c1 < len(texts):
            for c in range(c1 + 1, min(c2 + 1, len(texts))):
                texts[c] |= texts[c1]
    return texts


def _repeats_header(row: Row, per_line: list[list[set[str]]]) -> bool:
    """Every cell of `row` is what one of the header lines shows in its column: a header line again, as a
    vertical merge filled down reads (`Public | Private` once more under `Public | Private`)."""
    shown = [(c, clean_header(format_value(v)).casefold()) for c, v in enumerate(row.values) if v is not None]
    if len(shown) < 2:
        return False
    return all(any(c < len(t) and text in t[c] for t in per_line) for c, text in shown)


def _own_cells(row: Row, per_line: list[list[set[str]]]) -> list[tuple[int, str]]:
    """(column, shown text) of the row's cells that do not repeat the header there (a vertical merge such
    as `Description` filled down beside the codes)."""
    out = []
    for c, v in enumerate(row.values):
        if v is None:
            continue
        text = format_value(v).strip()
        if not any(c < len(t) and clean_header(text).casefold() in t[c] for t in per_line):
            out.append((c, text))
    return out


def _code_row(row: Row, per_line: list[list[set[str]]]) -> bool:
    """Three or more distinct series codes, after at most two row labels (`Quarterly | MV54 | MV55 | …`,
    `Line | C1 | C2 | …`): identifiers of the columns, not a data row."""
    cells = [t for _, t in _own_cells(row, per_line)]
    lead = 0
    while lead < min(2, len(cells)) and not _is_code(cells[lead]):
        lead += 1
    codes = cells[lead:]
    return (len(codes) >= 3 and len(set(codes)) == len(codes) and all(map(_is_code, codes))
            and sum(any(ch.isdigit() for ch in c) for c in codes) > len(codes) / 2)


def _column_numbers(row: Row, per_line: list[list[set[str]]]) -> bool:
    """A row numbering the columns (`1 | 2 | 3 | 4`, or `1 | 2 | 3 | 1 | 2 | 3` under repeated groups):
    three or more whole numbers, each one more than the last or starting again at 1."""
    cells = _own_cells(row, per_line)
    if len(cells) < 3 or any(row.kinds[c] != TYPED for c, _ in cells):
        return False
    try:
        numbers = [int(t) for _, t in cells]
    except ValueError:
        return False
    return numbers[0] == 1 and all(b == a + 1 or b == 1 for a, b in zip(numbers, numbers[1:]))


def _is_code(text: str) -> bool:
    return bool(_CODE.fullmatch(text)) and not _PERIOD.fullmatch(text)


def _header_tail(window: list[Row], lines: list[Row], h: int) -> tuple[list[int], list[int], list[int]]:
    """(header lines repeated, code rows, attribute rows): indices in `window` of the rows between the header
    ending at h and the table's first row of values that belong to the header. Blank rows among them go with
    them. Code rows (series codes, column numbers) count only with values below them, so a table of codes
    keeps its first row."""
    repeated: list[int] = []
    codes: list[int] = []
    per_line = [_line_texts(line) for line in lines]  # what each header line shows per column, once
    j = h + 1
    while j < len(window):
        row = window[j]
        if row.blank:
            j += 1
            continue
        if _column_numbers(row, per_line) or _code_row(row, per_line):
            codes.append(j)
        elif TYPED not in row.kinds and _repeats_header(row, per_line):
            repeated.append(j)
        else:
            break
        j += 1
    if codes and not any(TYPED in r.kinds for r in window[j:]):
        codes = []
    return repeated, codes, _attribute_rows(window, j)


def _attribute_rows(window: list[Row], j: int) -> list[int]:
    """Rows from j on that describe each column rather than hold its values, as time-series downloads lay
    them out (ABS: `Unit | 000 Hours | …`, `Series Type`, `Series ID`; ONS: `CDID`, `Unit`): two or more
    rows keyed by distinct short texts in the row-header column, most of them with no value beside the key
    (`FLOW`, `Seasonally Adjusted`), over a run of dates or periods in that column. Data rows led by text
    (`Total | NHS establishments | 600,289`) over rows led by numbers repeat their keys or hold values."""
    rows: list[int] = []
    column = None
    while j < len(window) and len(rows) < _MAX_ATTRIBUTE_ROWS:
        row = window[j]
        first = next((c for c, k in enumerate(row.kinds) if k), None)
        if first is None or row.kinds[first] != TEXT or row.width < 2 or (column is not None and first != column) \
                or word_count(format_value(row.values[first])) > _ATTRIBUTE_KEY_WORDS:
            break
        column = first
        rows.append(j)
        j += 1
    data = [r for r in window[j:] if not r.blank][:_EVIDENCE_ROWS]
    if len(rows) < 2 or len(data) < 3 or any(r.kind(column) != TYPED for r in data):
        return []
    keys = [format_value(window[i].values[column]).casefold() for i in rows]
    described = sum(TYPED not in window[i].kinds for i in rows)
    return rows if len(set(keys)) == len(keys) and described * 2 >= len(rows) else []


def _with_units(table: Table, attributes: list[Row]) -> None:
    """A column's unit from its attribute rows (`Unit | 000 Hours`) goes into its label: `Hours worked (000
    Hours)`, so every value carries it. The other attributes (series type, IDs, dates) describe the series,
    not a value, and are left out."""
    for row in attributes:
        key = format_value(next(v for v in row.values if v is not None))
        if not _UNIT_KEY.fullmatch(key.strip()):
            continue
        for c, v in enumerate(row.values):
            unit = clean_header(format_value(v)) if v is not None else ""
            if unit and unit != key and table.named(c) and unit.casefold() not in table.headers[c].casefold():
                table.headers[c] = f"{table.headers[c]} ({unit})"


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
    why: str = ""  # how the header was found, or why none was (`templates preview`)
    pinned: bool = False  # excel.header_rows named the header (0: the sheet has none, as the user says)

    def named(self, col: int) -> bool:
        return col < len(self.headers) and bool(self.headers[col])

    def label(self, col: int) -> str:
        return self.headers[col] if self.named(col) else f"Column {get_column_letter(col + 1)}"


def header_labels(lines: list[Row]) -> list[str]:
    """Per column, the header lines joined as `Parent › Child`. A merged header cell covers its range; an
    unmerged parent label covers the run of adjacent named columns under it when it is the only one there.
    A label centred across a selection of cells reads as merged over them (jobs.excel.reader)."""
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
        grid.append(unglue_digits(texts))
    child = grid[-1]
    for texts, line in zip(grid[:-1], lines[:-1]):
        merged = {c for c1, c2 in line.spans for c in range(c1, c2 + 1)}
        # The corner's own label merged down the header block (`Characteristic` on every line) heads no group.
        own = [c for c in range(ncols) if texts[c] and c not in merged and texts[c] != child[c]]
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
    previous: Row | None = None  # the table's last data row
    number = 0
    while True:
        window = _window(stream, scan)
        if not window:
            return
        h, why = _find_header(window, strict=table is not None, current=table.key if table else None,
                              previous=previous)
        if h is not None:
            h = _settle(window, h)
            top = _header_top(window, h)
            title = table_title(window, top)
            counts["excel_rows_above_headers"] += sum(1 for r in window[:top] if not r.blank)
            number += 1
            table, previous = _make_table(sheet, number, window[top:h + 1], title), None
            table.why = why + (f"; {h - top + 1} header lines joined" if h > top else "")
            counts["excel_tables"] += 1
            repeated, codes, attributes = _header_tail(window, window[top:h + 1], h)
            if repeated or codes or attributes:
                _with_units(table, [window[i] for i in attributes])
                counts["excel_repeated_headers_skipped"] += len(repeated)
                counts["excel_code_rows_skipped"] += len(codes)
                counts["excel_attribute_rows_skipped"] += len(attributes)
                table.why += "".join([f"; {len(repeated)} header line(s) repeated below it" if repeated else "",
                                      f"; {len(codes)} row(s) of series codes or column numbers below it"
                                      if codes else "",
                                      f"; {len(attributes)} row(s) of series attributes below it" if attributes else ""])
                h = max(repeated + codes + attributes)
            stream.push(window[h + 1:])
        else:
            if table is None:
                number += 1
                table = _make_table(sheet, number, [], None)
                table.why = why
                counts["excel_tables"] += 1
            stream.push(window)
        for row in stream:
            if row.blank:
                break  # a gap: the next window decides whether a new table starts after it
            if table.key is not None and row.key() == table.key:
                counts["excel_repeated_headers_skipped"] += 1
                continue
            previous = row
            yield table, row
        else:
            return


def _pinned_tables(rows: Iterator[Row], sheet: str, pin: int, counts: Counter) -> Iterator[tuple[Table, Row]]:
    """A pinned sheet is one table whose header is row `pin` (0: no header row at all)."""
    recent: deque[Row] = deque(maxlen=8)  # the rows just above the header, where its title is
    table = _make_table(sheet, 1, [], None) if pin == 0 else None
    if table is not None:
        table.why, table.pinned = "excel.header_rows: the sheet has no header row", True
    counts["excel_tables"] += 1
    for row in rows:
        if table is None:
            if row.number < pin:
                recent.append(row)
                counts["excel_rows_above_headers"] += not row.blank
                continue
            window = list(recent)
            table = _make_table(sheet, 1, [row], table_title(window, len(window)))
            table.why, table.pinned = f"excel.header_rows: row {pin}", True
            continue
        if not row.blank:
            yield table, row


def pinned_header(pins: list[dict], file_name: str, source_path: str, sheet: str) -> int | None:
    """The header row `excel.header_rows` pins for this sheet (0: none), or None to find it. Pins match
    as templates do: the file glob against the name or the source path, the sheet glob ignoring case."""
    for pin in pins:
        if file_matches(file_name, source_path, [pin["file"]]) and sheet_matches(sheet, [pin["sheet"]]):
            return int(pin["header_row"])
    return None
