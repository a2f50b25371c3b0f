"""Retrieval evaluation: golden-set loading, matching rules, recall@k / MRR and the report tables.

The search function here is a small deterministic fake over a constructed list of chunks: `evaluate`'s contract
is a search callable, so nothing of the module itself is mocked.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from jobs.tools.evaluate import (
    EvalReport,
    GoldenQuestion,
    compare_table,
    evaluate,
    format_report,
    golden_paths_note,
    load_golden,
    squad_source_path,
    squad_to_markdown,
    write_hits,
)

# The real XQuAD file is one of the benchmarks' data sets, outside the repository (BENCH_DATA, ops/bench/README.md).
XQUAD = Path(os.environ["BENCH_DATA"], "xquad-en", "xquad.en.json") if os.environ.get("BENCH_DATA") else None


def chunk(cid: str, text: str = "", source: str = "doc.md") -> dict:
    return {"chunk_id": cid, "source_path": source, "heading_path": [], "text": text or f"filler {cid}"}


class OrderedSearch:
    """Returns, for each query, the chunks in a fixed order given per query; records every call."""

    def __init__(self, chunks: list[dict], order: dict[str, list[str]]):
        self.by_id, self.order, self.calls = {c["chunk_id"]: c for c in chunks}, order, []

    def __call__(self, queries: list[str], k: int) -> list[list[dict]]:
        self.calls.append((len(queries), k))
        return [[{**self.by_id[cid], "score": 1.0 - rank / 100} for rank, cid in enumerate(self.order.get(q, [])[:k])]
                for q in queries]


def overlap_search(chunks: list[dict]):
    """Ranks chunks by words shared with the query, ties by position: a tiny stand-in for vector search."""

    def words(text: str) -> set[str]:
        return set(re.findall(r"\w+", text.casefold()))

    def search(queries: list[str], k: int) -> list[list[dict]]:
        out = []
        for q in queries:
            scored = sorted(enumerate(chunks), key=lambda ic: (-len(words(q) & words(ic[1]["text"])), ic[0]))
            out.append([{**c, "score": float(len(words(q) & words(c["text"])))} for _, c in scored[:k]])
        return out

    return search


FILLER = [chunk(f"f{i}") for i in range(12)]


def ranked_case() -> tuple[list[GoldenQuestion], OrderedSearch]:
    """Four questions whose gold chunk sits at rank 1, 3, 7 and 12 (beyond k=10)."""
    chunks = FILLER + [chunk(f"gold{i}") for i in range(4)]
    fill = [c["chunk_id"] for c in FILLER]
    order = {}
    for i, rank in enumerate([1, 3, 7, 12]):
        order[f"q{i}"] = fill[: rank - 1] + [f"gold{i}"] + fill[rank - 1:]
    questions = [GoldenQuestion(f"q{i}", chunk_ids=(f"gold{i}",), qid=f"id{i}") for i in range(4)]
    return questions, OrderedSearch(chunks, order)


# ------------------------------------------------------------------------------------------- scoring


def test_recall_and_mrr_on_known_ranks():
    questions, search = ranked_case()
    report = evaluate(questions, search)
    assert report.n == 4
    assert report.recall == {1: 0.25, 5: 0.5, 10: 0.75}
    assert report.mrr == pytest.approx((1 + 1 / 3 + 1 / 7) / 4)
    assert [row["rank"] for row in report.per_question] == [1, 3, 7, None]
    assert [row["qid"] for row in report.per_question] == ["id0", "id1", "id2", "id3"]
    assert list(report.by_level) == ["chunk"]
    assert report.by_level["chunk"]["recall"] == report.recall
    assert search.calls == [(4, 10)]
    top = report.per_question[1]["hits"]
    assert len(top) == 10 and top[2] == {"chunk_id": "gold1", "source_path": "doc.md", "score": pytest.approx(0.98)}


def test_search_is_batched_with_k_from_the_largest_cutoff():
    questions = [GoldenQuestion(f"q{i}", chunk_ids=("f0",)) for i in range(130)]
    search = OrderedSearch(FILLER, {f"q{i}": ["f1", "f0"] for i in range(130)})
    report = evaluate(questions, search, ks=(3, 1))
    assert search.calls == [(64, 3), (64, 3), (2, 3)]
    assert report.recall == {1: 0.0, 3: 1.0}
    assert report.mrr == pytest.approx(0.5)


def test_headline_prefers_passage_then_chunk_then_document_and_levels_are_kept():
    chunks = [chunk("a", "intro about the city", "paris.md"), chunk("b", "The Eiffel Tower is 330 m tall.", "paris.md"),
              chunk("c", "unrelated", "rome.md")]
    questions = [
        GoldenQuestion("how tall", source_paths=("paris.md",), answers=("330 m",)),  # doc @1, passage @2
        GoldenQuestion("where", source_paths=("rome.md",), chunk_ids=("c",)),  # doc and chunk @3
        GoldenQuestion("what", source_paths=("london.md",)),  # never found
    ]
    search = OrderedSearch(chunks, {q.question: ["a", "b", "c"] for q in questions})
    report = evaluate(questions, search, ks=(1, 2, 3))
    assert [(row["level"], row["rank"]) for row in report.per_question] == [("passage", 2), ("chunk", 3), ("document", None)]
    assert report.per_question[0]["ranks"] == {"document": 1, "passage": 2}
    assert list(report.by_level) == ["document", "chunk", "passage"]
    assert report.by_level["document"] == {"n": 3, "recall": {1: pytest.approx(1 / 3), 2: pytest.approx(1 / 3),
                                                              3: pytest.approx(2 / 3)}, "mrr": pytest.approx((1 + 1 / 3) / 3)}
    assert report.by_level["passage"] == {"n": 1, "recall": {1: 0.0, 2: 1.0, 3: 1.0}, "mrr": 0.5}
    assert report.by_level["chunk"]["n"] == 1 and report.by_level["chunk"]["mrr"] == pytest.approx(1 / 3)
    assert report.recall == {1: 0.0, 2: pytest.approx(1 / 3), 3: pytest.approx(2 / 3)}


@pytest.mark.parametrize(("answer", "text", "found"), [
    ("New  York\nCity", "She moved to new york   CITY in 1990.", True),
    ("STRASSE", "Die Hauptstraße ist lang.", True),  # case-folding, not just lower()
    ("York City Hall", "She moved to New York City in 1990.", False),
    ("1990.", "in 1990", False),
])
def test_answer_match_collapses_whitespace_and_casefolds(answer, text, found):
    search = OrderedSearch([chunk("x", text)], {"q": ["x"]})
    report = evaluate([GoldenQuestion("q", answers=(answer,))], search, ks=(1,))
    assert report.recall[1] == (1.0 if found else 0.0)


def test_any_of_several_targets_matches():
    chunks = [chunk("a", "alpha"), chunk("b", "beta", "other.md")]
    q = GoldenQuestion("q", chunk_ids=("zzz", "b"), answers=("gamma", "BETA"))
    report = evaluate([q], OrderedSearch(chunks, {"q": ["a", "b"]}), ks=(1, 2))
    assert report.per_question[0]["ranks"] == {"chunk": 2, "passage": 2}


def test_evaluate_rejects_bad_input():
    with pytest.raises(ValueError, match="no chunk_ids, source_paths or answers"):
        GoldenQuestion("orphan")
    with pytest.raises(ValueError, match="ks must be positive"):
        evaluate([GoldenQuestion("q", chunk_ids=("a",))], lambda qs, k: [[] for _ in qs], ks=(0, 5))
    with pytest.raises(ValueError, match="returned 0 hit lists for 1 queries"):
        evaluate([GoldenQuestion("q", chunk_ids=("a",))], lambda qs, k: [])


def test_empty_question_list_gives_zeroes():
    report = evaluate([], lambda qs, k: [])
    assert (report.n, report.recall, report.mrr, report.by_level) == (0, {1: 0.0, 5: 0.0, 10: 0.0}, 0.0, {})


# ------------------------------------------------------------------------------------------- golden sets


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_golden_jsonl_all_target_kinds(tmp_path):
    path = write_lines(tmp_path / "gold.jsonl", [
        json.dumps({"question": "chunk one?", "chunk_id": "c1", "id": 7}),
        "",
        json.dumps({"question": "docs?", "source_path": ["a.md", "b.md", "a.md"]}),
        "   ",
        json.dumps({"question": "answer?", "answer": ["Paris", "paris, France"], "chunk_id": ["c2", "c3"], "qid": "x"}),
        json.dumps({"question": "single answer", "answer": "42"}),
    ])
    assert load_golden(path) == [
        GoldenQuestion("chunk one?", chunk_ids=("c1",), qid="7"),
        GoldenQuestion("docs?", source_paths=("a.md", "b.md")),
        GoldenQuestion("answer?", chunk_ids=("c2", "c3"), answers=("Paris", "paris, France"), qid="x"),
        GoldenQuestion("single answer", answers=("42",)),
    ]


def test_one_line_jsonl_is_detected_by_content_not_extension(tmp_path):
    path = write_lines(tmp_path / "gold.json", [json.dumps({"question": "q?", "chunk_id": "c"})])
    assert load_golden(path) == [GoldenQuestion("q?", chunk_ids=("c",))]


@pytest.mark.parametrize(("lines", "message"), [
    (['{"question": "ok", "chunk_id": "a"}', '{"question": "broken", '], r"line 2: not valid JSON .*one JSON object per line"),
    (['{"question": "no target"}'], r"line 1: expected at least one of 'chunk_id', 'source_path', 'answer'"),
    (['{"question": "q", "answer": ""}'], r"line 1: 'answer' must be a non-empty string or a list"),
    (['{"question": "q", "chunk_id": [1, 2]}'], r"line 1: 'chunk_id' must be a non-empty string or a list"),
    (['{"chunk_id": "a"}'], r"line 1: expected a non-empty string 'question'"),
    (['["question", "a"]'], r"line 1: expected a JSON object, got list"),
    (["", ""], r"no golden questions found"),
])
def test_load_golden_errors_name_file_line_and_expectation(tmp_path, lines, message):
    path = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(ValueError, match=message) as err:
        load_golden(path)
    assert str(path) in str(err.value)


def squad_doc() -> dict:
    return {"version": "1.1", "data": [
        {"title": "Super_Bowl_50", "paragraphs": [
            {"context": "The Broncos beat the Panthers 24 to 10.", "qas": [
                {"id": "q1", "question": "Who won Super Bowl 50?",
                 "answers": [{"text": "Broncos", "answer_start": 4}, {"text": "Broncos", "answer_start": 4},
                             {"text": "The Broncos", "answer_start": 0}]}]},
            {"context": "  It was played in Santa Clara.\n", "qas": [
                {"id": "q2", "question": "Where was it played?", "answers": [{"text": "Santa Clara", "answer_start": 19}]},
                {"id": "q3", "question": "Unanswerable?", "answers": [], "is_impossible": True}]}]},
        {"title": "Sky (United Kingdom)", "paragraphs": [
            {"context": "Sky broadcasts in the United Kingdom.", "qas": [
                {"id": "q4", "question": "Where does Sky broadcast?",
                 "answers": [{"text": "United Kingdom", "answer_start": 22}]}]}]},
    ]}


def test_load_golden_squad_detected_by_content(tmp_path):
    path = tmp_path / "squad.jsonl"  # a misleading extension on purpose
    path.write_text(json.dumps(squad_doc(), indent=2), encoding="utf-8")
    assert load_golden(path) == [
        GoldenQuestion("Who won Super Bowl 50?", source_paths=("super-bowl-50.md",), answers=("Broncos", "The Broncos"),
                       qid="q1"),
        GoldenQuestion("Where was it played?", source_paths=("super-bowl-50.md",), answers=("Santa Clara",), qid="q2"),
        GoldenQuestion("Where does Sky broadcast?", source_paths=("sky-united-kingdom.md",), answers=("United Kingdom",),
                       qid="q4"),
    ]


def test_malformed_squad_names_the_article(tmp_path):
    doc = squad_doc()
    del doc["data"][1]["paragraphs"][0]["qas"][0]["question"]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match=r"squad.json: article 2: paragraph 1: a question lacks 'id' or a string 'question'"):
        load_golden(path)


@pytest.mark.parametrize(("title", "name"), [
    ("Super Bowl 50", "super-bowl-50.md"),
    ("Super_Bowl_50", "super-bowl-50.md"),
    ("Sky_(United_Kingdom)", "sky-united-kingdom.md"),
    ("Fresno,_California", "fresno-california.md"),
    ("  --Hello, World!--  ", "hello-world.md"),
    ("???", "untitled.md"),
])
def test_squad_source_path(title, name):
    assert squad_source_path(title) == name


def test_squad_to_markdown_writes_one_file_per_article(tmp_path):
    src = tmp_path / "squad.json"
    src.write_text(json.dumps(squad_doc()), encoding="utf-8")
    paths = squad_to_markdown(src, tmp_path / "out" / "md")
    assert paths == [tmp_path / "out" / "md" / "super-bowl-50.md", tmp_path / "out" / "md" / "sky-united-kingdom.md"]
    assert paths[0].read_text(encoding="utf-8") == (
        "# Super Bowl 50\n\nThe Broncos beat the Panthers 24 to 10.\n\nIt was played in Santa Clara.\n")
    assert paths[1].read_text(encoding="utf-8") == "# Sky (United Kingdom)\n\nSky broadcasts in the United Kingdom.\n"


def test_squad_to_markdown_rejects_non_squad_and_colliding_titles(tmp_path):
    jsonl = write_lines(tmp_path / "gold.jsonl", ['{"question": "q", "chunk_id": "a"}'])
    with pytest.raises(ValueError, match="expected a SQuAD-format JSON object"):
        squad_to_markdown(jsonl, tmp_path / "out")
    doc = squad_doc()
    doc["data"][1]["title"] = "Super Bowl 50"
    src = tmp_path / "squad.json"
    src.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError, match="both map to super-bowl-50.md"):
        squad_to_markdown(src, tmp_path / "out")


def test_squad_round_trip_through_markdown_and_overlap_search(tmp_path):
    src = tmp_path / "squad.json"
    src.write_text(json.dumps(squad_doc()), encoding="utf-8")
    chunks = []
    for path in squad_to_markdown(src, tmp_path / "md"):
        paragraphs = path.read_text(encoding="utf-8").split("\n\n")[1:]
        chunks += [chunk(f"{path.stem}#{i}", p, path.name) for i, p in enumerate(paragraphs)]
    report = evaluate(load_golden(src), overlap_search(chunks), ks=(1, 2))
    # "Where does Sky broadcast?" shares 'where' with nothing and 'sky' with the Sky chunk: rank 1 everywhere.
    # "Where was it played?" shares 'it', 'was', 'played' with the Santa Clara chunk: rank 1 everywhere.
    # "Who won Super Bowl 50?" shares no word with any chunk, so ties keep chunk order and the Broncos chunk is first.
    assert [row["ranks"] for row in report.per_question] == [{"document": 1, "passage": 1}] * 3
    assert report.to_dict()["by_level"]["document"]["recall@1"] == 1.0


# ------------------------------------------------------------------------------------------- output


def test_to_dict_and_write_hits(tmp_path):
    questions, search = ranked_case()
    report = evaluate(questions, search)
    summary = json.loads(json.dumps(report.to_dict()))
    assert summary == {"n": 4, "recall@1": 0.25, "recall@5": 0.5, "recall@10": 0.75, "mrr": pytest.approx(report.mrr),
                       "by_level": {"chunk": {"n": 4, "recall@1": 0.25, "recall@5": 0.5, "recall@10": 0.75,
                                              "mrr": pytest.approx(report.mrr)}}}
    assert len(json.loads(json.dumps(report.to_dict(per_question=True)))["per_question"]) == 4
    out = tmp_path / "runs" / "hits.jsonl"
    write_hits(report, out)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(r["qid"], r["question"], r["rank"]) for r in rows] == [("id0", "q0", 1), ("id1", "q1", 3), ("id2", "q2", 7),
                                                                    ("id3", "q3", None)]
    assert rows[2]["hits"][6]["chunk_id"] == "gold2"


def test_format_report_is_an_aligned_table():
    questions, search = ranked_case()
    text = format_report(evaluate(questions, search), name="notes-v1")
    lines = text.splitlines()
    assert lines[0] == "notes-v1"
    assert lines[1].split() == ["level", "n", "recall@1", "recall@5", "recall@10", "MRR"]
    assert lines[2].split() == ["overall", "4", "0.250", "0.500", "0.750", f"{(1 + 1 / 3 + 1 / 7) / 4:.3f}"]
    assert lines[3].split()[:2] == ["chunk", "4"]
    assert len({len(line) for line in lines[1:]}) == 1  # columns line up


def test_compare_table_shows_both_collections_and_the_difference():
    questions, search = ranked_case()
    a = evaluate(questions, search)
    better = {q: [q.replace("q", "gold")] + order for q, order in search.order.items()}
    b = evaluate(questions + [GoldenQuestion("extra", source_paths=("doc.md",))], OrderedSearch(FILLER + [
        chunk(f"gold{i}") for i in range(4)], {**better, "extra": ["f0"]}))
    assert isinstance(b, EvalReport) and b.recall[1] == 1.0
    table = compare_table(a, b, "minilm", "bge")
    lines = table.splitlines()
    assert lines[0].split() == ["level", "metric", "minilm", "bge", "bge", "-", "minilm"]
    assert lines[1] == "overall   n               4      5            +1"
    assert ["overall", "recall@1", "0.250", "1.000", "+0.750"] in [line.split() for line in lines]
    assert ["overall", "recall@10", "0.750", "1.000", "+0.250"] in [line.split() for line in lines]
    assert ["document", "recall@1", "-", "1.000", "-"] in [line.split() for line in lines]
    assert ["chunk", "MRR", f"{a.mrr:.3f}", "1.000", f"{1 - a.mrr:+.3f}"] in [line.split() for line in lines]


def test_compare_table_lines_up_reports_with_different_cutoffs():
    questions, search = ranked_case()
    table = compare_table(evaluate(questions, search, ks=(1, 5)), evaluate(questions, search, ks=(3, 1)), "a", "b")
    rows = [line.split() for line in table.splitlines()]
    assert [r[1] for r in rows[1:]] == ["n", "recall@1", "recall@3", "recall@5", "MRR"] * 2
    assert ["overall", "recall@3", "-", "0.500", "-"] in rows and ["overall", "recall@1", "0.250", "0.250", "+0.000"] in rows


# ------------------------------------------------------------------------------------------- real data


@pytest.mark.skipif(XQUAD is None or not XQUAD.exists(), reason="set BENCH_DATA to the benchmarks' data sets")
def test_real_xquad_loads_and_matches_the_markdown_it_becomes(tmp_path):
    questions = load_golden(XQUAD)
    paths = squad_to_markdown(XQUAD, tmp_path)
    assert len(paths) == 48 and len(set(paths)) == 48
    assert len(questions) == 1190
    assert len({q.qid for q in questions}) == 1190
    names = {p.name for p in paths}
    assert all(q.answers and len(q.source_paths) == 1 and q.source_paths[0] in names for q in questions)
    assert {q.source_paths[0] for q in questions} == names
    # every answer occurs in its article's Markdown, so passage-level matching is possible at all
    texts = {p.name: " ".join(p.read_text(encoding="utf-8").split()).casefold() for p in paths}
    assert all(any(" ".join(a.split()).casefold() in texts[q.source_paths[0]] for a in q.answers) for q in questions)


def test_golden_paths_that_are_not_documents_of_the_collection_are_named():
    questions = [GoldenQuestion("q1", source_paths=("ops/keys.md",)),
                 GoldenQuestion("q2", source_paths=("notes/ops/keys.md", "/home/ana/notes/x.md"))]
    def stored(paths):
        return [p for p in paths if p == "ops/keys.md"]

    note = golden_paths_note(questions, stored, "mine")
    assert note.startswith("2 of 3 golden source_path(s) are not documents of collection 'mine' "
                           "(e.g. '/home/ana/notes/x.md')") and "relative to the input root" in note
    assert golden_paths_note(questions[:1], stored, "mine") is None
