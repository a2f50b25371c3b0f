"""Markdown inline markup rendered to the text a reader sees, for what is embedded and shown as a path.

A chunk's `text` keeps its source span (so it can be quoted and located); its `embed_text` and its
breadcrumb hold this rendering: backslash escapes resolved (`\\(` → `(`), entities decoded, link and
image text kept and their URLs dropped, emphasis and code-span marks dropped, HTML anchors and
formatting tags dropped. A URL the reader sees (`<https://…>`, a bare one) is content and stays, and
so does a tag-like word that is no HTML (`<T>`, `<CommonParameters>`, `<path>` in a usage line).

markdown-it-py's CommonMark inline parser does the parsing (escapes, nested brackets, code spans
that protect their contents, intraword underscores); this module only decides what of each token a
reader sees. Block structure is parsed line by line in jobs/markdown/parse.py, which keeps the
offsets the chunk contract needs; a unit's lines reach here one unit at a time.
"""

from __future__ import annotations

import re
from functools import lru_cache

from markdown_it import MarkdownIt

# What a browser draws as formatting or nothing: dropped. Any other <word> is left as written.
_HTML_TAGS = frozenset(
    "a abbr b bdi bdo big br center cite code del dfn div em font i img ins kbd mark nobr p pre q s samp "
    "small span strike strong sub sup tt u var wbr".split())
_TAG_NAME = re.compile(r"</?([A-Za-z][A-Za-z0-9-]*)")
# `[text][ref]` / `[text][]`: a reference link whose definition the unit does not carry (definitions
# are dropped in normalization, and a unit is parsed alone), so the parser cannot see it as a link.
_REFERENCE_LINK = re.compile(r"\[((?:[^\[\]\\]|\\.)+)\]\[[^\[\]]*\]")
# Nothing a reader would see differently: no escape, bracket, code mark, tag, entity or emphasis.
_MARKUP = re.compile(r"[\\\[`<&*_!]")
_ITEM_START = re.compile(r"^[ \t]*(?:[-*+•]|\d{1,9}[.)])[ \t]+", re.M)  # where a list item (or sub-item) opens
_GAPS = re.compile(r"(?<=\S)[ \t]{2,}")  # left where a tag or mark went; indentation stays


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark")


def render_inline(text: str) -> str:
    """`text` (one unit: a sentence, a list item with its sub-items, a quote, a heading) as a reader sees
    it. Each list item is rendered whole (emphasis may span its lines) and keeps its indentation, the
    depth of a nested item, which the parser would take from a continuation line."""
    if not _MARKUP.search(text):
        return text
    starts = [m.start() for m in _ITEM_START.finditer(text)]
    bounds = ([0] if not starts or starts[0] else []) + starts + [len(text)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        piece = text[a:b].rstrip("\n")
        body = piece.lstrip(" \t")
        out.append(piece[:len(piece) - len(body)] + (_render(body) if _MARKUP.search(body) else body))
    return "\n".join(out).strip()


def _render(body: str) -> str:
    out = []
    for tok in _parser().parseInline(_REFERENCE_LINK.sub(r"\1", body))[0].children or []:
        kind = tok.type
        if kind in ("text", "code_inline", "image"):  # an image's content is its alt text
            out.append(tok.content)
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind == "html_inline":
            name = _TAG_NAME.match(tok.content)
            if name and name.group(1).lower() in _HTML_TAGS:
                out.append(" " if name.group(1).lower() == "br" else "")
            elif not tok.content.startswith("<!--"):
                out.append(tok.content)
        # link_open/close, em/strong marks: nothing a reader sees
    return _GAPS.sub(" ", "".join(out)).rstrip()
