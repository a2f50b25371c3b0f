"""The one summary of a list of counts (tokens, words, chunks per file) that metrics, the report and
`corpusmill stats` all print, so the same figure means the same thing everywhere."""

from __future__ import annotations

import statistics


def distribution(values: list[int] | list[float]) -> dict:
    """n, min, median, mean (one decimal), p95 (nearest rank) and max; all but n are None when empty."""
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


def length_summary(tokens: list[int], words: list[int]) -> dict:
    """Mean and median tokens and words of embedded chunks, as metrics.json and the report print them."""
    t, w = distribution(tokens), distribution(words)
    return {"tokens_mean": t["mean"], "tokens_median": t["median"], "words_mean": w["mean"], "words_median": w["median"]}
