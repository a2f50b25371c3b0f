"""docs/outputs.md names every column of the chunk contract and of the view, as the code has them."""

from jobs.rows import CONTRACT_NAMES
from jobs.store.pgvector import VIEW_COLUMNS
from tests.conftest import REPO


def test_every_contract_and_view_column_is_documented():
    text = (REPO / "docs" / "outputs.md").read_text(encoding="utf-8")
    contract = text.split("## The chunk contract", 1)[1].split("\n## ", 1)[0]
    assert [c for c in CONTRACT_NAMES if f"`{c}`" not in contract] == []
    view = contract.split("all_chunks", 1)[1]
    assert [c for c in VIEW_COLUMNS if f"`{c}`" not in view] == []
