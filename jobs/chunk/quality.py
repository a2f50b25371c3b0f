"""Quality bands: every chunk gets a label, and the ones worth nothing are omitted with a reason.

Omitted chunks stay in Parquet (the QA report shows them) but are neither embedded nor loaded.
"""

from __future__ import annotations

import re

from jobs.config import QualityConfig

_WORD = re.compile(r"\w+", re.UNICODE)
_ALPHA = re.compile(r"[^\W\d_]", re.UNICODE)  # a letter in any script


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def label(text: str, words: int, tokens: int, token_limit: int, source_type: str,
          cfg: QualityConfig) -> tuple[str, bool, str | None]:
    """(quality, omitted, omit_reason) for one chunk body."""
    if not _ALPHA.search(text):
        return "context_dead", True, "context_dead: no letters (numbers, punctuation or markup only)"
    floor = cfg.excel_fragment_words if source_type == "excel" else cfg.fragment_words
    if words < floor:
        return "fragment", True, f"fragment: {words} words < {floor}"
    if tokens > token_limit:
        # Kept and embedded (the model sees the first token_limit tokens) but flagged for review.
        return "too_long", False, None
    if words < cfg.short_words:
        return "short", False, None
    return "ok", False, None
