"""Short rows that are records of their table: kept, though under `excel.min_words`.

`min_words` (jobs.excel.filters) omits a row of few words as a fragment. A table's real records can be
that short (`Item: Winter tyres; Qty: 4; Where: Basement`), and a note spilled across the cells under
a table can be too (`Age: at the; Has kids: bottom,`). What tells them apart is how the table's other
rows look, nearby (up to `_NEIGHBOURS` rows either side; records, short rows and rows cut for length,
not rows omitted by another rule). A short row is a record when:

1. it starts in the table's row-header column: a column where the other rows write their own names
   (a row's first cell, and the text or years right after it that the header does not name apart:
   `2010 | Jan` under a `Period` merged over both, `North East | Imports` under an unnamed corner);
2. it holds a value: a cell in a column where the other rows hold values, not names (`2010 | Jan`
   with every figure marked missing, `WHO | ADULT` over a group, hold none);
3. none of its values goes against its column's kind (jobs.excel.reader: text, or a number, date
   or boolean; a column has one when 80 % of the other rows filling it hold it): no text under numbers,
   no number under text, no cell in a column no other row fills.

A short row with fewer than `_MIN_OTHERS` such rows around it keeps its omission. A row that is no
record keeps `min_words` as its rule, its reason saying which test it failed, so a person can check.
The stream is held back at most `_NEIGHBOURS` rows per table, so a sheet of any length streams through.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from openpyxl.utils import get_column_letter

from jobs.excel.reader import TEXT
from jobs.excel.tables import Table, year_like

__all__ = ["keep_short_records"]

_NEIGHBOURS = 30  # rows of the table either side of a short row that show what its records look like
_MIN_OTHERS = 2  # fewer rows around it than this: nothing to compare a short row with
# A column holds numbers (or text) when this share of the other rows filling it do; a column of both
# (a key/value list's values: `Clippy`, `2007-01-01`, `0.9`) takes either. jobs.excel.context's share.
_KIND_SHARE = 0.8
_RULE = "min_words"
_PROFILE_RULES = frozenset({_RULE, "max_words"})  # a row omitted for its length is still a record


@dataclass
class _Shape:
    """What one row shows: its filled columns and their kinds, and which of them are its own names."""

    eligible: bool  # a record, or a row omitted for its length only: part of the table's profile
    kinds: dict[int, int]  # filled column -> the reader's kind (TEXT or TYPED)
    first: int | None
    names: frozenset[int]


def _rule(verdict: tuple[str, str] | None) -> str | None:
    return None if verdict is None else verdict[1].split(":", 1)[0]


def _names(table: Table, cells: list[str], kinds: list[int]) -> list[int]:
    """The row's own names: its first filled cell and, when that is text or a year, the filled cells right
    after it that are text or years in columns the header does not name apart from it (unnamed, or under
    the same label: a header cell merged over both)."""
    filled = [c for c, s in enumerate(cells) if s]
    if not filled:
        return []
    first = filled[0]
    out = [first]
    if kinds[first] != TEXT and not year_like(cells[first]):
        return out
    label = table.headers[first] if table.named(first) else ""
    for c in filled[1:]:
        if kinds[c] != TEXT and not year_like(cells[c]):
            break
        if table.named(c) and table.headers[c] != label:
            break
        out.append(c)
    return out


def _shape(draft) -> _Shape:
    kinds = {c: draft.kinds[c] for c, s in enumerate(draft.cells) if s and c < len(draft.kinds)}
    names = _names(draft.table, draft.cells, draft.kinds)
    rule = _rule(draft.verdict)
    return _Shape(rule is None or rule in _PROFILE_RULES, kinds, names[0] if names else None, frozenset(names))


def _where(table: Table, col: int) -> str:
    return f"column {get_column_letter(col + 1)}" + (f" ({table.headers[col]})" if table.named(col) else "")


def _why_not(draft, shape: _Shape, others: list[_Shape]) -> str | None:
    """None when the short row is a record of its table (the module's three tests), else why it is not."""
    if len(others) < _MIN_OTHERS:
        return (f"not shown to be a record of its table: {len(others)} other row(s) of the table near it to "
                f"compare it with, fewer than {_MIN_OTHERS}")
    table, cells = draft.table, draft.cells
    filled = sorted(shape.kinds)
    fill = Counter(c for o in others for c in filled if c in o.kinds)
    named = Counter(c for o in others for c in filled if c in o.names)
    same = Counter(c for o in others for c in filled if o.kinds.get(c) == shape.kinds[c])

    def header_column(c: int) -> bool:  # where most of the other rows filling it write their names
        return fill[c] > 0 and 2 * named[c] > fill[c]

    first = filled[0]
    if not fill[first]:
        return (f"not a record of its table: it starts in {_where(table, first)}, which no other row near it "
                "fills")
    if not header_column(first):
        return (f"not a record of its table: it starts in {_where(table, first)}, where the table's other rows "
                "hold values, not the names they start with")
    values = [c for c in filled if not header_column(c)]
    if not values:
        shown = ", ".join(repr(cells[c]) for c in filled[:3])
        return (f"not a record of its table: it holds only names ({shown}), no value in the columns where the "
                "table's other rows hold theirs")
    for c in values:
        if not fill[c]:
            return (f"not a record of its table: {cells[c]!r} is in {_where(table, c)}, which no other row near it "
                    "fills")
        if fill[c] - same[c] >= _KIND_SHARE * fill[c]:
            text = shape.kinds[c] == TEXT
            return (f"not a record of its table: {cells[c]!r} in {_where(table, c)} is "
                    f"{'text' if text else 'a number, date or boolean'}, where {fill[c] - same[c]} of the "
                    f"{fill[c]} other rows that fill it hold {'numbers, dates or booleans' if text else 'text'}")
    return None


def _settle(window: list, shapes: list[_Shape], i: int, counts: Counter | None):
    """The window's draft i, its `min_words` omission lifted when it is a record of its table, or its
    reason told why not."""
    draft = window[i]
    if _rule(draft.verdict) != _RULE or shapes[i].first is None:
        return draft
    lo, hi = max(0, i - _NEIGHBOURS), min(len(window), i + _NEIGHBOURS + 1)
    others = [shapes[j] for j in range(lo, hi) if j != i and shapes[j].eligible and shapes[j].first is not None]
    why = _why_not(draft, shapes[i], others)
    if why is None:
        draft.verdict = None
        if counts is not None:
            counts["excel_short_records_kept"] += 1
    else:
        draft.verdict = (draft.verdict[0], f"{draft.verdict[1]}; {why}")
    return draft


def keep_short_records(drafts: Iterable, counts: Counter | None = None) -> Iterator:
    """The drafts of one sheet (jobs.excel.render.RowDraft, in order, before any is cut into parts) with
    each `min_words` omission of a row that is a record of its table lifted (counted in `counts` as
    `excel_short_records_kept`). Holds at most `_NEIGHBOURS` drafts ahead and behind."""
    window: list = []  # the current table's drafts: up to _NEIGHBOURS already given out, then those held
    shapes: list[_Shape] = []
    done = 0  # how many of `window` were given out
    for draft in drafts:
        if window and draft.table is not window[0].table:
            for i in range(done, len(window)):
                yield _settle(window, shapes, i, counts)
            window, shapes, done = [], [], 0
        window.append(draft)
        shapes.append(_shape(draft))
        while len(window) - done > _NEIGHBOURS:
            yield _settle(window, shapes, done, counts)
            done += 1
            if done > _NEIGHBOURS:
                del window[0], shapes[0]
                done -= 1
    for i in range(done, len(window)):
        yield _settle(window, shapes, i, counts)
