from jobs.chunk.quality import label, word_count
from jobs.config import QualityConfig

CFG = QualityConfig()


def test_labels():
    assert label("---- | ---- 1234", 1, 5, 254, "markdown", CFG)[:2] == ("context_dead", True)
    q, omitted, reason = label("Too few", 2, 4, 254, "markdown", CFG)
    assert (q, omitted) == ("fragment", True) and reason.startswith("fragment: 2 words")
    assert label("a " * 300, 300, 400, 254, "markdown", CFG)[:2] == ("too_long", False)
    assert label("seven words are enough for short label", 7, 9, 254, "markdown", CFG)[:2] == ("short", False)
    assert label("w " * 40, 40, 50, 254, "markdown", CFG)[:2] == ("ok", False)


def test_excel_rows_use_their_own_fragment_floor():
    assert label("Team: Blues", 2, 5, 254, "excel", CFG)[1] is True
    assert label("Team: Blues; Cups: 1", 4, 9, 254, "excel", CFG)[1] is False


def test_word_count_is_unicode_aware():
    assert word_count("Привет мир, hello") == 3
