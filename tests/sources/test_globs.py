from jobs.sources.globs import matches


def test_double_star_matches_any_depth_including_none():
    assert matches("a.md", ["**/*.md"])
    assert matches("x/y/z/a.md", ["**/*.md"])
    assert not matches("a.mdx", ["**/*.md"])


def test_single_star_stays_in_one_segment():
    assert matches("docs/a.md", ["docs/*.md"])
    assert not matches("docs/sub/a.md", ["docs/*.md"])


def test_hidden_files_and_dirs_are_excluded_by_default_patterns():
    exclude = ["**/.*", "**/.*/**", "**/~$*"]
    assert matches(".git/config", exclude)
    assert matches("notes/.draft.md", exclude)
    assert matches("books/~$budget.xlsx", exclude)
    assert not matches("notes/draft.md", exclude)


def test_character_classes_and_braces():
    assert matches("notes/a1.md", ["notes/a[0-9].md"])
    assert not matches("notes/ab.md", ["notes/a[0-9].md"])
    assert matches("notes/ab.md", ["notes/a[!0-9].md"])
    assert matches("books/q1.xlsx", ["**/*.{xlsx,csv}"]) and matches("q1.csv", ["**/*.{xlsx,csv}"])
    assert not matches("q1.xls", ["**/*.{xlsx,csv}"])


def test_a_trailing_double_star_takes_everything_below_and_no_patterns_match_nothing():
    assert matches("docs/a/b/c.md", ["docs/**"])
    assert not matches("other/a.md", ["docs/**"])
    assert not matches("a.md", [])


def test_a_trailing_slash_or_newline_is_not_a_match():
    assert not matches("a.md/", ["**/*.md"]) and not matches("a.md\n", ["**/*.md"])


def test_a_glob_past_the_expansion_limit_is_refused_when_the_config_is_read(tmp_path):
    import pytest
    import yaml
    from pydantic import ValidationError

    from jobs.config import load_config

    explosive = "{a,b,c,d,e,f,g,h,i,j}" * 6  # a million alternatives
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"collection": "c", "input": {"include": [explosive]}}))
    with pytest.raises(ValidationError, match="input.include: Pattern limit"):  # the CLI: exit 2, one line
        load_config(path)
