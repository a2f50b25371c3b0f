"""Cell and header text as a reader sees it: OOXML escapes decoded, pasted tags dropped, dot leaders
(`December . . . . 12`) dropped, machine names (`first_name`, `dateOfBirth`) turned into words,
placeholder headers (`Column1`) dropped so the caller can name the column, footnote markers dropped
from labels, a label written as a path (`Hours ; Market ;`) read as levels; missing-value marks
(`..`, `N/A`, `[x]`) told apart from values; and the separator that joins a row's breadcrumb and
header levels."""

from __future__ import annotations

import re

SEPARATOR = " › "

_XML_ESCAPE = re.compile(r"_x([0-9A-Fa-f]{4})_")  # OOXML's escape for control characters, e.g. _x000D_
# An HTML/XML tag pasted into a cell (<br>, </b>, <span class="x">); a tag name must follow "<" directly,
# so comparisons such as "< 5" or "a<b" without a closing ">" are left alone.
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
# Placeholder headers that say nothing: Column1, Col 2, Field_3, Unnamed: 4, F5 (Access/pandas exports).
# Dot leaders, the typeset line of dots from a label to its value (`December . . . . . .`, `Total.........`):
# three or more dots (spaced or not) or two ellipsis characters after a word. Dots alone (`..`, `...`) are
# missing-value marks, kept for is_missing.
_DOT_LEADER = re.compile(r"(?<=[^\s.…])\s*(?:\.\s*){3,}|(?<=[^\s.…])\s*…{2,}\s*")
_GENERIC_HEADER = re.compile(r"(?:column|col|field|unnamed|f)[\s:_#-]*\d+", re.I)
# Machine names: snake_case or dotted (first_name, Sepal.Length); both sides of each separator are letters.
_MNEMONIC = re.compile(r"[^\W\d_]+(?:[._][^\W\d_]+)+")
_CAMEL = re.compile(r"[a-z]{2,}(?:[A-Z][a-z]+)+")  # strict camelCase: dateOfBirth, firstName (not iPhone, eBay)
# Footnote references in published tables' labels: `[Note 4]`, `(12)`, a letter glued to a word
# (`clear(a)`; `Altitude (m)` is a unit and stays), a trailing `*` or `†`, and a single digit glued to a
# word (`Revenue1`, `minimum standard1`, `Population2`; see unglue_digits). A reader of one row cannot follow them, and
# they split one column name into several spellings.
_NOTE_MARK = re.compile(r"\s*(?:\[\s*notes?\s*[\w.,\s]*\]|\(\d{1,2}\)|(?<=\w)\([a-z]\)|[*†‡§]+(?=\s|$))", re.I)
_GLUED_DIGIT = re.compile(r"(?<=[a-z]{3})\d$")
# How statistics offices mark a value that is missing, suppressed or not applicable: no value to embed.
# Not a bare `x` (ONS's older mark): `x | y` is also a header line. Dashes are kept among values: in
# ABS tables and financial statements `-` and `—` mean nil, a value (jobs/excel/filters.py).
_MISSING = frozenset({"..", "...", ".", "[x]", "[c]", "[z]", "[u]", "[w]", ":", "*", "n/a", "na", "n.a.",
                      "not available", "np", "n.p."})
_DASHES = frozenset({"-", "--", "–", "—"})


def clean_text(text: str) -> str:
    """Cell text as a reader sees it: escapes decoded, tags dropped, dot leaders dropped, whitespace
    collapsed."""
    text = _XML_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    text = _TAG.sub(" ", text)
    text = _DOT_LEADER.sub(" ", text)
    return " ".join(text.split())


def is_missing(text: str, dashes: bool = False) -> bool:
    """A cell that says its value is missing (`..`, `N/A`, `[x]`): shown as nothing. `dashes`: a dash
    too, which names no column but is a value (nil) among values."""
    key = text.strip().casefold()
    return key in _MISSING or (dashes and key in _DASHES)


def clean_label(text: str) -> str:
    """A label as a reader needs it: footnote markers dropped (`Year [Note 1]` -> `Year`, `2015 *` ->
    `2015`); a glued digit is for `unglue_digits`, which sees the whole header line."""
    return " ".join(_NOTE_MARK.sub(" ", text).split())


def unglue_digits(labels: list[str]) -> list[str]:
    """`Revenue1`, `Population2` -> `Revenue`, `Population`, unless that makes two labels of the line
    alike: `var1 | var2` are names, not footnotes."""
    stripped = [_GLUED_DIGIT.sub("", t) for t in labels]
    if len({t for t in stripped if t}) == len({t for t in labels if t}):
        return stripped
    return labels


def clean_header(text: str) -> str:
    """A header cell as words: `first_name` -> `first name`, `dateOfBirth` -> `date of birth`, footnote
    markers dropped. Generic placeholders (`Column1`, `Unnamed: 3`) and missing-value marks become
    empty, so the caller names the column by its letter."""
    text = clean_label(clean_text(text))
    if ";" in text:
        # A label that is a path (ABS: `Hours worked ;  Market ;  > Mining ;`): its levels joined as a
        # breadcrumb's, since `;` separates a row's fields in the text; `>` marks a level's indent there.
        text = SEPARATOR.join(p.strip().lstrip(">").strip() for p in text.split(";") if p.strip(" >"))
    if is_missing(text, dashes=True):
        return ""
    if _GENERIC_HEADER.fullmatch(text):
        return ""
    if _MNEMONIC.fullmatch(text):
        return re.sub(r"[._]", " ", text)
    if _CAMEL.fullmatch(text):
        return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text).lower()
    return text
