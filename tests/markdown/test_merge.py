from jobs.markdown.merge import Unit, merge_bullet_windows, merge_small_sections


def unit(i, tokens, kind="sent", words=5):
    return Unit(i, i + 1, kind, i, f"u{i}", tokens=tokens, words=words)


def sec(path):
    return {"heading_path": path, "level": len(path)}


def test_thin_siblings_merge_until_the_target_and_big_ones_stand_alone():
    sections = [sec(["A"]), sec(["A", "x"]), sec(["A", "y"]), sec(["A", "z"]), sec(["B"])]
    units = [[unit(0, 10)], [unit(1, 20)], [unit(2, 20)], [unit(3, 200)], [unit(4, 100)]]
    heads = [unit(10 + i, 2, "heading") for i in range(5)]
    groups = merge_small_sections(sections, units, heads, small=64, target=120)
    assert [g.heading_path for g in groups] == [[], ["A", "z"], ["B"]]
    first = groups[0]
    assert [u.text for u in first.units] == ["u10", "u0", "u11", "u1", "u12", "u2"]  # headings move into the body
    assert first.sections == 3


def test_merging_stays_inside_the_parent():
    sections = [sec(["A", "x"]), sec(["B", "y"])]
    groups = merge_small_sections(sections, [[unit(0, 5)], [unit(1, 5)]], [None, None], small=64, target=300)
    assert [g.heading_path for g in groups] == [["A", "x"], ["B", "y"]]


def test_short_bullet_windows_merge_forward_up_to_the_limit():
    a = [unit(0, 5, "list", words=6)]
    b = [unit(1, 50, "sent", words=40)]
    c = [unit(2, 5, "list", words=6)]
    assert merge_bullet_windows([a, b, c], min_words=20, max_words=150) == [a + b, c]
    big = [unit(3, 200, "sent", words=200)]
    assert merge_bullet_windows([a, big], min_words=20, max_words=150) == [a, big]
