"""Units over the window cut into parts (jobs/markdown/cuts.py); the cuts as chunks: test_windows.py."""

from jobs.embed.tokens import token_counter
from jobs.markdown.cuts import split_long_unit
from jobs.markdown.merge import Unit

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def test_a_sentence_over_the_budget_is_cut_between_words_then_tokens():
    counter = token_counter(MODEL)
    words = " ".join(f"word{i}" for i in range(2000))
    blob = "Q" * 6000  # one "word" far over the budget: cut between tokens
    text = words + " " + blob
    parts = split_long_unit(Unit(0, len(text), "sent", 0, text), text, counter, 200)
    assert len(parts) > 5 and all(p.tokens <= 200 for p in parts)
    assert [p.kind for p in parts] == ["sent"] * len(parts)
    assert all(a.end <= b.start for a, b in zip(parts, parts[1:]))
    assert "".join(text[p.start:p.end] for p in parts).replace(" ", "") == text.replace(" ", "")
    assert all(text[p.start:p.end] == p.text for p in parts)
