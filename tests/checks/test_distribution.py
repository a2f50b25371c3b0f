from jobs.checks.distribution import distribution


def test_distribution_of_counts():
    d = distribution([5, 1, 3, 2, 4, 100, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
    assert (d["n"], d["min"], d["max"]) == (20, 1, 100)
    assert d["median"] == 10.5 and d["mean"] == 14.5
    assert d["p95"] == 100  # nearest rank: the 20th of 20 values


def test_an_empty_distribution_has_only_its_count():
    assert distribution([]) == {"n": 0, "min": None, "median": None, "mean": None, "p95": None, "max": None}


def test_a_tally_gives_the_distribution_of_the_values_it_stands_for():
    # The sink tallies token and word counts (value -> chunks) so its memory does not grow with the run.
    import random
    from collections import Counter

    rng = random.Random(7)
    for _ in range(200):
        values = [rng.randint(0, 300) for _ in range(rng.randint(1, 40))]
        assert distribution(Counter(values)) == distribution(values)
    assert distribution(Counter({5: 0})) == distribution([])
