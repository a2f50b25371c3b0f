"""Quality bands: every chunk gets a label, and the ones worth nothing are omitted with a reason.

Omitted chunks stay in Parquet (the QA report shows them) but are neither embedded nor loaded.
Markdown fragments are flagged, not omitted: "Article 32 guarantees the right to constitutional
remedies" is short and still worth retrieving. What is omitted carries nothing on its own: no
letters at all, or a short pointer elsewhere ("see above", "click here", "See [boolean](g).").
"""

from __future__ import annotations

import re

from jobs.config import QualityConfig

_WORD = re.compile(r"\w+", re.UNICODE)
_ALPHA = re.compile(r"[^\W\d_]", re.UNICODE)  # a letter in any script
_LEADING_MARKUP = re.compile(r"^[\s>*_#\-•\d.)\[(]+")  # bullets, quote marks, emphasis before the first word


# "See [_boolean_](g)." / "See the [`css.Sass`](/functions/css/sass) function.": a pointer, no content.
_POINTER_OPENING = re.compile(r"^see\b", re.IGNORECASE)
_MD_LINK = re.compile(r"\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])?")


def _only_points(text: str, max_words: int) -> bool:
    opening = _LEADING_MARKUP.sub("", text)
    if not _POINTER_OPENING.match(opening) or not _MD_LINK.search(opening):
        return False
    # Link targets are not words of the chunk; the link's own text is.
    return word_count(_MD_LINK.sub(lambda m: m.group(1), opening)) <= max_words


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def _starts_dead(text: str, starters: list[str]) -> str | None:
    opening = _LEADING_MARKUP.sub("", text).casefold()
    return next((s for s in starters if opening.startswith(s.casefold())), None)


def label(text: str, words: int, tokens: int, token_limit: int, source_type: str,
          cfg: QualityConfig) -> tuple[str, bool, str | None]:
    """(quality, omitted, omit_reason) for one chunk body."""
    if not _ALPHA.search(text):
        return "context_dead", True, "context_dead: no letters (numbers, punctuation or markup only)"
    if source_type == "excel":
        if words < cfg.excel_fragment_words:
            return "fragment", True, f"fragment: {words} words < {cfg.excel_fragment_words}"
    else:
        starter = _starts_dead(text, cfg.context_dead_starters) if words <= cfg.context_dead_max_words else None
        if starter:
            return "context_dead", True, f"context_dead: opens with {starter!r} and has {words} words"
        if _only_points(text, cfg.pointer_max_words):
            return "context_dead", True, f"context_dead: only points to another page ({words} words)"
        if words < cfg.fragment_words:
            return "fragment", False, None
    if tokens > token_limit or words > cfg.too_long_words:
        # Kept and embedded but flagged: the model sees only its first token_limit tokens.
        return "too_long", False, None
    if words < cfg.short_words:
        return "short", False, None
    return "ok", False, None
