"""What a table's earlier rows tell a row: the labels a published table writes once per group.

Statistics tables name a group on its first row only (`England and Wales | Male | 2001 | …` over
`| | 2002 | …`; `1997 | Q1` over `| Q2`) and head runs of rows with a section line (`household
composition` over `couple under 60 | 13.7 | …`, where the header leaves the row-header column
unnamed). A row embedded alone must carry both: the blank cells before a row's first value take the
values above them, and a section line goes in front of the row label of every row under it. Only a
row's leading cells are carried — the first and the text cells right after it, its own names, when
they are text or a year — never a value cell; only into a row whose other cells are of the kinds
above them (a note written across a table's last rows is no group row); and never in a table
without a header (a blank there says nothing about the rows above).

Tables that indent their row labels say the same by indenting: `Men, 16 years and over` over `16 to 19
years` (one step in) over `16 to 17 years` (two): a row whose label is indented carries the labels of the
rows above it that are less indented, its parents (`Men, 16 years and over › 16 to 19 years › 16 to 17
years`), so the men's rows do not read as the women's. A lone label line counts as a parent too (`Women,
16 years and over` over `Married, spouse present`), section lines nest by their indent (`NUMBER OF
EMPLOYEES ('000)` over an indented `Males`), and a total is no child of the row above it nor, where it
closes a group, a parent of the row below; a table without indented labels is read as before.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from jobs.chunks.quality import word_count
from jobs.excel.cells import SEPARATOR
from jobs.excel.formats import format_value
from jobs.excel.reader import TEXT, Row
from jobs.excel.tables import year_like

__all__ = ["RowContext", "leading_names", "with_section"]

_SECTION_WORDS = 12  # a section line is a label; a longer lone cell is a note
# A lone cell that is a footnote, not a section: `(a) Includes …`, `[note 3]`, `* …`, `1. …`, `Source: …`
_FOOTNOTE = re.compile(r"\s*(?:\(\w{1,3}\)|\[|[*†‡]|\d{1,2}[.)]\s|(?:notes?|sources?|footnotes?)\b)", re.I)
_SAME_KINDS = 0.8  # a row whose blank leading cells are a group's: its other cells are of the kinds above
_TOTAL = re.compile(r"\s*(?:total|all)\b|.*\btotals?\s*$", re.I)  # `Total, 16 years and over`, `Fruit total`


def leading_names(filled: list[bool], kinds: list[int] | None) -> list[int]:
    """Columns of a row's own names: its first filled cell and the text cells right after it (`North
    East | Imports` before the figures). Without `kinds`, the first filled cell alone."""
    out: list[int] = []
    for i, f in enumerate(filled):
        if not f:
            continue
        text = kinds is not None and i < len(kinds) and kinds[i] == TEXT
        if out and not text:
            break
        out.append(i)
        if not text:
            break
    return out


class RowContext:
    """The carried labels of one table, fed its rows in order."""

    def __init__(self, enabled: bool, named: Callable[[int], bool] = lambda c: True, counts: Counter | None = None):
        self.enabled = enabled
        self.counts = counts if counts is not None else Counter()
        self.named = named  # does the header name column c
        self.above: dict[int, tuple] = {}  # column -> (value, number format) of the last row-header cell there
        self.lead: int | None = None  # the table's row-header column: where its rows start
        self.kinds: list[int] = []  # the last data row's cell kinds
        # (indent, label, is a section line) of what the next row may be under: section lines head the rows
        # of their own indent too, a row only those indented further
        self.stack: list[tuple[int, str, bool]] = []
        self.under: list[str] = []  # the last labelled row's parents: a row that takes its label from above
        self.level: int | None = None  # the last labelled row's indent

    def apply(self, row: Row) -> tuple[Row, str | None]:
        """(the row with its group labels filled in, the section heading it or None)."""
        if not self.enabled:
            return row, None
        filled = [c for c, k in enumerate(row.kinds) if k]
        if not filled:
            return row, None
        first = filled[0]
        if self._section_line(row, filled):
            level = row.indent(first)
            self._pop(level, sections=True)
            self.stack.append((level, format_value(row.values[first]), True))
            self.above, self.under, self.level = {}, [], level
            self.counts["excel_section_lines"] += 1
            return row, None
        parents = self._parents(row, first, lone=len(filled) < 2)
        section = SEPARATOR.join(label for label, _ in parents) or None
        if len(filled) < 2:
            return row, section
        if any(not is_section for _, is_section in parents):
            self.counts["excel_rows_given_parents"] += 1
        values, formats = list(row.values), list(row.formats)
        if self._continues(row, filled):
            for c in range(first):
                if c in self.above and values[c] is None:
                    values[c], formats[c] = self.above[c]
        if values != row.values:
            row = Row(row.number, values, formats, row.spans, row.indents)
            self.counts["excel_rows_given_group_labels"] += 1
            first = next(c for c, k in enumerate(row.kinds) if k)
        self.lead = first if self.lead is None else min(self.lead, first)
        self.kinds = list(row.kinds)
        self.above = {c: (row.values[c], row.formats[c]) for c in leading_names([bool(k) for k in row.kinds], row.kinds)
                      if row.kinds[c] == TEXT or year_like(row.values[c])}
        return row, section

    def _pop(self, level: int, sections: bool) -> None:
        """Off the stack: what is indented further than `level`, and what is at it (section lines only when
        `sections`: a new section line replaces the one at its indent, a row only the row before it)."""
        while self.stack:
            indent, _, is_section = self.stack[-1]
            if indent < level or (indent == level and is_section and not sections):
                break
            self.stack.pop()

    def _parents(self, row: Row, first: int, lone: bool) -> list[tuple[str, bool]]:
        """(label, is a section line) of what this row is under: the section lines above it and the less
        indented rows; the row then noted as a parent of those below it. A row whose label column is blank is
        under what the row above was. A total (`Total`, `All …`, `… total`) is under its section lines only,
        never a row above it, and one that ends a more indented group heads nothing."""
        if self.lead is not None and first > self.lead:
            return self.under
        label = format_value(row.values[first]) if row.kinds[first] == TEXT else ""
        level = row.indent(first)
        total = bool(_TOTAL.match(label))
        closing = total and self.level is not None and level < self.level
        self._pop(level, sections=False)
        self.under = [(text, is_section) for _, text, is_section in self.stack if is_section or not total]
        self.level = level
        if label and not closing and word_count(label) <= _SECTION_WORDS and not (lone and _FOOTNOTE.match(label)):
            self.stack.append((level, label, False))
        return self.under

    def _continues(self, row: Row, filled: list[int]) -> bool:
        """Does the row go on the pattern of the one above, cell kind for cell kind (most of them): a note
        written across a table's last rows (`at the | bottom,` under names and ages) does not."""
        same = sum(1 for c in filled if c < len(self.kinds) and self.kinds[c] == row.kinds[c])
        return same >= _SAME_KINDS * len(filled)

    def _section_line(self, row: Row, filled: list[int]) -> bool:
        """A lone short text in the row-header column, where the header leaves that column unnamed (as
        published tables do; a named column's lone value is a row with its other cells empty)."""
        c = filled[0]
        return (len(filled) == 1 and row.kinds[c] == TEXT and (self.lead is None or c <= self.lead)
                and not self.named(c) and word_count(format_value(row.values[c])) <= _SECTION_WORDS
                and not _FOOTNOTE.match(format_value(row.values[c])))


def with_section(cells: list[str], section: str | None) -> list[str]:
    """The row's cells with its section in front of its first (its label): `household composition ›
    couple under 60`."""
    if not section:
        return cells
    first = next((i for i, c in enumerate(cells) if c), None)
    if first is None or cells[first].casefold().startswith(section.casefold()):
        return cells
    out = list(cells)
    out[first] = f"{section}{SEPARATOR}{cells[first]}"
    return out
