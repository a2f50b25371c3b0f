"""Quality gates: compare a run's index and load metrics with configured maxima and say which ones fail, and by how much.

Inputs are the dict from `jobs.checks.index_metrics.index_metrics` and the run metrics written to qa/metrics.json
(`jobs.checks.metrics.run_metrics`). A gate set to None is off. A gate that is on but whose metric was not measured
(for example `max_at_limit_share` without a token limit) fails, so a misconfiguration cannot pass silently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jobs.config import QualityGates


@dataclass(frozen=True)
class GateFailure:
    gate: str
    limit: float
    actual: float | None  # None: the gate is on but its metric was not measured
    message: str


def _ratio(part, whole) -> float:
    return part / whole if whole else 0.0


def _fragment_rate(index: dict, run: dict) -> float | None:
    chunks = run.get("chunks")
    if chunks is None:
        return None
    # by_quality counts every chunk (omitted Excel fragments too), so the share is of all chunks.
    return _ratio(chunks.get("by_quality", {}).get("fragment", 0), chunks.get("total", 0))


def _failed_file_rate(index: dict, run: dict) -> float | None:
    files = run.get("files")
    if files is None:
        return None
    failed = files.get("failed", 0)
    return _ratio(failed, files.get("done", 0) + failed)


# gate → (metric name used in messages, how to read it)
_METRICS: dict[str, tuple[str, Callable[[dict, dict], float | None]]] = {
    "max_empty_vector_rate": ("empty_vector_rate", lambda index, run: index.get("empty_vector_rate")),
    "max_duplicate_neighbour_rate": ("duplicate_neighbour_rate", lambda index, run: index.get("duplicate_neighbour_rate")),
    "max_fragment_rate": ("fragment_rate", _fragment_rate),
    "max_failed_file_rate": ("failed_file_rate", _failed_file_rate),
    "max_near_zero_token_share": ("near_zero_share", lambda index, run: index.get("near_zero_share")),
    "max_at_limit_share": ("at_limit_share", lambda index, run: index.get("at_limit_share")),
}


def _fmt(actual: float, limit: float) -> tuple[str, str, str]:
    """actual, limit and excess at one shared precision: three decimals read well for rates, but a small excess
    must not print as "0.002 exceeds 0.002 by 0.000", so add decimals until the numbers tell apart."""
    for decimals in range(3, 10):
        a, lim, by = (f"{x:.{decimals}f}" for x in (actual, limit, actual - limit))
        if a != lim and float(by):
            break
    return a, lim, by


def check_gates(gates: QualityGates, index: dict, run_metrics: dict) -> list[GateFailure]:
    """Every gate that is on and exceeded (or unmeasured), in QualityGates field order; empty when all pass."""
    failures = []
    for gate, (metric, read) in _METRICS.items():
        limit = getattr(gates, gate)
        if limit is None:
            continue
        actual = read(index, run_metrics)
        if actual is None:
            failures.append(GateFailure(gate, limit, None, f"{metric} was not measured, so {gate} {limit:.3f} "
                                                           "cannot be checked"))
        elif actual > limit:
            a, lim, by = _fmt(actual, limit)
            failures.append(GateFailure(gate, limit, actual, f"{metric} {a} exceeds {gate} {lim} by {by}"))
    return failures
