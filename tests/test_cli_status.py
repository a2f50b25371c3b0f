"""`corpusmill status` as printed: a long pending list is cut, and the cut says how much is left out."""

from __future__ import annotations

import pytest

from jobs import cli
from jobs.config import JobConfig


class _Store:
    """What cmd_status asks of a store, for one collection with `pending` documents waiting."""

    def __init__(self, pending: int):
        self.pending = [f"notes/{i:02}.md" for i in range(pending)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def status(self, name):
        return {"collection": name, "embedding_model": "m", "dimension": 3, "chunks": 0, "failed": [], "last_runs": [],
                "documents": {"done": 0, "failed": 0, "pending": len(self.pending)}, "pending": self.pending}


@pytest.fixture()
def status_of(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CORPUSMILL_HOME", str(tmp_path / "home"))

    def run(pending: int) -> list[str]:
        monkeypatch.setattr(cli, "_store", lambda args: (JobConfig(), _Store(pending)))
        assert cli.main(["status", "--collection", "notes"]) == 0
        return capsys.readouterr().out.splitlines()
    return run


def test_a_long_pending_list_says_how_many_more(status_of):
    out = status_of(40)
    assert [line for line in out if line.startswith("  pending  ")] == [
        *(f"  pending  notes/{i:02}.md" for i in range(20)), "  pending  … and 20 more (--json lists all)"]


def test_a_short_pending_list_is_whole(status_of):
    out = status_of(20)
    assert sum(line.startswith("  pending  ") for line in out) == 20
    assert not any("more" in line for line in out)
