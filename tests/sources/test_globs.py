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


def test_ignore_case_matches_whatever_the_case_of_the_path_or_the_pattern():
    assert matches("NOTES.MD", ["**/*.md"], ignore_case=True) and matches("a/Data.XLSX", ["**/*.xlsx"], ignore_case=True)
    assert matches("Docs/Q1.Csv", ["docs/*.{csv,xlsx}"], ignore_case=True)
    assert matches("notes.md", ["**/*.MD"], ignore_case=True)
    assert not matches("docs/sub/A.MD", ["docs/*.md"], ignore_case=True)  # the dialect otherwise unchanged
    # Row templates, header pins and search's `path=` (a database regex) keep the case as written.
    assert not matches("NOTES.MD", ["**/*.md"])


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


def test_the_database_filter_matches_what_the_dialect_matches(pg_url):
    """Search's `path=` filters run in PostgreSQL (postgres_regex): over random globs of every construct
    and random paths, the database's matches are Python's, a `%` included."""
    import random

    import psycopg
    from psycopg import sql

    from jobs.search.filters import parse, where

    rng = random.Random(7)
    tokens = ["a", "b", "/", "*", "**", "?", "[ab]", "[!a]", "{a,b/c}", "%", ".", "*/", "**/"]
    globs = sorted({"".join(rng.choice(tokens) for _ in range(rng.randint(1, 6))) for _ in range(200)})
    paths = sorted({p for p in ("".join(rng.choice("abc/%.") for _ in range(rng.randint(1, 8))) for _ in range(300))
                    if not p.endswith("/")})
    with psycopg.connect(pg_url) as conn:
        for glob in globs:
            # Composed as search composes it, into a query that also takes a parameter.
            query = sql.SQL("SELECT source_path FROM unnest(%s::text[]) AS source_path WHERE {}").format(
                where(parse([f"path={glob}"])))
            got = {p for (p,) in conn.execute(query, (paths,))}
            assert got == {p for p in paths if matches(p, [glob])}, glob


def test_a_glob_of_too_many_brace_alternatives_is_refused_as_a_filter():
    import pytest

    from jobs.search.filters import FilterError, parse

    with pytest.raises(FilterError, match="path="):
        parse(["path=" + "{a,b}" * 10])
