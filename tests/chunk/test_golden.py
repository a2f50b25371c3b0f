"""Golden chunk outputs for real files (tests/data/golden/*.md → *.chunks.json).

A chunking change that alters any of them fails here; when the change is intended, regenerate on
purpose with `CORPUSMILL_UPDATE_GOLDEN=1 make test-fast` and review the diff before committing.
"""

import json
import os

import pytest

from tests.chunk.test_windows import chunk_text
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "data" / "golden"
FIELDS = ["seq", "heading_path", "tags", "quality", "omitted", "char_start", "char_end", "token_count", "text"]


@pytest.mark.parametrize("source", sorted(GOLDEN.glob("*.md")), ids=lambda p: p.name)
def test_golden_chunks(source):
    rows = chunk_text(source.read_text(encoding="utf-8"), name=source.name)
    got = [{k: r[k] for k in FIELDS} for r in rows]
    expected_path = source.with_suffix(".chunks.json")
    if os.environ.get("CORPUSMILL_UPDATE_GOLDEN") or not expected_path.exists():
        expected_path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        if not os.environ.get("CORPUSMILL_UPDATE_GOLDEN"):
            pytest.fail(f"wrote a new golden file {expected_path.name}; review and commit it")
    assert got == json.loads(expected_path.read_text(encoding="utf-8"))
