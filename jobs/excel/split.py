"""Rows too long to embed, cut into parts that each stand alone.

A wide row (a value per state, per year, per vaccine) runs past `excel.max_words` or the embedding
model's window, whose tail the model never sees. Such a row is cut between its fields into parts that
each fit both; every part repeats the row's own names (its first cell and the text right after it)
and keeps the breadcrumb, so `Alabama; 2011-12: 93.6; SURVEY TYPE: Census` still says whose numbers
they are. Parts break where a column group ends when they can: where the top label of `Parent ›
Child` changes, or at a column headed by a year (`2009-10 | FOOTNOTES | SURVEY TYPE | …` repeated).
A template's sentence is not cut; it is flagged `too_long` as before.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from jobs.chunks.quality import word_count
from jobs.excel.cells import SEPARATOR
from jobs.excel.tables import year_like
from jobs.excel.templates import render_fields

__all__ = ["embed_text", "split_row"]


def embed_text(draft) -> str:
    """What the model embeds for a row: its breadcrumb, then its text (jobs.excel.stage)."""
    return f"{SEPARATOR.join(draft.heading_path)}\n\n{draft.text}"


def split_row(draft, max_words: int, count: Callable[[list[str]], list[int]] | None = None,
              limit: int | None = None) -> list:
    """The row as one draft, or its parts when its text is over `max_words` words or its embed text over
    `limit` tokens (`count`: the model's token counter, without special tokens)."""
    if draft.fields is None or draft.verdict is not None or len(draft.fields) - draft.lead < 2:
        return [draft]
    over_tokens = count is not None and limit is not None and count([embed_text(draft)])[0] > limit
    if word_count(draft.text) <= max_words and not over_tokens:
        return [draft]
    head, rest = draft.fields[:draft.lead], draft.fields[draft.lead:]
    crumb = SEPARATOR.join(draft.heading_path)
    word_budget = max_words - word_count(render_fields(head))
    words = [word_count(render_fields([f])) for f in rest]
    if count is not None and limit is not None:
        # WordPiece counts add up over whitespace-separated pieces; each `; ` between fields is one more.
        base = count([f"{crumb}\n\n{render_fields(head)}"])[0]
        costs = [c + 1 for c in count([render_fields([f]) for f in rest])]
        token_budget = limit - base
    else:
        costs, token_budget = [0] * len(rest), 1
    groups = _groups(rest)
    parts = _pack(groups, words, costs, word_budget, token_budget)
    if len(parts) < 2:
        return [draft]
    # Even parts read better than a full one and a stub: pack again to the mean, if that still takes as many.
    even = _pack(groups, words, costs, min(word_budget, -(-sum(words) // len(parts)) + max(words)),
                 min(token_budget, -(-sum(costs) // len(parts)) + max(costs)))
    parts = even if len(even) == len(parts) else parts
    return [dataclasses.replace(draft, text=render_fields(head + [rest[i] for i in part]),
                                fields=head + [rest[i] for i in part], part=(k, len(parts)))
            for k, part in enumerate(parts, 1)]


def _groups(fields: list[tuple]) -> list[list[int]]:
    """Runs of field indices that belong together: one top label (`Sales › 2022`, `Sales › 2023`), or a
    year and the columns after it up to the next year."""
    groups: list[list[int]] = []
    top_before = None
    for i, (label, _, _) in enumerate(fields):
        top = label.split(SEPARATOR, 1)[0] if SEPARATOR in label else None
        starts = (not groups or year_like(label) or top != top_before or top is None and
                  not _after_year(fields, i))
        if starts:
            groups.append([i])
        else:
            groups[-1].append(i)
        top_before = top
    return groups


def _after_year(fields: list[tuple], i: int) -> bool:
    """Is there a year-headed column before field i with no top label since: field i is in its group."""
    for label, _, _ in reversed(fields[:i]):
        if SEPARATOR in label:
            return False
        if year_like(label):
            return True
    return False


def _pack(groups: list[list[int]], words: list[int], costs: list[int], word_budget: int,
          token_budget: int) -> list[list[int]]:
    """Fields into parts in order, whole groups while they fit, a group too big for a part alone cut
    between its fields; every part within both budgets (a single field over them stands alone)."""
    parts: list[list[int]] = []
    current: list[int] = []
    used_w = used_t = 0

    def fits(idx: list[int]) -> bool:
        return (used_w + sum(words[i] for i in idx) <= word_budget
                and used_t + sum(costs[i] for i in idx) <= token_budget)

    for group in groups:
        if current and not fits(group):
            parts.append(current)
            current, used_w, used_t = [], 0, 0
        for i in group:
            if current and not fits([i]):
                parts.append(current)
                current, used_w, used_t = [], 0, 0
            current.append(i)
            used_w += words[i]
            used_t += costs[i]
    if current:
        parts.append(current)
    return parts
