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
