"""`load --from-parquet` against the real store: a document written to two parts loads once."""

from jobs.config import JobConfig, apply_overrides
from jobs.load import load_from_parquet
from jobs.store.parquet import RunOutput
from tests.factories import chunk_row, doc_row, unit_vector


def _rows(doc, texts, collection="load_src"):
    return [chunk_row(doc, i, t, unit_vector(i, 4), collection) | doc_row(doc) for i, t in enumerate(texts)]


def test_a_document_in_two_parts_of_a_resumed_run_loads_once_as_its_last_version(tmp_path, store, pg_url):
    out = RunOutput(tmp_path / "run", 4)
    # Part 0 was written just before a kill (its commit never happened); the resumed run processed the
    # document again into part 1, and a repeated row inside part 1 must count once too.
    out.write_part(_rows("a", ["old 0", "old 1", "old 2"]) + _rows("b", ["b 0"]))
    out.write_part(_rows("a", ["new 0", "new 1"]) + _rows("a", ["new 0"]) + _rows("c", ["c 0"]))
    cfg = apply_overrides(JobConfig(), database_url=pg_url)
    loaded = load_from_parquet(cfg, [tmp_path / "run"], collection="load_dst")
    assert loaded["documents"] == 3 and loaded["vectors"] == 4
    assert loaded["duplicates_dropped"] == 4  # a's three rows of part 0, and the repeat in part 1
    coll = store.get_collection("load_dst")
    rows = store.conn.execute(f"SELECT source_path, seq, text FROM corpusmill.{coll.chunk_table} ORDER BY 1, 2").fetchall()
    assert rows == [("a.md", 0, "new 0"), ("a.md", 1, "new 1"), ("b.md", 0, "b 0"), ("c.md", 0, "c 0")]
    assert store.status("load_dst")["documents"] == {"done": 3, "failed": 0, "pending": 0}
    # Loading it again replaces rather than duplicates.
    assert load_from_parquet(cfg, [tmp_path / "run"], collection="load_dst")["vectors"] == 4
    assert store.status("load_dst")["chunks"] == 4
