"""jobs/chunks/metadata.py: a document's metadata as every chunk carries it: JSON-safe, bounded."""

import datetime as dt
import json

from jobs.chunks.metadata import MAX_VALUE_CHARS, metadata_json, workbook_metadata


def test_front_matter_becomes_json_with_dates_as_text_and_storable_strings():
    meta = json.loads(metadata_json({"tags": ["a", "b"], "date": dt.date(2024, 5, 1), "when": dt.datetime(2024, 5, 1, 8),
                                     "n": 3, "ok": True, "ratio": float("nan"), "who\x00": "An\x00a", 7: "seven"}))
    assert meta == {"tags": ["a", "b"], "date": "2024-05-01", "when": "2024-05-01T08:00:00", "n": 3, "ok": True,
                    "ratio": "nan", "who": "Ana", "7": "seven"}


def test_a_value_too_large_for_every_chunk_is_left_out_and_named():
    meta = json.loads(metadata_json({"tags": ["x"], "body": "y" * (MAX_VALUE_CHARS + 1)}))
    assert meta == {"tags": ["x"], "_omitted_keys": ["body"]}


def test_no_metadata_is_null_and_a_workbook_names_its_sheets_once_in_order():
    assert metadata_json({}) is None and metadata_json(None) is None
    assert json.loads(workbook_metadata(["Cups", "Cups", "Notes", None])) == {"sheets": ["Cups", "Notes"]}
    assert workbook_metadata([]) is None
