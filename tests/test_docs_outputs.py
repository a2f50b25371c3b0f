"""docs/outputs.md's chunk contract against the real thing: the columns its table lists, in its order,
are the Parquet contract and the columns of a chunk table the store creates (plus the ones it says the
table adds), and the view's columns it lists are the view's, as PostgreSQL has them."""

import re

from jobs.rows import CONTRACT_NAMES
from tests.conftest import REPO


def _contract_section() -> str:
    text = (REPO / "docs" / "outputs.md").read_text(encoding="utf-8")
    return text.split("## The chunk contract", 1)[1].split("\n## ", 1)[0]


def documented_columns() -> list[str]:
    """The names in the first cell of each row of the contract's table, in order."""
    names = []
    for line in _contract_section().splitlines():
        cells = line.split("|")
        if len(cells) > 2 and "`" in cells[1]:
            names += re.findall(r"`([a-z_0-9]+)`", cells[1])
    return names


def _backticked_after(marker: str, until: str) -> list[str]:
    part = _contract_section().split(marker, 1)[1].split(until, 1)[0]
    return re.findall(r"`([a-z_0-9]+)`", part)


def _columns(store, table: str) -> list[str]:
    return [r[0] for r in store.conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'corpusmill' AND table_name = %s "
        "ORDER BY ordinal_position", (table,)).fetchall()]


def test_the_documented_contract_is_the_parquet_contract_in_order():
    assert documented_columns() == CONTRACT_NAMES


def test_the_documented_columns_are_a_real_chunk_tables_and_views(store):
    coll = store.ensure_collection("docs_outputs", "docs-outputs-model", 4)
    added = _backticked_after("The chunk table adds", ":")
    assert added, "docs/outputs.md no longer says which columns the chunk table adds"
    assert _columns(store, coll.chunk_table) == documented_columns() + added

    view = _backticked_after("The view `corpusmill.all_chunks` has", "\n\n")
    assert view and _columns(store, "all_chunks") == view
