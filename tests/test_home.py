"""jobs/home.py: one home for every command, whatever the working directory."""

import logging

from jobs import home as home_mod


def test_the_default_home_is_the_per_user_data_directory_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("CORPUSMILL_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # platformdirs' Linux convention
    seen = set()
    for folder in (tmp_path / "a", tmp_path / "b" / "c"):
        folder.mkdir(parents=True)
        monkeypatch.chdir(folder)
        seen.add(home_mod.home())
    assert seen == {tmp_path / "data" / "corpusmill"}
    assert home_mod.pgdata_dir() == tmp_path / "data" / "corpusmill" / "pg"


def test_corpusmill_home_wins_and_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CORPUSMILL_HOME", "here")
    assert home_mod.home() == tmp_path / "here"


def test_data_left_in_the_old_default_is_named_with_the_way_to_keep_it(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("CORPUSMILL_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "old" / ".corpusmill" / "pg").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "old")
    home_mod._tell_of_legacy.cache_clear()
    with caplog.at_level(logging.WARNING, logger="jobs.home"):
        home_mod.home()
    assert f"CORPUSMILL_HOME={tmp_path / 'old' / '.corpusmill'}" in caplog.text
