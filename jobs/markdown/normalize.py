"""Text normalization before chunking, counted per kind for the QA report.

Applied to prose units (sentences, list items, quotes); code, tables and HTML keep their exact
bytes apart from Unicode NFC, since whitespace and odd characters can be meaningful there. The one
exception is a table's delimiter row, whose dash runs shrink to `---`: wide tables otherwise spend
a hundred tokens of the model's window on dashes.
Offsets are never rewritten: chunks keep pointing at the source, and their `text` is the
normalized form of what they point at.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

_ZERO_WIDTH = re.compile("[\u200b\u200c\u200d\u2060\ufeff]")
_NBSP = re.compile("[\u00a0\u2007\u202f]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # Cc without \t \n \r
_SPACES = re.compile(r"(?<=\S)[ \t]{2,}")  # runs of blanks after text; leading indentation stays
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")
# A whole line that is only a Hugo shortcode ({{< x >}}, {{% x %}}, closing tags included): markup.
_SHORTCODE_LINE = re.compile(r"^[ \t]*\{\{[<%].*?[%>]\}\}[ \t]*(?:\n|$)", re.M)
# A whole line that is a CommonMark link reference definition (`[label]: destination "optional title"`):
# where links point, not content. Strict on purpose: `[Note]: read this first` is a sentence, not a link.
# parse.py drops paragraphs made only of these; here they go from inside mixed paragraphs.
LINK_DEFINITION = re.compile(
    r"^ {0,3}\[[^\]\n]+\]:[ \t]*(?:<[^>\n]*>|\S+)(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*(?:\n|$)", re.M)

class _HtmlComments:
    """`re.compile(r"<!--.*?-->", re.S)` for `.subn(repl, text)`, in one pass. The regex rescans to the
    end of the text from every `<!--` that no `-->` follows, which is quadratic: 80,000 characters of
    unclosed comment openers took 3.5 s, a long list item or paragraph would take hours. Once one
    opener finds no `-->` after it, no later one can, so the scan stops there."""

    @staticmethod
    def subn(repl: str, text: str) -> tuple[str, int]:
        out, pos, n = [], 0, 0
        while (i := text.find("<!--", pos)) >= 0:
            j = text.find("-->", i + 4)
            if j < 0:
                break
            out += (text[pos:i], repl)
            pos, n = j + 3, n + 1
        return ("".join(out) + text[pos:], n) if n else (text, 0)


_HTML_COMMENT = _HtmlComments()
# A line that is only a printed page number ("Page 3 of 12", "- 7 -"): export debris.
_PAGE_NUMBER = re.compile(
    r"^[ \t]*(?:page[ \t]+\d+(?:[ \t]+of[ \t]+\d+)?"  # Page 3 / Page 3 of 12
    r"|[-–—][ \t]*\d{1,4}[ \t]*[-–—])"  # - 7 -
    r"[ \t]*(?:\n|$)", re.M | re.I)
_EXACT_KINDS = {"code", "html"}
# A table's delimiter row (| --- | :---: |): pure layout, yet a tokenizer spends one token per dash.
_TABLE_RULE = re.compile(r"^(?=[\s|:-]*-{4,})[\s|:-]+$", re.M)
_DASHES = re.compile(r"-{4,}")


def _private_use(text: str) -> tuple[str, int]:
    n = sum(1 for ch in text if unicodedata.category(ch) == "Co")
    if not n:
        return text, 0
    return "".join(ch for ch in text if unicodedata.category(ch) != "Co"), n


def _shrink_rule(rule: str, counts: Counter) -> str:
    counts["table_rules"] += 1
    return _DASHES.sub("---", rule)


def normalize(text: str, kind: str, counts: Counter) -> str:
    """Normalized `text` of a unit of `kind`; `counts` gains one entry per kind of change."""
    nfc = unicodedata.normalize("NFC", text)
    if nfc != text:
        counts["nfc"] += 1
    text = nfc
    if kind in _EXACT_KINDS:
        return text
    if kind == "table":
        # Cells keep their exact spacing; only the delimiter row's dash runs shrink to `---`.
        return _TABLE_RULE.sub(lambda m: _shrink_rule(m.group(0), counts), text)
    for name, pattern, repl in (
        ("shortcode_lines", _SHORTCODE_LINE, ""),
        ("link_definitions", LINK_DEFINITION, ""),
        ("html_comments", _HTML_COMMENT, ""),
        ("page_numbers", _PAGE_NUMBER, ""),
        ("zero_width", _ZERO_WIDTH, ""),
        ("nbsp", _NBSP, " "),
        ("control", _CONTROL, ""),
    ):
        text, n = pattern.subn(repl, text)
        counts[name] += n
    text, n = _private_use(text)
    counts["private_use"] += n
    text, n = _SPACES.subn(" ", text)
    counts["spaces"] += n
    text, n = _BLANK_LINES.subn("\n\n", text)
    counts["blank_lines"] += n
    return text.strip()
