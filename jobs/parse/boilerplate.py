"""Navigation debris in exported docs: link-only lines and "Related pages" style sections.

A section made only of links is a cross-reference list, not content: it becomes a `See also:` line
attached to the content before it, so its targets stay searchable without a chunk of bare links.
"""

from __future__ import annotations

import re

_LINK = re.compile(
    r"\[(?P<text>[^\]]+)\]\([^)]*\)"  # [text](url)
    r"|\[(?P<ref>[^\]]+)\]\[[^\]]*\]"  # [text][ref]
    r"|<https?://[^>]+>"  # <https://…>
    r"|https?://\S+"  # a bare URL
)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d{1,9}[.)])\s+")
_FILLER = re.compile(r"^[\s,;:.|·•\-–—]*$")  # what may sit between links on a navigation line


def is_link_only(text: str) -> bool:
    """True for a line or item whose visible content is nothing but links."""
    body = _BULLET.sub("", text.strip())
    if not body:
        return False
    return bool(_LINK.search(body)) and bool(_FILLER.match(_LINK.sub("", body)))


def link_texts(text: str) -> list[str]:
    out = []
    for m in _LINK.finditer(text):
        label = m.group("text") or m.group("ref") or m.group(0).strip("<>")
        out.append(" ".join(label.split()))
    return out


def see_also_line(texts: list[str]) -> str:
    labels = []
    for t in texts:
        for label in link_texts(t):
            if label not in labels:
                labels.append(label)
    return "See also: " + ", ".join(labels) + "." if labels else ""
