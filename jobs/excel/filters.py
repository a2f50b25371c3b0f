"""The row filters: which rendered rows are not worth embedding, and why, in words a person can check.

Each rule is configurable under `excel:` and names its key in the reason: too few non-empty cells
(`min_fields`), only structural text such as "Chapter 1" or "-----" and no number (`structural`),
numbers that nothing describes (`numeric`: no template and no header row say what they are), values that
would go out under generic `Column X` labels (`no_header`: no header was found for their columns), too few or too many words
(`min_words`, `max_words`). A `min_words` row that is a record of its table, judged by the table's
other rows, is kept after all (jobs.excel.records). An omitted row stays in the output with `omit_reason` =
`<rule>: <reason>`, and in the run's discard report (jobs.excel.discards).
"""

from __future__ import annotations

import re

from jobs.chunks.quality import word_count
from jobs.config import ExcelConfig
from jobs.excel.reader import TEXT, TYPED, Row

__all__ = ["judge"]

_WORDY = re.compile(r"[^\W\d_]{2,}")  # a word of two letters or more: text that can say what numbers mean


def judge(row: Row, cells: list[str], text: str, described: bool, cfg: ExcelConfig,
          patterns: list[re.Pattern], unnamed: int = 0, splittable: bool = False) -> tuple[str, str] | None:
    """(quality, `<rule>: <reason>`) for a row the filters omit, None for a row to embed. `unnamed`: how
    many of the row's values (its first, the row's own name, aside) sit in columns no header names.
    `splittable`: a row over `max_words` is cut into parts (jobs.excel.split) rather than omitted."""
    fields = sum(1 for s in cells if s)
    if fields < cfg.min_fields:
        return "fragment", f"min_fields: {fields} non-empty cell(s), fewer than excel.min_fields={cfg.min_fields}"
    labels = [s for s, k in zip(cells, row.kinds) if k == TEXT and s]
    # Without text, a row is structural only when every cell is a mark such as "-----"; a "—" among
    # numbers is a zero. A row with numbers is data whatever its label says: "Total" over a column's
    # sum states a figure no other row does.
    marks = [s for s, k in zip(cells, row.kinds) if k == TYPED and s and not any(ch.isalnum() for ch in s)]
    numbers = any(k == TYPED and any(ch.isdigit() for ch in s) for s, k in zip(cells, row.kinds) if s)
    structural = [] if numbers else labels or (marks if len(marks) == fields else [])
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
    if cfg.no_header_ratio is not None and unnamed and unnamed >= cfg.no_header_ratio * fields:
        return "context_dead", (f"no_header: {unnamed} of {fields} values are in columns that no header names "
                                f"(they would go out bare or as `Column X`): no header was found for their columns "
                                f"(excel.no_header_ratio="
                                f"{cfg.no_header_ratio:g}; excel.header_rows or a template can name them)")
    words = word_count(text)
    if words < cfg.min_words:
        return "fragment", f"min_words: {words} words, fewer than excel.min_words={cfg.min_words}"
    if words > cfg.max_words and not splittable:
        return "too_long", f"max_words: {words} words, more than excel.max_words={cfg.max_words}"
    return None
