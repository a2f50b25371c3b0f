"""A misspelled or misplaced config key is named with its full path and the key it probably meant."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jobs import cli
from jobs.config import JobConfig, load_config
from jobs.config_keys import suggest
from jobs.errors import ConfigError


@pytest.mark.parametrize("loc, meant", [
    (("chunking", "max_tokenz"), ["chunking.max_tokens"]),
    (("colecton",), ["collection"]),
    (("embedding", "resources", "pool_sise"), ["embedding.resources.pool_size"]),  # a section inside a section
    (("database", "schma"), ["database.schema"]),  # the key as YAML spells it (an alias), not the attribute
    (("max_tokens",), ["chunking.max_tokens"]),  # the right key in the wrong section
    (("chunking", "model"), ["sentences.model", "embedding.model"]),
    (("database", "zzzz"), []),
])
def test_suggestions(loc, meant):
    assert suggest(JobConfig, loc) == meant


def test_load_config_names_the_file_the_key_and_the_likely_one(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("chunking:\n  max_tokenz: 300\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: unknown key chunking.max_tokenz (did you mean chunking.max_tokens?)"


def test_no_suggestion_when_nothing_is_close(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("ray:\n  qwerty: 1\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == f"{path}: unknown key ray.qwerty"


def test_value_errors_beside_an_unknown_key_are_kept_without_their_values(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("chunking:\n  max_tokens: -3\ndatabase:\n  url: postgresql://u:hunter2@db/x\n  ef_serch: 5\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "chunking.max_tokens: Input should be greater than or equal to 16" in message
    assert "unknown key database.ef_serch (did you mean database.ef_search?)" in message
    assert "hunter2" not in message


def test_value_errors_alone_stay_pydantic_errors(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("chunking:\n  max_tokens: -3\n")
    with pytest.raises(ValidationError):
        load_config(path)


def test_the_cli_prints_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CORPUSMILL_HOME", str(tmp_path / "home"))
    path = tmp_path / "x.yaml"
    path.write_text("chunking:\n  max_tokenz: 300\n")
    assert cli.main(["stats", "--config", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"corpusmill stats: error: {path}: unknown key chunking.max_tokenz (did you mean chunking.max_tokens?)")
