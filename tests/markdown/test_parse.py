import json

import pytest

from jobs.markdown.parse import clean_heading, parse_documents, parse_markdown, read_source_text
from tests.conftest import CORPUS

DOC = """---
title: "Working with fences"
tags: [a, b]
---

Intro before any heading.

# Working with fences {#top}

Para one.

```bash
# this is a comment, not a heading
echo hi
```

Second level
------------

- item one
- item two
  continued

| a | b |
|---|---|
| 1 | 2 |

## Sub <!-- hidden --> heading <a name="x"></a>

[OneNote Heading]{.underline}

Under onenote.

~~~~python
unclosed fence
# still code
"""


def _blocks(text, parsed):
    return [(s.heading_path, b.kind, text[b.start:b.end]) for s in parsed.sections for b in s.blocks]


def test_front_matter_is_metadata_not_text():
    p = parse_markdown(DOC, "fallback")
    assert p.metadata == {"title": "Working with fences", "tags": ["a", "b"]}
    assert p.title == "Working with fences"
    assert all("tags:" not in t for _, _, t in _blocks(DOC, p))


def test_hash_in_code_fence_is_not_a_heading_and_code_stays_whole():
    p = parse_markdown(DOC, "f")
    headings = [s.heading_path for s in p.sections]
    assert ["Working with fences"] in headings
    assert not any("this is a comment" in h for path in headings for h in path)
    code = [t for _, k, t in _blocks(DOC, p) if k == "code"]
    assert code[0] == "```bash\n# this is a comment, not a heading\necho hi\n```"


def test_setext_onenote_and_heading_cleanup():
    p = parse_markdown(DOC, "f")
    paths = [s.heading_path for s in p.sections]
    assert ["Working with fences", "Second level"] in paths
    assert ["Working with fences", "Sub heading"] in paths
    assert ["Working with fences", "Sub heading", "OneNote Heading"] in paths


def test_unclosed_fence_runs_to_end_of_file():
    p = parse_markdown(DOC, "f")
    last = p.sections[-1]
    assert last.blocks[-1].kind == "code"
    assert DOC[last.blocks[-1].start:last.blocks[-1].end].endswith("# still code")


def test_lists_and_tables_are_typed_blocks():
    kinds = {k: t for _, k, t in _blocks(DOC, parse_markdown(DOC, "f"))}
    assert kinds["list"] == "- item one\n- item two\n  continued"
    assert kinds["table"].startswith("| a | b |") and kinds["table"].endswith("| 1 | 2 |")


def test_toml_front_matter_and_fallback_title():
    text = "+++\ntitle = 'Toml Title'\n+++\nBody text here."
    assert parse_markdown(text, "x").title == "Toml Title"
    assert parse_markdown("Just text.", "file-stem").title == "file-stem"
    assert parse_markdown("# First H1\n\ntext", "stem").title == "First H1"


def test_broken_front_matter_keeps_the_body():
    text = "---\ntitle: [unclosed\n---\nThe body survives."
    p = parse_markdown(text, "x")
    assert "front_matter_error" in p.metadata
    assert any("The body survives." in text[b.start:b.end] for s in p.sections for b in s.blocks)


def test_broken_front_matter_is_a_warning_naming_the_file(tmp_path, caplog):
    page = tmp_path / "badfm.md"
    page.write_text("---\ntitle: Broken: front matter\ntags: [dev, oops\n---\n# Body\n\nThe body survives.\n")
    with caplog.at_level("WARNING", logger="jobs.markdown.parse"):
        [row] = parse_documents([{"abs_path": str(page), "source_path": "dev/badfm.md", "doc_id": "b"}])
    assert row.get("error_stage") is None and "front_matter_error" in json.loads(row["metadata_json"])
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith("dev/badfm.md: front matter not read (ScannerError: ") and "--filter" in said


def test_front_matter_keys_yaml_reads_as_dates_stay_metadata_and_the_stage_goes_on(tmp_path):
    page = tmp_path / "releases.md"
    page.write_text("---\n2024-01-01: first release\nreleases:\n  2024-06-01: second\n---\n# Notes\n\nBody.\n")
    [row] = parse_documents([{"abs_path": str(page), "source_path": "releases.md", "doc_id": "r"}])
    assert row.get("error_stage") is None
    assert json.loads(row["metadata_json"]) == {"2024-01-01": "first release", "releases": {"2024-06-01": "second"}}


def test_a_quote_line_over_a_rule_is_a_quote_and_a_rule_not_a_heading():
    text = "> Important note.\n---\n\nBody text here.\n"
    p = parse_markdown(text, "x")
    assert [s.heading_path for s in p.sections] == [[]]  # no section of its own
    blocks = [text[b.start:b.end] for s in p.sections for b in s.blocks]
    assert blocks == ["> Important note.", "Body text here."]


def test_a_quote_line_over_an_equals_underline_is_one_quote_paragraph():
    """CommonMark (markdown-it-py) reads `> q` over `===` as a quote whose paragraph is `q\n===`: the
    underline is a lazy continuation line, no setext heading and no paragraph of its own."""
    text = "> Important note.\n===\n\nBody text here.\n"
    p = parse_markdown(text, "x")
    assert [s.heading_path for s in p.sections] == [[]]
    assert _kinds(text) == [("quote", "> Important note.\n==="), ("p", "Body text here.")]


def test_a_page_that_opens_with_a_rule_keeps_the_text_under_it():
    text = "---\nAn introduction in plain words.\n---\n\nBody text here.\n"
    p = parse_markdown(text, "x")
    assert p.metadata == {}
    blocks = " ".join(text[b.start:b.end] for s in p.sections for b in s.blocks)
    assert "An introduction in plain words." in blocks + " ".join(" ".join(s.heading_path) for s in p.sections)
    assert "Body text here." in blocks


def test_offsets_cover_block_text_on_real_files():
    for path in CORPUS.rglob("*.md"):
        text = read_source_text(path)
        p = parse_markdown(text, path.stem)
        for s in p.sections:
            for b in s.blocks:
                assert 0 <= b.start < b.end <= len(text)
                body = text[b.start:b.end]
                assert body.strip() and body.rstrip() == body  # indentation kept, no trailing blank


def test_clean_heading_strips_markup():
    assert clean_heading("Use `hugo server` **now** [link](http://x) {#id}") == "Use hugo server now link"


def test_stage_turns_unreadable_file_into_error_row(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_bytes(b"# Title\n\n\xff\xfe broken utf-8")
    work = {"abs_path": str(bad), "source_path": "bad.md", "doc_id": "d"}
    good = tmp_path / "good.md"
    good.write_text("# Good\n\nfine text")
    rows = parse_documents([work, {"abs_path": str(good), "source_path": "good.md", "doc_id": "g"}])
    assert rows[0]["error_stage"] == "parse_markdown" and rows[0]["error_class"] == "NotUtf8Error"
    assert rows[1].get("error_stage") is None and rows[1]["title"] == "Good"


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_line_endings_are_normalised(tmp_path, newline):
    f = tmp_path / "x.md"
    f.write_bytes(("# T" + newline + newline + "text").encode())
    assert read_source_text(f) == "# T\n\ntext"


def test_a_heading_line_too_long_to_be_a_heading_is_a_paragraph():
    """A one-line file that starts with `#`: as a heading, its text would become the breadcrumb and
    leave the document without a body, so nothing of it would be chunked."""
    from jobs.markdown.parse import MAX_HEADING_CHARS

    long_line = "# " + "word " * MAX_HEADING_CHARS
    for text in (long_line + "\n", long_line + "\n===\n", "[" + "x" * MAX_HEADING_CHARS + "]{.underline}\n"):
        p = parse_markdown(text, "fallback")
        assert all(s.heading_path == [] for s in p.sections) and p.title == "fallback"
        assert _blocks(text, p)[0][1] == "p" and _blocks(text, p)[0][2].startswith(text[:40])
    ok = "# " + "w" * (MAX_HEADING_CHARS - 2)
    assert parse_markdown(ok + "\n\nbody\n", "f").sections[0].heading_path == ["w" * (MAX_HEADING_CHARS - 2)]


@pytest.mark.timeout(600)  # a hang guard, not a speed assertion: a quadratic pattern would run for hours
def test_a_thirty_megabyte_line_parses_whole_into_one_block():
    body = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 540_000
    for prefix, kind in (("", "p"), ("# ", "p"), ("| ", "table"), ("- ", "list"), ("> ", "quote"), ("[", "p")):
        text = prefix + body + "\n"
        p = parse_markdown(text, "f")
        ((_, got, block),) = _blocks(text, p)
        assert got == kind and len(block) == len(text) - 1


ADMONITIONS = """# Registries

Intro line.

[NOTE]
----
When the parameter is defined, all registries are blocked.
Insecure external registries should be avoided.
----
2. To check the changes, list your nodes:

[source,yaml]
----
```yaml
key: value
----
```
----

A paragraph of two lines
that a dashed rule follows.
---

Real heading
---

Under it.
"""


def test_attributed_blocks_and_paragraph_underlines_are_not_headings():
    """AsciiDoc turned Markdown: `[NOTE]` + `----` … `----` is a block, not a `[NOTE]` heading over a
    heading made of its last sentence; a rule under a paragraph of several lines is no underline."""
    p = parse_markdown(ADMONITIONS, "f")
    assert [s.heading_path for s in p.sections] == [["Registries"], ["Registries", "Real heading"]]
    blocks = _blocks(ADMONITIONS, p)
    texts = [t for _, _, t in blocks]
    note = "When the parameter is defined, all registries are blocked.\nInsecure external registries should be avoided."
    assert note in texts
    assert not any(t.startswith(("[NOTE]", "[source")) or t == "----" for t in texts)
    # a `----` inside a fence inside the block neither closes the block nor the fence
    assert ("code", "```yaml\nkey: value\n----\n```") in [(k, t) for _, k, t in blocks]
    assert "A paragraph of two lines\nthat a dashed rule follows." in texts
    assert texts[-1] == "Under it."


def test_a_paragraph_of_link_definitions_is_no_block_and_text_that_looks_like_one_stays():
    text = ("# Page\n\nSee the [blog post][08].\n\n[07]: ./media/output.png\n"
            "[08]: https://devblogs.microsoft.com/powershell/what-are-feedback-providers/ \"Feedback\"\n\n"
            "[Option]: what the option does, in words.\n")
    blocks = [(k, t) for _, k, t in _blocks(text, parse_markdown(text, "f"))]
    assert blocks == [("p", "See the [blog post][08]."), ("p", "[Option]: what the option does, in words.")]


def test_a_comment_block_ends_where_the_comment_closes_and_alone_is_no_block():
    text = ("# Page\n\nBody text [link][01].\n\n<!-- link references -->\n[01]: /docs/one\n[02]: /docs/two\n\n"
            "<!-- a comment\nover two lines --> and text after it\n")
    p = parse_markdown(text, "f")
    blocks = [(k, t) for _, k, t in _blocks(text, p)]
    assert not any(t.startswith("[01]:") for _, t in blocks)  # link definitions only: no block
    assert not any(t == "<!-- link references -->" for _, t in blocks)
    assert ("html", "<!-- a comment\nover two lines --> and text after it") in blocks


def _kinds(text):
    """(kind, verbatim text) of every block; a block's offsets must cut its text out of the source."""
    return [(k, t) for _, k, t in _blocks(text, parse_markdown(text, "f"))]


def test_a_fence_inside_a_list_item_is_a_code_block_and_the_list_goes_on():
    """The fence is indented to the item's content column plus up to 3 (4+ spaces from the margin):
    CommonMark reads it as the item's code, not as the item's text."""
    text = ("# Steps\n\n1. Run the cmdlet:\n\n    ```powershell\n    Get-Proc *_x\n    ```\n\n"
            "    The output is:\n\n    ```output\n    Name\n    ```\n\n2. Next step.\n\n"
            "- nested:\n  - inner\n\n    ```sh\n    echo \\*\n    ```\n")
    assert _kinds(text) == [
        ("list", "1. Run the cmdlet:"),
        ("code", "    ```powershell\n    Get-Proc *_x\n    ```"),
        ("list", "    The output is:"),
        ("code", "    ```output\n    Name\n    ```"),
        ("list", "2. Next step.\n\n- nested:\n  - inner"),
        ("code", "    ```sh\n    echo \\*\n    ```"),
    ]


def test_a_list_fence_ends_at_its_closing_fence_even_past_code_pasted_at_the_margin():
    text = "- Create it:\n\n  ```yaml\nkind: Pod\n# not a heading\n  ```\n\nAfter.\n"
    assert _kinds(text) == [("list", "- Create it:"), ("code", "  ```yaml\nkind: Pod\n# not a heading\n  ```"),
                            ("p", "After.")]


def test_indented_code_after_a_blank_line_and_only_there():
    text = ("# Usage\n\nRun:\n\n    hugo mod get -u\n\n    hugo mod get -u ./...\n\n\tsource <(hugo completion bash)\n"
            "\nA paragraph\n    indented continuation, not code.\n\n- item\n\n    item text, not code\n")
    assert _kinds(text) == [
        ("p", "Run:"),
        ("code", "    hugo mod get -u\n\n    hugo mod get -u ./...\n\n\tsource <(hugo completion bash)"),
        ("p", "A paragraph\n    indented continuation, not code."),
        ("list", "- item\n\n    item text, not code"),
    ]


def test_a_fence_in_a_quote_is_a_code_block_of_the_quoted_lines():
    text = ("> Install it:\n>\n> ```sh\n> curl -sSL https://x/install.sh | bash -s -- --opt_a\n> ```\n>\n"
            "> Then restart.\n")
    assert _kinds(text) == [("quote", "> Install it:\n>"),
                            ("code", "> ```sh\n> curl -sSL https://x/install.sh | bash -s -- --opt_a\n> ```"),
                            ("quote", ">\n> Then restart.")]
    unclosed = "> ```sh\n> echo 1\n\n# Heading\n"  # the quote ends, and the fence in it
    p = parse_markdown(unclosed, "f")
    assert [s.heading_path for s in p.sections] == [[], ["Heading"]]
    assert _kinds(unclosed) == [("code", "> ```sh\n> echo 1")]


def test_nothing_in_an_html_block_is_a_heading():
    text = ("# Param\n\n<p>if ($x)<br />\n{<br />\n# handle \"Computer\" parameter set<br />\n}</p>\n\n"
            "# Next\n\n<div>\n\n# A heading: the block ended at the blank line\n\n<!--\n# hidden\n-->\nText.\n")
    p = parse_markdown(text, "f")
    headings = [s.heading_path for s in p.sections]
    assert headings == [["Param"], ["Next"], ["A heading: the block ended at the blank line"]]
    assert _kinds(text) == [("html", "<p>if ($x)<br />\n{<br />\n# handle \"Computer\" parameter set<br />\n}</p>"),
                            ("html", "<div>"), ("p", "Text.")]


LIST_HEADINGS = [
    ("- item\n\n  ## Heading\n\n  text\n", "- item\n\n  ## Heading\n\n  text"),
    ("1. step\n   ### Sub\n2. next\n", "1. step\n   ### Sub\n2. next"),
    ("- item\n\n  Title\n  -----\n\n  text\n", "- item\n\n  Title\n  -----\n\n  text"),
]


@pytest.mark.parametrize("lst, block", LIST_HEADINGS, ids=["atx-after-blank", "atx-under-step", "setext"])
def test_a_heading_inside_a_list_item_stays_in_the_list_and_its_section(lst, block):
    """A heading indented to a list item's content is the item's (CommonMark nests it in the list): it
    neither opens a section nor cuts the list off the section that holds it. Sections open at
    markdown-it-py's top-level headings only; at the margin, after the list, a heading is one again."""
    from markdown_it import MarkdownIt

    text = f"# Guide\n\nIntro.\n\n{lst}\nAfter the list.\n\n## Next\n\nMore.\n"
    p = parse_markdown(text, "f")
    assert [s.heading_path for s in p.sections] == [["Guide"], ["Guide", "Next"]]
    top = [t.map[0] for t in MarkdownIt("commonmark").parse(text) if t.type == "heading_open" and t.level == 0]
    assert [text.count("\n", 0, s.heading_start) for s in p.sections] == top
    assert _kinds(text) == [("p", "Intro."), ("list", block), ("p", "After the list."), ("p", "More.")]


REFERENCE_SNIPPETS = [
    "# Steps\n\n1. Step:\n\n    ```output\n    x\n    ```\n\n2. Two\n\n   ```sh\n   y\n   ```\n",
    "- a\n  - b\n\n      ```\n      deep\n      ```\n\n  back in a\n\n```\ntop\n```\n\nSetext\n---\n",
    "Intro\n\n    code one\n\n\n    code two\n\nText\n    not code\n\n# H\n\n\tcode tab\n",
    "> ```sh\n> q\n> ```\n\n> text\n> ~~~\n> more\n> ~~~\n\n## H2 {#id}\n",
    "<table>\n<tr><td>\n# no heading\n</td></tr>\n</table>\n\n# Yes\n\n<span>x</span>\n# Heading too\n\n    code\n",
    "Title\n=====\n\n````md\n```\nnested\n```\n````\n\n    ~~~\n    code\n",
    "<!-- c\n# hidden\n-->\n\n<pre>\n\n# in pre\n</pre>\n\n### Three ###\n\n* * *\n\n    after hr\n",
]


@pytest.mark.parametrize("text", REFERENCE_SNIPPETS)
def test_code_blocks_and_headings_match_commonmark(text):
    """markdown-it-py (CommonMark) as the reference, on Markdown outside the deliberate deviations in
    parse.py's docstring: the same code blocks (line ranges) and the same heading lines."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    want_code = {tuple(t.map) for t in tokens if t.type in ("fence", "code_block")}
    want_heads = {t.map[0] for t in tokens if t.type == "heading_open"}
    p = parse_markdown(text, "f")

    def line(offset):
        return text.count("\n", 0, offset)

    got_code = {(line(b.start), line(b.end) + 1) for s in p.sections for b in s.blocks if b.kind == "code"}
    got_heads = {line(s.heading_start) for s in p.sections if s.heading_start is not None}
    assert got_code == want_code
    assert got_heads == want_heads
    assert want_code and want_heads  # each snippet exercises both
