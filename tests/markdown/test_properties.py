"""Properties of the Markdown chunker on generated documents (hypothesis).

- every sentence of the source lands in at least one embedded chunk;
- each chunk's body starts inside `source[char_start:char_end]`;
- every code line lands in a chunk, and a code block over the window is cut between lines into parts
  that are each fenced again (its fence and info string repeated);
- no table row is cut;
- no chunk exceeds the model's token limit.
"""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.embed.tokens import token_counter
from tests.markdown.test_windows import MODEL, chunk_text

WORDS = ["server", "config", "module", "render", "template", "cache", "build", "deploy", "image", "theme",
         "content", "menu", "page", "site", "data", "output", "format", "language", "asset", "option"]


@st.composite
def documents(draw):
    counter = iter(range(10_000))
    markers: list[str] = []

    def sentence():
        m = f"s{next(counter)}x"
        markers.append(m)
        words = draw(st.lists(st.sampled_from(WORDS), min_size=3, max_size=18))
        return f"The {m} " + " ".join(words) + "."

    parts = []
    if draw(st.booleans()):
        parts.append("---\ntitle: Generated\ntags: [a, b]\n---\n")
    for _ in range(draw(st.integers(1, 8))):
        level = draw(st.integers(1, 3))
        parts.append("#" * level + " " + draw(st.sampled_from(WORDS)).title() + f" {next(counter)}\n")
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["p", "p", "p", "list", "code", "table"]))
            if kind == "p":
                parts.append(" ".join(sentence() for _ in range(draw(st.integers(1, 12)))) + "\n")
            elif kind == "list":
                parts.append("\n".join(f"- {sentence()}" for _ in range(draw(st.integers(1, 5)))) + "\n")
            elif kind == "code":
                fence = draw(st.sampled_from(["```", "~~~", "````"]))
                lines = []
                for i in range(draw(st.sampled_from([1, 3, 6, 60]))):  # 60 pairs: over the window
                    m = f"c{next(counter)}x"
                    markers.append(m)
                    lines.append(f"# comment {m}\nvalue = {i}")
                body = "\n".join(lines)
                parts.append(f"{fence}sh\n{body}\n{fence}\n")
            else:
                rows = [f"| {draw(st.sampled_from(WORDS))} {next(counter)} | {i} |" for i in range(draw(st.integers(1, 30)))]
                parts.append("| name | value |\n|---|---|\n" + "\n".join(rows) + "\n")
    return "\n".join(parts), markers


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(documents())
def test_chunker_properties(doc):
    text, markers = doc
    rows = [r for r in chunk_text(text) if r["row_kind"] == "chunk"]
    embedded = [r for r in rows if not r["omitted"]]
    joined = "\n".join(r["text"] for r in embedded)
    for m in markers:
        assert re.search(rf"\b{m}\b", joined), f"sentence {m} was lost"
    limit = token_counter(MODEL).limit
    source_rows = {line for line in text.splitlines() if line.startswith("|")}
    for r in rows:
        span = " ".join(text[r["char_start"]:r["char_end"]].split())
        body_lines = r["text"].splitlines()
        if body_lines[0].startswith(("```", "~~~")) and len(body_lines) > 1:
            body_lines = body_lines[1:]  # a later part of a cut code block opens with its fence repeated
        assert " ".join(body_lines[0].split()) in span
        for fence in ("```", "~~~"):
            opened = [line for line in r["text"].splitlines() if line.startswith(fence)]
            assert len(opened) % 2 == 0, f"a {fence} fence was cut"
            assert all(line.endswith("sh") for line in opened[::2]), "a code part lost its info string"
        for line in r["text"].splitlines():
            if line.startswith("|"):
                assert line in source_rows, f"a table row was cut: {line!r}"
        assert r["token_count"] <= limit
        assert "tags: [a, b]" not in r["text"]
