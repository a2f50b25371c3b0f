"""Units over the window cut into parts (jobs/markdown/cuts.py); the cuts as chunks: test_windows.py."""

from jobs.embed.tokens import token_counter
from jobs.markdown.cuts import split_code, split_long_unit
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


def test_code_over_the_budget_is_cut_between_lines_fenced_or_not():
    """A fence indented inside a list item is repeated on every part; code with no fence of its own
    (indented code, a fence inside a quote) is cut between lines and kept as written."""
    counter = token_counter(MODEL)
    body = "\n".join(f"    Get-Item -Path C:\\dir{i}\\*_{i}.txt" for i in range(120))
    for text, fenced in ((f"    ```powershell\n{body}\n    ```", True), (body, False),
                         ("> ```sh\n" + "\n".join(f"> echo {i} *_x_*" for i in range(200)) + "\n> ```", False)):
        parts = split_code(Unit(0, len(text), "code", 0, text), text, counter, 200)
        assert len(parts) > 2 and all(p.tokens <= 200 and p.kind == "code" for p in parts)
        assert all(a.end <= b.start for a, b in zip(parts, parts[1:]))
        if fenced:
            assert all(p.text.startswith("```powershell\n    Get-Item") and p.text.endswith("\n```") for p in parts)
        else:
            assert all(text[p.start:p.end] == p.text for p in parts)
