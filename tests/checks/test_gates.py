import dataclasses

import numpy as np
import pytest
from pydantic import ValidationError

from jobs.checks.gates import _METRICS, GateFailure, check_gates
from jobs.checks.index_metrics import index_metrics
from jobs.config import QualityGates
from tests.factories import chunk_row, doc_row, unit_vector

DIM = 8



_chunk, _doc = chunk_row, doc_row


def _unit(i, dim=DIM):
    return unit_vector(i, dim)


def _run(fragments=0, embedded=100, done=10, failed=0):
    return {"files": {"add": done + failed, "done": done, "empty": 0, "failed": failed},
            "chunks": {"total": embedded, "embedded": embedded, "omitted": 0, "by_quality": {"ok": embedded - fragments,
                                                                                            "fragment": fragments}}}


def _index(empty=0.0, dup=0.0, near_zero=0.0, at_limit=None):
    return {"empty_vector_rate": empty, "duplicate_neighbour_rate": dup, "near_zero_share": near_zero,
            "at_limit_share": at_limit}


def test_defaults_and_strict_config():
    g = QualityGates()
    assert g.max_empty_vector_rate == 0.002 and g.max_duplicate_neighbour_rate == 0.01
    assert g.max_fragment_rate is g.max_failed_file_rate is g.max_near_zero_token_share is g.max_at_limit_share is None
    assert all(f.description for f in QualityGates.model_fields.values())
    assert list(_METRICS) == list(QualityGates.model_fields)  # every gate is checked, in declaration order
    with pytest.raises(ValidationError, match="extra"):
        QualityGates(max_dup_rate=0.1)
    with pytest.raises(ValidationError):
        QualityGates(max_empty_vector_rate=-0.1)
    assert QualityGates.model_validate({"max_fragment_rate": 0.2, "max_empty_vector_rate": None}).max_empty_vector_rate is None


def test_all_gates_pass():
    gates = QualityGates(max_fragment_rate=0.05, max_failed_file_rate=0.1, max_near_zero_token_share=0.02,
                         max_at_limit_share=0.1)
    assert check_gates(gates, _index(0.001, 0.01, 0.02, 0.1), _run(fragments=5, done=9, failed=1)) == []


def test_duplicate_gate_fails_with_how_much():
    [f] = check_gates(QualityGates(), _index(dup=0.034), _run())
    assert f == GateFailure("max_duplicate_neighbour_rate", 0.01, 0.034,
                            "duplicate_neighbour_rate 0.034 exceeds max_duplicate_neighbour_rate 0.010 by 0.024")
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.actual = 0.0


def test_run_metric_gates():
    gates = QualityGates(max_fragment_rate=0.05, max_failed_file_rate=0.1)
    failures = check_gates(gates, _index(), _run(fragments=10, embedded=100, done=8, failed=2))
    assert [(f.gate, f.actual) for f in failures] == [("max_fragment_rate", pytest.approx(0.1)),
                                                      ("max_failed_file_rate", pytest.approx(0.2))]
    assert failures[0].message == "fragment_rate 0.100 exceeds max_fragment_rate 0.050 by 0.050"
    assert failures[1].message == "failed_file_rate 0.200 exceeds max_failed_file_rate 0.100 by 0.100"


def test_zero_denominators_pass():
    gates = QualityGates(max_fragment_rate=0.0, max_failed_file_rate=0.0)
    run = {"files": {"done": 0, "failed": 0}, "chunks": {"embedded": 0, "by_quality": {}}}
    assert check_gates(gates, _index(), run) == []


def test_gates_set_to_none_are_skipped():
    off = QualityGates(max_empty_vector_rate=None, max_duplicate_neighbour_rate=None)
    assert check_gates(off, _index(empty=0.5, dup=0.9, near_zero=0.5, at_limit=None), _run(fragments=90, failed=10)) == []


def test_a_gate_on_an_unmeasured_metric_fails():
    [f] = check_gates(QualityGates(max_at_limit_share=0.1), _index(at_limit=None), _run())
    assert f.gate == "max_at_limit_share" and f.actual is None
    assert f.message == "at_limit_share was not measured, so max_at_limit_share 0.100 cannot be checked"


def test_tiny_excess_is_not_printed_as_zero():
    [f] = check_gates(QualityGates(), _index(empty=0.0024), _run())
    assert f.message == "empty_vector_rate 0.0024 exceeds max_empty_vector_rate 0.0020 by 0.0004"


def _load(store, name, vectors):
    """A document per vector: duplicates are counted across documents (jobs/checks/index_metrics.py)."""
    coll = store.ensure_collection(name, "m", DIM)
    for i, v in enumerate(vectors):
        store.commit_document(coll, _doc(f"{name}-{i}"), [_chunk(f"{name}-{i}", 0, f"t{i}", v, name)], "r1")
    return coll


def test_gates_on_real_index_metrics(store):
    clean = _load(store, "qa_idx_gate_clean", [_unit(i) for i in range(6)])
    assert check_gates(QualityGates(), index_metrics(store, clean), _run()) == []

    dup = np.array([1, 2, 3, 0, 0, 0, 0, 0], dtype=np.float32)
    zero = np.zeros(DIM, dtype=np.float32)
    dirty = _load(store, "qa_idx_gate_dirty", [*(_unit(i) for i in range(6)), dup, dup.copy(), zero])
    failures = check_gates(QualityGates(), index_metrics(store, dirty), _run())
    assert [f.message for f in failures] == [
        "empty_vector_rate 0.111 exceeds max_empty_vector_rate 0.002 by 0.109",         # 1 of 9 vectors
        "duplicate_neighbour_rate 0.250 exceeds max_duplicate_neighbour_rate 0.010 by 0.240",  # 2 of 8 non-empty
    ]
