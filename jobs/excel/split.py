"""Rows too long to embed, cut into parts that each stand alone.

A wide row (a value per state, per year, per vaccine) runs past `excel.max_words` or the embedding
model's window, whose tail the model never sees. Such a row is cut between its fields into parts that
each fit both; every part repeats the row's own names (its first cell and the text right after it)
and keeps the breadcrumb, so `Alabama; 2011-12: 93.6; SURVEY TYPE: Census` still says whose numbers
they are. Parts break where a column group ends when they can: where the top label of `Parent ›
Child` changes, or at a column headed by a year (`2009-10 | FOOTNOTES | SURVEY TYPE | …` repeated).
A label prefix all of a part's fields share goes into the part's breadcrumb once. A template's
sentence is not cut; it is flagged `too_long` as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

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
    `limit` tokens (`count`: the model's token counter, without special tokens). A label prefix that every
    field of a part shares (`MMR Vaccination › All kindergartners › 2009-10`, `… › TARGET`) goes into the
    part's breadcrumb once instead of before each of its values."""
    if draft.fields is None or draft.verdict is not None or len(draft.fields) - draft.lead < 2:
        return [draft]
    tokens = count([embed_text(draft)])[0] if count and limit else None
    if word_count(draft.text) <= max_words and (tokens is None or tokens <= limit):
        draft.tokens = tokens  # the stage counts every row's tokens; this one is counted already
        return [draft]
    head, rest = draft.fields[:draft.lead], draft.fields[draft.lead:]
    fit = _Fit(draft, head, max_words, count, limit)
    parts: list[list[int]] = []
    for run in _runs(rest):
        prefix = _common_prefix([rest[i][0] for i in run])
        shown = [_strip(rest[i], prefix) for i in run]
        parts += [[run[i] for i in p] for p in _pack_run(shown, prefix, fit)]
    parts = _merge(parts, rest, fit)
    if len(parts) < 2:
        return [draft]
    out = []
    for k, part in enumerate(parts, 1):
        prefix = _common_prefix([rest[i][0] for i in part])
        fields = head + [_strip(rest[i], prefix) for i in part]
        out.append(dataclasses.replace(draft, text=render_fields(fields), fields=fields, part=(k, len(parts)),
                                       heading_path=draft.heading_path + list(prefix)))
    return out


class _Fit:
    """What a part may hold: its words within `max_words` and its embed text within the model's window."""

    def __init__(self, draft, head: list[tuple], max_words: int, count, limit: int | None):
        self.draft, self.head, self.count, self.limit = draft, head, count, limit
        self.word_budget = max_words - word_count(render_fields(head))
        self._tokens: dict[str, int] = {}  # a field as shown -> its tokens: _merge asks again for the same ones

    def budgets(self, prefix: tuple) -> tuple[int, int | None]:
        if not (self.count and self.limit):
            return self.word_budget, None
        crumb = SEPARATOR.join(self.draft.heading_path + list(prefix))
        return self.word_budget, self.limit - self.count([f"{crumb}\n\n{render_fields(self.head)}"])[0]

    def costs(self, fields: list[tuple]) -> tuple[list[int], list[int]]:
        shown = [render_fields([f]) for f in fields]
        words = [word_count(s) for s in shown]
        if not (self.count and self.limit):
            return words, [0] * len(fields)
        new = [s for s in dict.fromkeys(shown) if s not in self._tokens]
        self._tokens.update(zip(new, self.count(new) if new else []))
        # WordPiece counts add up over whitespace-separated pieces; each `; ` between fields is one more.
        return words, [self._tokens[s] + 1 for s in shown]

    def fits(self, fields: list[tuple], prefix: tuple) -> bool:
        word_budget, token_budget = self.budgets(prefix)
        words, tokens = self.costs(fields)
        return sum(words) <= word_budget and (token_budget is None or sum(tokens) <= token_budget)


def _pack_run(shown: list[tuple], prefix: tuple, fit: _Fit) -> list[list[int]]:
    """One run's fields (labels without their shared prefix) into parts, evened out."""
    word_budget, token_budget = fit.budgets(prefix)
    words, costs = fit.costs(shown)
    token_budget = token_budget if token_budget is not None else 1
    groups = _groups(shown)
    parts = _pack(groups, words, costs, word_budget, token_budget)
    if len(parts) > 1:  # even parts read better than a full one and a stub, if that still takes as many
        even = _pack(groups, words, costs, min(word_budget, -(-sum(words) // len(parts)) + max(words)),
                     min(token_budget, -(-sum(costs) // len(parts)) + max(costs)))
        parts = even if len(even) == len(parts) else parts
    return parts


def _merge(parts: list[list[int]], rest: list[tuple], fit: _Fit) -> list[list[int]]:
    """Adjacent parts joined while the whole still fits (with the prefix all of it shares): runs of a few
    fields each (`Manufacturing › EU | … › Rest of world | … › Total`) need not be a part each."""
    out: list[list[int]] = []
    for part in parts:
        if out:
            joined = out[-1] + part
            prefix = _common_prefix([rest[i][0] for i in joined])
            if fit.fits([_strip(rest[i], prefix) for i in joined], prefix):
                out[-1] = joined
                continue
        out.append(part)
    return out


def _runs(fields: list[tuple]) -> list[list[int]]:
    """Consecutive fields under the same parent labels (all but the last level), two or more; fields alone
    under theirs (`1998-99 › outturn`, `1999-00 › outturn`) make runs with no parent shared."""
    runs: list[list[int]] = []
    parents: list[tuple] = []
    for i, (label, _, _) in enumerate(fields):
        parent = tuple(label.split(SEPARATOR)[:-1])
        if runs and parent and parent == parents[-1]:
            runs[-1].append(i)
        else:
            runs.append([i])
            parents.append(parent)
    merged: list[list[int]] = []
    alone = False
    for run in runs:
        if len(run) == 1 and alone:
            merged[-1] += run
        else:
            merged.append(run)
        alone = len(run) == 1
    return merged


def _common_prefix(labels: list[str]) -> tuple:
    """The parent levels every label shares, leaving each at least its last level."""
    split = [label.split(SEPARATOR) for label in labels]
    prefix: list[str] = []
    for level in zip(*[parts[:-1] for parts in split]):
        if len(set(level)) != 1:
            break
        prefix.append(level[0])
    return tuple(prefix)


def _strip(field: tuple, prefix: tuple) -> tuple:
    label, value, column = field
    return (SEPARATOR.join(label.split(SEPARATOR)[len(prefix):]), value, column) if prefix else field


def _groups(fields: list[tuple]) -> list[list[int]]:
    """Runs of field indices that belong together: one top label (`Sales › 2022`, `Sales › 2023`), and
    within it, or without one, a year and the columns after it up to the next year (`MMR › 2009-10 |
    MMR › FOOTNOTES | MMR › SURVEY TYPE`)."""
    groups: list[list[int]] = []
    top_before, in_year = None, False  # in_year: a year-headed group is open and no top label came since
    for i, (label, _, _) in enumerate(fields):
        top = label.split(SEPARATOR, 1)[0] if SEPARATOR in label else None
        year = year_like(label.rsplit(SEPARATOR, 1)[-1])
        if not groups or year or top != top_before or (top is None and not in_year):
            groups.append([i])
        else:
            groups[-1].append(i)
        in_year = top is None and (year or in_year)
        top_before = top
    return groups


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
