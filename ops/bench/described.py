"""A golden set for a structured corpus: each page's front matter `description` is the question, the
page is the answer (document-level recall@k and MRR, `jobs.tools.evaluate` JSONL with `source_path`).

    python -m ops.bench.described SRC_DIR OUT_DIR     # writes OUT_DIR/corpus/ and OUT_DIR/golden.jsonl

The corpus is copied with `description` and `summary` taken out of every page's front matter, so
neither pipeline can match a question against its own words: corpusmill would otherwise open the page's
first chunk with it (`markdown.description_keys`), and a script that keeps the front matter in its
first chunk would embed it verbatim. Descriptions under 5 words, with template code, or shared by
several pages are not asked. Everything else in the pages (title, headings, body) stays as written.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import yaml

HIDDEN_KEYS = ("description", "summary")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?\r?\n)---[ \t]*(?:\r?\n|\Z)", re.S)
MIN_WORDS = 5


def strip_description(text: str) -> tuple[str, str | None]:
    """The page without the hidden front matter keys, and its description (None when it has none or
    its front matter is not a YAML mapping; such a page is copied unchanged)."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return text, None
    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return text, None
    if not isinstance(meta, dict) or not any(k in meta for k in HIDDEN_KEYS):
        return text, None
    description = meta.get("description")
    kept = {k: v for k, v in meta.items() if k not in HIDDEN_KEYS}
    front = yaml.safe_dump(kept, sort_keys=False, allow_unicode=True) if kept else ""
    return f"---\n{front}---\n" + text[m.end():], description if isinstance(description, str) else None


def build(src: Path, out: Path) -> dict:
    """Copy `src`'s Markdown into out/corpus without descriptions; write out/golden.jsonl."""
    corpus = out / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    asked: dict[str, list[str]] = {}
    files = sorted(p for p in src.rglob("*") if p.suffix in (".md", ".markdown") and p.is_file())
    for path in files:
        rel = path.relative_to(src).as_posix()
        text, description = strip_description(path.read_text(encoding="utf-8", errors="replace"))
        target = corpus / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        if description:
            question = " ".join(description.split())
            if len(question.split()) >= MIN_WORDS and "{{" not in question:
                asked.setdefault(question, []).append(rel)
    golden = [{"qid": f"d{i}", "question": q, "source_path": paths[0]}
              for i, (q, paths) in enumerate(sorted(asked.items())) if len(paths) == 1]
    (out / "golden.jsonl").write_text("".join(json.dumps(g) + "\n" for g in golden), encoding="utf-8")
    return {"corpus": str(corpus), "golden": str(out / "golden.jsonl"), "files": len(files),
            "questions": len(golden), "shared_descriptions_dropped": sum(1 for p in asked.values() if len(p) > 1)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print(json.dumps(build(Path(argv[0]), Path(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
