"""jobs/rows.py: what every chunk row passes on its way to Arrow and PostgreSQL."""


def test_text_arrow_and_postgresql_cannot_hold_is_made_storable_and_counted():
    from collections import Counter

    from jobs.rows import storable

    counts = Counter()
    assert storable(["a\x00b", "lone \ud800 half", 3], counts) == ["ab", "lone \ufffd half", 3]
    assert counts == {"nul_removed": 1, "surrogates_replaced": 1}
    assert storable("plain") == "plain"
