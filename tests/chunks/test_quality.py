from jobs.chunks.quality import label, word_count
from jobs.config import QualityConfig

CFG = QualityConfig()


def test_no_letters_is_context_dead_and_omitted():
    q, omitted, reason = label("---- | ---- 1234", 1, 5, 254, "markdown", CFG)
    assert (q, omitted) == ("context_dead", True) and "no letters" in reason


def test_markdown_fragments_are_flagged_but_kept():
    text = "Article 32 guarantees the right to constitutional remedies"
    assert label(text, word_count(text), 12, 254, "markdown", CFG) == ("fragment", False, None)


def test_pointer_chunks_are_context_dead_only_when_short():
    q, omitted, reason = label("See above for the details.", 5, 7, 254, "markdown", CFG)
    assert (q, omitted) == ("context_dead", True) and "'see above'" in reason
    assert label("- Click here to download", 4, 6, 254, "markdown", CFG)[:2] == ("context_dead", True)
    long_text = "For more control, " + "the server accepts many settings that change its behaviour. " * 6
    assert label(long_text, word_count(long_text), 80, 254, "markdown", CFG)[1] is False


def test_length_bands():
    assert label("a " * 600, 600, 200, 254, "markdown", CFG)[:2] == ("too_long", False)  # over 500 words
    assert label("w " * 100, 100, 300, 254, "markdown", CFG)[:2] == ("too_long", False)  # over the token limit
    assert label("w " * 20, 20, 25, 254, "markdown", CFG)[:2] == ("short", False)
    assert label("w " * 40, 40, 50, 254, "markdown", CFG)[:2] == ("ok", False)


def test_excel_rows_use_their_own_fragment_floor():
    assert label("Team: Blues", 2, 5, 254, "excel", CFG)[1] is True
    assert label("Team: Blues; Cups: 1", 4, 9, 254, "excel", CFG)[1] is False


def test_word_count_is_unicode_aware():
    assert word_count("Привет мир, hello") == 3


def test_a_chunk_that_only_points_to_another_page_is_omitted():
    for text in ("See [_boolean_](g).", "See the [`css.Sass`](/functions/css/sass) function.",
                 "See Go's [`text/template`][] documentation for more information.", "See [configure security][]."):
        q, omitted, reason = label(text, word_count(text), 12, 254, "markdown", CFG)
        assert (q, omitted) == ("context_dead", True) and "only points" in reason, text
    # A pointer with content of its own, a sentence without a link, and a definition stay.
    kept = ("See the [`Render`][] method documentation for guidance on naming and organizing view templates.",
            "See how the cache directory is chosen.", "A _boolean_ is a data type with two possible values.")
    for text in kept:
        assert not label(text, word_count(text), 20, 254, "markdown", CFG)[1], text
