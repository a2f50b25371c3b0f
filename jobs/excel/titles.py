"""What a table is called: the title that goes into each of its rows' breadcrumb.

Published tables put their name above the header among other lines: an agency's name and a release time
above it, a designation badge, units and a basis below it, notes, note keys and a source anywhere. The
caption (`Table 4.3 Public sector expenditure … in real terms`) is what tells a row of Table 4.3 from one of
Table 4.2, so it is looked for first, a few lines up; notes are left out, whatever their place. A series
report's `key: value` lines (`Series title: | (Seas) Labor Force Participation Rate`) say what every row is.
"""

from __future__ import annotations

import re

from jobs.chunks.quality import word_count
from jobs.excel.formats import format_value
from jobs.excel.reader import TEXT, Row

__all__ = ["UNIT_LINE", "table_title"]

# A units line with no letter in it: an index base (`2018=100`) or a unit sign alone.
UNIT_LINE = re.compile(r"\s*(?:\(?(?:19|20)\d\d\s*=\s*100\)?|[%‰$£€¥])\s*")
_META_KEY_WORDS = 4  # `Series title:`, `Labor force status:`: a key is a short name
# A table's caption (`Table 4.3 Public sector expenditure … in real terms`), told by how it starts; it may run
# long. Above it a release line or an agency's name, between it and the header units and notes.
_CAPTION = re.compile(r"\s*(?:table|figure|chart|worksheet)[\s_]*[A-Z]?\d", re.I)
_CAPTION_WORDS = 40
_BARE_CAPTION_WORDS = 3  # `Table 3`, `Table 2.1`: a number, its name on the line under it
_TITLE_SCAN = 8  # one-cell lines looked at above a header for its title
# Lines above a table that are notes about it, not its name: sources, note keys, release times, a sheet's
# own description (ONS: `This worksheet contains one table.`, `Some cells refer to notes …`).
_NOTE_LINE = re.compile(r"\s*(?:(?i:sources?\s*:|notes?\s*(?::|\d|$)|\[note|released\b|this (?:worksheet|sheet|table)\b"
                        r"|some (?:cells|shorthand)\b|footnotes?\b|contents\s*(?::|$)|back to\b|\(?[a-z0-9]\)\s|[*†‡]"
                        r"|(?:accredited\s+)?(?:national|official)\s+statistics\s*$"  # a designation badge
                        r"|.*(?:https?://|www\.))"  # a link
                        r"|\d{1,2}\.?\s+[A-Z]\w*(?:\W+\w+){5})")  # a numbered note, `1 Underlying cause …`
_SCAN_ROWS = 16  # rows looked at above a header, notes included (_TITLE_SCAN counts the others)
# A short line between a caption and its header: a subtitle, units, basis (`by State, 2016`, `£ billion`); a
# longer one is a note (`Outturn data in this table … fall within the scope of National Statistics`).
_UNIT_WORDS = 8


def _meta_line(row: Row) -> str | None:
    """`Series title: | (Seas) Labor Force Participation Rate` above a table (BLS series reports): what every
    row of it is, as one `key: value` text; None for any other row."""
    filled = [(v, k) for v, k in zip(row.values, row.kinds) if k]
    if len(filled) != 2 or filled[0][1] != TEXT:
        return None
    key = format_value(filled[0][0])
    if not key.endswith(":") or word_count(key) > _META_KEY_WORDS:
        return None
    return f"{key} {format_value(filled[1][0])}"


def table_title(window: list[Row], top: int) -> str | None:
    """The title from the one-cell and `key: value` lines above the header (blank rows and notes
    between allowed, up to _TITLE_SCAN lines that are not notes): the nearest caption (`Table 4.3 …`) with the
    short lines between it and the header (subtitle, units, basis; under a bare `Table 3`, the line under
    it whatever its length), else the three nearest lines; then the `key: value` lines."""
    lines: list[str] = []  # nearest first, notes left out
    meta: list[str] = []
    i = top - 1
    while i >= 0 and top - i <= _SCAN_ROWS and len(lines) + len(meta) < _TITLE_SCAN:
        row = window[i]
        i -= 1
        if row.blank:
            continue
        pair = _meta_line(row)
        if pair is not None:
            meta.insert(0, pair)
            continue
        filled = [v for v, k in zip(row.values, row.kinds) if k]
        if len(filled) != 1:
            break
        text = format_value(filled[0])
        if not _NOTE_LINE.match(text):
            lines.append(text)
    caption = next((k for k, t in enumerate(lines) if _CAPTION.match(t) and word_count(t) <= _CAPTION_WORDS), None)
    if caption is not None:
        below = lines[:caption]
        units = [t for t in below if word_count(t) <= _UNIT_WORDS or UNIT_LINE.fullmatch(t)][:3]
        if below and word_count(lines[caption]) <= _BARE_CAPTION_WORDS and below[-1] not in units:
            units.append(below[-1])  # a bare `Table 3`: the line under it is its name, however long
        chosen = [t for t in below if t in units] + [lines[caption]]
    else:
        # A sentence that ends in a full stop is a note about the table (`Some cells … are blank.`), and a line
        # that ends in a colon introduces what follows: neither names it. A title may run over three lines.
        chosen = [t for t in lines if word_count(t) <= _CAPTION_WORDS and not t.rstrip().endswith(":")
                  and not (t.rstrip().endswith(".") and word_count(t) > _UNIT_WORDS)][:3]
    parts = list(reversed(chosen))
    title = ": ".join(parts)
    if meta:
        title = "; ".join([title, *meta] if title else meta)
    return title or None
