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


# Headings of sections that exist to point elsewhere; with a link in every item they are navigation.
_NAV_HEADING = re.compile(
    r"^(see also|related( pages| content| topics| articles| links)?|next steps|more information|further reading)$", re.I)


def is_navigation(heading: str, texts: list[str]) -> bool:
    """A section that only points elsewhere: every item is a link, or a "See also"-style heading
    over items that each carry a link (`* [hugo gen](/commands/hugo_gen/) - Generate docs`)."""
    if not texts:
        return False
    if all(is_link_only(t) for t in texts):
        return True
    return bool(_NAV_HEADING.match(heading.strip())) and all(_LINK.search(t) for t in texts)


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
