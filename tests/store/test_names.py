"""Database object names: bounded to PostgreSQL's 63 bytes, distinct when long, stable when short."""

from jobs.store.names import bounded_name, chunk_table_name, index_name, lock_key


def test_chunk_table_names_are_safe_and_bounded():
    assert chunk_table_name("notes", "sentence-transformers/all-MiniLM-L6-v2", 384) == "chunks_notes_all_minilm_l6_v2_384"
    assert len(chunk_table_name("n" * 40, "x" * 80, 1024)) <= 63


def test_long_names_stay_distinct_and_short_names_keep_their_old_form():
    a, b = chunk_table_name("x" * 40, "model-a" * 5, 384), chunk_table_name("x" * 40, "model-b" * 5, 384)
    assert a != b and len(a) <= 63 and len(b) <= 63
    assert index_name("chunks_notes_all_minilm_l6_v2_384", "hnsw") == "chunks_notes_all_minilm_l6_v2_384_hnsw"
    assert index_name("chunks_notes_all_minilm_l6_v2_384", "doc") == "chunks_notes_all_minilm_l6_v2_384_doc_idx"
    assert bounded_name("é" * 40, "_hnsw").encode().__len__() <= 63  # bytes, not characters


def test_lock_keys_are_stable_and_per_schema():
    # Pinned: a run of an older version holding a collection's lock must still exclude this one.
    assert lock_key("corpusmill", "notes") == -5907635754718319003
    assert lock_key("other", "notes") != lock_key("corpusmill", "notes")
