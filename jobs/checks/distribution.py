"""The one summary of a list of counts (tokens, words, chunks per file) that metrics, the report and
`corpusmill stats` all print, so the same figure means the same thing everywhere."""

from __future__ import annotations

import statistics
from collections import Counter


def distribution(values: list[int] | list[float] | Counter) -> dict:
    """n, min, median, mean (one decimal), p95 (nearest rank) and max; all but n are None when empty.
    `values` may be a tally (value -> how many times), as a run's sink keeps them: its size is bounded by
    the distinct values (token counts stop at the model's window), not by the corpus."""
    if isinstance(values, Counter):
        return _tallied(values)
    if not values:
        return {"n": 0, "min": None, "median": None, "mean": None, "p95": None, "max": None}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "min": ordered[0],
        "median": statistics.median(ordered),
        "mean": round(statistics.fmean(ordered), 1),
        "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        "max": ordered[-1],
    }


def _tallied(tally: Counter) -> dict:
    """`distribution` of the values a tally stands for, without expanding it."""
    items = sorted((v, n) for v, n in tally.items() if n > 0)
    total = sum(n for _, n in items)
    if not total:
        return distribution([])

    def at(rank: int):  # the value at 0-based position `rank` of the sorted values
        seen = 0
        for v, n in items:
            seen += n
            if rank < seen:
                return v
        return items[-1][0]

    mid = total // 2
    median = at(mid) if total % 2 else (at(mid - 1) + at(mid)) / 2
    return {
        "n": total,
        "min": items[0][0],
        "median": median,
        "mean": round(sum(v * n for v, n in items) / total, 1),
        "p95": at(min(total - 1, int(0.95 * total))),
        "max": items[-1][0],
    }


def length_summary(tokens: list[int], words: list[int]) -> dict:
    """Mean and median tokens and words of embedded chunks, as metrics.json and the report print them."""
    t, w = distribution(tokens), distribution(words)
    return {"tokens_mean": t["mean"], "tokens_median": t["median"], "words_mean": w["mean"], "words_median": w["median"]}
