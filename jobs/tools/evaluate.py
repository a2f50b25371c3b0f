"""Score retrieval against golden questions: recall@k and MRR, computed in pure Python.

The caller passes a batched search function, so the same scoring serves any collection (or a fake in tests)
and this module never touches the database. Golden questions come from JSONL (chunk ids, source paths or answer
strings) or from SQuAD-format JSON such as XQuAD, whose articles `squad_to_markdown` writes out as a corpus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jobs.errors import ConfigError, NotFoundError, UserError

SearchFn = Callable[[list[str], int], list[list[dict]]]

LEVELS = ("document", "chunk", "passage")  # display order, coarse to fine
HEADLINE_PREFERENCE = ("passage", "chunk", "document")  # the strictest target a question has decides its headline
BATCH_SIZE = 64
_JSONL_TARGETS = {"chunk_id": "chunk_ids", "source_path": "source_paths", "answer": "answers"}


@dataclass(frozen=True)
class GoldenQuestion:
    question: str
    chunk_ids: tuple[str, ...] = ()
    source_paths: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()
    qid: str = ""

    def __post_init__(self) -> None:
        # A question without targets can never match; scoring it would silently drag recall down.
        if not (self.chunk_ids or self.source_paths or self.answers):
            raise ValueError(f"golden question {self.qid or self.question!r} has no chunk_ids, source_paths or answers")

    @property
    def levels(self) -> tuple[str, ...]:
        present = {"document": self.source_paths, "chunk": self.chunk_ids, "passage": self.answers}
        return tuple(level for level in LEVELS if present[level])


@dataclass
class EvalReport:
    n: int
    recall: dict[int, float]
    mrr: float
    by_level: dict[str, dict]
    per_question: list[dict] = field(default_factory=list)

    def to_dict(self, per_question: bool = False) -> dict:
        out = {"n": self.n, **_recall_keys(self.recall), "mrr": self.mrr,
               "by_level": {level: {"n": s["n"], **_recall_keys(s["recall"]), "mrr": s["mrr"]}
                            for level, s in self.by_level.items()}}
        if per_question:
            out["per_question"] = self.per_question
        return out


def _recall_keys(recall: dict[int, float]) -> dict[str, float]:
    return {f"recall@{k}": v for k, v in recall.items()}


# ---------------------------------------------------------------------------------------------- golden sets

def squad_source_path(title: str) -> str:
    slug = re.sub(r"[\W_]+", "-", title.casefold()).strip("-")
    return f"{slug or 'untitled'}.md"


def load_golden(path: str | Path) -> list[GoldenQuestion]:
    path = Path(path)
    if not path.is_file():
        raise NotFoundError(f"golden file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"golden file {path} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None
    squad = _as_squad(text)
    questions = _squad_questions(squad, path) if squad is not None else _jsonl_questions(text, path)
    if not questions:
        raise ConfigError(f"{path}: no golden questions found (expected JSONL lines or a SQuAD-format JSON file)")
    return questions


def _as_squad(text: str) -> dict | None:
    # Detect by content: a JSONL file fails to parse as one document, or parses to an object without a 'data' list.
    if not text.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("data"), list) else None


def _jsonl_questions(text: str, path: Path) -> list[GoldenQuestion]:
    return [_jsonl_question(line, f"{path}, line {n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _jsonl_question(line: str, where: str) -> GoldenQuestion:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: not valid JSON ({e.msg}); expected one JSON object per line") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ConfigError(f"{where}: expected a non-empty string 'question'")
    targets = {attr: _strings(obj.get(key), key, where) for key, attr in _JSONL_TARGETS.items()}
    if not any(targets.values()):
        raise ConfigError(f"{where}: expected at least one of 'chunk_id', 'source_path', 'answer' "
                         "(a string or a list of strings)")
    return GoldenQuestion(question=question, qid=str(obj.get("qid", obj.get("id", ""))), **targets)


def _strings(value: object, key: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    values = [value] if isinstance(value, str) else value
    # Blank strings are rejected because an empty answer would occur in every passage.
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        raise ConfigError(f"{where}: '{key}' must be a non-empty string or a list of non-empty strings")
    return tuple(dict.fromkeys(values))


def _squad_articles(doc: dict, path: Path) -> list[dict]:
    for i, article in enumerate(doc["data"], 1):
        problem = _squad_problem(article)
        if problem:
            raise ConfigError(f"{path}: article {i}: {problem}; expected 'title' and 'paragraphs' with 'context' and "
                             "'qas' holding 'id', 'question' and 'answers[].text'")
    return doc["data"]


def _squad_problem(article: object) -> str | None:
    if not isinstance(article, dict) or not isinstance(article.get("title"), str):
        return "no string 'title'"
    if not isinstance(article.get("paragraphs"), list):
        return "no 'paragraphs' list"
    for j, p in enumerate(article["paragraphs"], 1):
        if not isinstance(p, dict) or not isinstance(p.get("context"), str) or not isinstance(p.get("qas"), list):
            return f"paragraph {j} lacks a string 'context' or a 'qas' list"
        for qa in p["qas"]:
            if not isinstance(qa, dict) or "id" not in qa or not isinstance(qa.get("question"), str):
                return f"paragraph {j}: a question lacks 'id' or a string 'question'"
            if not all(isinstance(a, dict) and isinstance(a.get("text"), str) for a in qa.get("answers") or []):
                return f"paragraph {j}: question {qa['id']} has an answer without a string 'text'"
    return None


def _squad_questions(doc: dict, path: Path) -> list[GoldenQuestion]:
    out = []
    for article in _squad_articles(doc, path):
        source = (squad_source_path(article["title"]),)
        for qa in (qa for p in article["paragraphs"] for qa in p["qas"]):
            answers = tuple(dict.fromkeys(a["text"] for a in qa.get("answers") or [] if a["text"].strip()))
            if answers:  # SQuAD 2.0 unanswerable questions have no passage to find
                out.append(GoldenQuestion(qa["question"], source_paths=source, answers=answers, qid=str(qa["id"])))
    return out


def squad_to_markdown(squad_json_path: str | Path, out_dir: str | Path) -> list[Path]:
    path, out_dir = Path(squad_json_path), Path(out_dir)
    squad = _as_squad(path.read_text(encoding="utf-8-sig"))
    if squad is None:
        raise ConfigError(f"{path}: expected a SQuAD-format JSON object with a 'data' list of articles")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    for article in _squad_articles(squad, path):
        name = squad_source_path(article["title"])
        if name in written:  # two articles in one file would make document-level matches ambiguous
            raise ConfigError(f"{path}: titles {written[name]!r} and {article['title']!r} both map to {name}")
        written[name] = article["title"]
        body = "\n\n".join(p["context"].strip() for p in article["paragraphs"])
        (out_dir / name).write_text(f"# {article['title'].replace('_', ' ')}\n\n{body}\n", encoding="utf-8")
    return [out_dir / name for name in written]


# ---------------------------------------------------------------------------------------------- scoring

def golden_paths_note(questions: Sequence[GoldenQuestion], stored: Callable[[list[str]], Iterable[str]],
                      collection: str) -> str | None:
    """What to tell a person whose golden `source_path`s are not documents of the collection (`stored(paths)`:
    those of `paths` that are): they never match, and the document level scores 0 without a word. None
    when all are."""
    wanted = sorted({p for q in questions for p in q.source_paths})
    have = set(stored(wanted)) if wanted else set()  # one query for all of them
    absent = [p for p in wanted if p not in have]
    if not absent:
        return None
    return (f"{len(absent)} of {len(wanted)} golden source_path(s) are not documents of collection {collection!r} "
            f"(e.g. {absent[0]!r}): they never match. Paths are relative to the input root, as `corpusmill "
            "search` shows them")


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def _match_ranks(q: GoldenQuestion, hits: list[dict]) -> dict[str, int | None]:
    answers = [_normalise(a) for a in q.answers]
    tests = {
        "document": lambda h: h.get("source_path") in q.source_paths,
        "chunk": lambda h: str(h.get("chunk_id")) in q.chunk_ids,
        "passage": lambda h: any(a in _normalise(h.get("text") or "") for a in answers),
    }
    return {level: next((rank for rank, h in enumerate(hits, 1) if tests[level](h)), None) for level in q.levels}


def _score_question(q: GoldenQuestion, hits: list[dict]) -> dict:
    ranks = _match_ranks(q, hits)
    level = next(level for level in HEADLINE_PREFERENCE if level in ranks)
    return {"qid": q.qid, "question": q.question, "level": level, "rank": ranks[level], "ranks": ranks,
            "hits": [{"chunk_id": h.get("chunk_id"), "source_path": h.get("source_path"), "score": h.get("score")}
                     for h in hits]}


def _summarise(ranks: list[int | None], ks: tuple[int, ...]) -> dict:
    n = len(ranks)
    recall = {k: sum(1 for r in ranks if r is not None and r <= k) / n if n else 0.0 for k in ks}
    mrr = sum(1 / r for r in ranks if r is not None) / n if n else 0.0
    return {"n": n, "recall": recall, "mrr": mrr}


def evaluate(questions: Sequence[GoldenQuestion], search: SearchFn, ks: Sequence[int] = (1, 5, 10),
             batch_size: int = BATCH_SIZE) -> EvalReport:
    questions, ks = list(questions), tuple(sorted(set(ks)))
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    depth, rows = ks[-1], []
    for start in range(0, len(questions), batch_size):
        batch = questions[start:start + batch_size]
        results = search([q.question for q in batch], depth)
        if len(results) != len(batch):
            raise ValueError(f"search returned {len(results)} hit lists for {len(batch)} queries")
        rows += [_score_question(q, list(hits)[:depth]) for q, hits in zip(batch, results)]
    headline = _summarise([row["rank"] for row in rows], ks)
    by_level = {level: _summarise([row["ranks"][level] for row in rows if level in row["ranks"]], ks)
                for level in LEVELS if any(level in row["ranks"] for row in rows)}
    return EvalReport(n=len(rows), recall=headline["recall"], mrr=headline["mrr"], by_level=by_level, per_question=rows)


def write_hits(report: EvalReport, path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in report.per_question)


# ---------------------------------------------------------------------------------------------- tables

def _levels(report: EvalReport) -> dict[str, dict]:
    return {"overall": {"n": report.n, "recall": report.recall, "mrr": report.mrr}, **report.by_level}


def _table(rows: list[list[str]], labels: int = 1) -> str:
    # Label columns read best left-aligned, numbers right-aligned so their decimal points line up.
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i < labels else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
                     for row in rows)


def format_report(report: EvalReport, name: str = "") -> str:
    ks = list(report.recall)
    rows = [["level", "n", *(f"recall@{k}" for k in ks), "MRR"]]
    rows += [[level, str(s["n"]), *(f"{s['recall'][k]:.3f}" for k in ks), f"{s['mrr']:.3f}"]
             for level, s in _levels(report).items()]
    return (f"{name}\n" if name else "") + _table(rows)


def compare_table(a: EvalReport, b: EvalReport, name_a: str, name_b: str) -> str:
    la, lb = _levels(a), _levels(b)
    ks = sorted({*a.recall, *b.recall})  # reports built with different ks still line up; gaps show as '-'
    metrics = [("n", lambda s: s["n"]), *((f"recall@{k}", lambda s, k=k: s["recall"].get(k)) for k in ks),
               ("MRR", lambda s: s["mrr"])]
    rows = [["level", "metric", name_a, name_b, f"{name_b} - {name_a}"]]
    for level in ["overall", *(lv for lv in LEVELS if lv in la or lv in lb)]:
        for metric, get in metrics:
            va, vb = (get(side[level]) if level in side else None for side in (la, lb))
            rows.append([level, metric, _fmt(va), _fmt(vb), _fmt_diff(va, vb)])
    return _table(rows, labels=2)


def _fmt(value: float | int | None) -> str:
    return "-" if value is None else str(value) if isinstance(value, int) else f"{value:.3f}"


def _fmt_diff(a: float | int | None, b: float | int | None) -> str:
    if a is None or b is None:
        return "-"
    return f"{b - a:+d}" if isinstance(a, int) and isinstance(b, int) else f"{b - a:+.3f}"
