"""`corpusmill stats` measures Markdown and says how many workbooks it left out, rather than skipping them silently."""

from __future__ import annotations

from jobs.config import apply_overrides, load_config
from jobs.tools.stats import corpus_stats, format_stats
from tests.conftest import REPO


def test_workbooks_are_counted_as_skipped(tmp_path):
    (tmp_path / "note.md").write_text("# Redirects\n\nThe development server reads redirects from the config file.\n")
    (tmp_path / "table.csv").write_text("name,value\nalpha,1\n")
    (tmp_path / "book.xlsx").write_bytes(b"not opened: stats does not read workbooks")
    cfg = apply_overrides(load_config(REPO / "configs" / "local.yaml"), inputs=[str(tmp_path)])
    stats = corpus_stats(cfg, progress=None)
    assert stats["files"] == 1 and stats["workbooks_skipped"] == 2 and stats["failed"] == []
    assert "2 workbook(s) (Excel, CSV) skipped: stats covers Markdown only" in format_stats(stats)
    assert "workbook" not in format_stats({**stats, "workbooks_skipped": 0})
