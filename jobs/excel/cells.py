"""Cell and header text as a reader sees it: OOXML escapes decoded, pasted tags dropped, machine
names (`first_name`, `dateOfBirth`) turned into words, placeholder headers (`Column1`) dropped so
the caller can name the column; and the separator that joins a row's breadcrumb and header levels."""

from __future__ import annotations

import re

SEPARATOR = " › "

_XML_ESCAPE = re.compile(r"_x([0-9A-Fa-f]{4})_")  # OOXML's escape for control characters, e.g. _x000D_
# An HTML/XML tag pasted into a cell (<br>, </b>, <span class="x">); a tag name must follow "<" directly,
# so comparisons such as "< 5" or "a<b" without a closing ">" are left alone.
_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")
# Placeholder headers that say nothing: Column1, Col 2, Field_3, Unnamed: 4, F5 (Access/pandas exports).
_GENERIC_HEADER = re.compile(r"(?:column|col|field|unnamed|f)[\s:_#-]*\d+", re.I)
# Machine names: snake_case or dotted (first_name, Sepal.Length); both sides of each separator are letters.
_MNEMONIC = re.compile(r"[^\W\d_]+(?:[._][^\W\d_]+)+")
_CAMEL = re.compile(r"[a-z]{2,}(?:[A-Z][a-z]+)+")  # strict camelCase: dateOfBirth, firstName (not iPhone, eBay)


def clean_text(text: str) -> str:
    """Cell text as a reader sees it: escapes decoded, tags dropped, whitespace collapsed."""
    text = _XML_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)
    text = _TAG.sub(" ", text)
    return " ".join(text.split())


def clean_header(text: str) -> str:
    """A header cell as words: `first_name` -> `first name`, `dateOfBirth` -> `date of birth`.
    Generic placeholders (`Column1`, `Unnamed: 3`) become empty, so the caller names the column by its letter."""
    text = clean_text(text)
    if _GENERIC_HEADER.fullmatch(text):
        return ""
    if _MNEMONIC.fullmatch(text):
        return re.sub(r"[._]", " ", text)
    if _CAMEL.fullmatch(text):
        return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", text).lower()
    return text
