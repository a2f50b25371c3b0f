import pytest
from pydantic import ValidationError

from jobs.config import JobConfig, apply_overrides, load_config
from jobs.errors import ConfigError
from tests.conftest import REPO


def test_shipped_configs_load():
    for name in ("local.yaml", "gpu.yaml"):
        cfg = load_config(REPO / "configs" / name)
        assert cfg.collection


def test_unknown_keys_are_rejected(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("chunking:\n  window_sentencez: 5\n")
    with pytest.raises(ConfigError, match="unknown key chunking.window_sentencez"):
        load_config(p)


def test_overlap_must_be_below_window():
    with pytest.raises(ValidationError, match="overlap_sentences"):
        JobConfig.model_validate({"chunking": {"window_sentences": 4, "overlap_sentences": 4}})


def test_collection_name_is_validated():
    with pytest.raises(ValidationError, match="collection name"):
        JobConfig(collection="Bad-Name")


def test_fingerprint_tracks_chunking_not_resources():
    base = JobConfig()
    assert base.fingerprint() == JobConfig.model_validate(
        {"embedding": {"resources": {"num_gpus": 1, "pool_size": 4}}}).fingerprint()
    assert base.fingerprint() != JobConfig.model_validate({"chunking": {"window_sentences": 50}}).fingerprint()
    assert base.fingerprint() != JobConfig.model_validate({"embedding": {"model": "other/model"}}).fingerprint()


def test_database_url_is_secret_and_overrides_apply(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:hunter2@db/x")
    cfg = apply_overrides(JobConfig(), collection="docs")
    assert cfg.collection == "docs"
    assert cfg.database.url.get_secret_value() == "postgresql://u:hunter2@db/x"
    assert "hunter2" not in repr(cfg)
    assert "hunter2" not in str(cfg.public_dict())
    flagged = apply_overrides(JobConfig(), database_url="postgresql://flag/x")
    assert flagged.database.url.get_secret_value() == "postgresql://flag/x"


def test_database_url_file_is_read_and_never_shown(tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    secret = tmp_path / "db-url"
    secret.write_text("postgresql://u:hunter2@db/x\n")
    monkeypatch.setenv("DATABASE_URL_FILE", str(secret))
    cfg = apply_overrides(JobConfig())
    assert cfg.database.url.get_secret_value() == "postgresql://u:hunter2@db/x"
    assert "hunter2" not in str(cfg.public_dict())
    # DATABASE_URL (and the flag) still win over the file.
    monkeypatch.setenv("DATABASE_URL", "postgresql://env/x")
    assert apply_overrides(JobConfig()).database.url.get_secret_value() == "postgresql://env/x"

    monkeypatch.delenv("DATABASE_URL")
    secret.write_text("hunter2 is not a URL")
    with pytest.raises(ValueError, match="does not hold a postgresql:// URL") as err:
        apply_overrides(JobConfig())
    assert "hunter2" not in str(err.value)
    monkeypatch.setenv("DATABASE_URL_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="cannot read the database URL file"):
        apply_overrides(JobConfig())


def test_baseline_differs_from_local_only_in_strategy():
    local = load_config(REPO / "configs" / "local.yaml").model_dump()
    naive = load_config(REPO / "configs" / "baseline-naive.yaml").model_dump()
    assert naive["chunking"].pop("strategy") == "naive" and local["chunking"].pop("strategy") == "structure"
    assert local == naive


def test_auto_pool_size_is_for_the_embedding_stage_only():
    assert JobConfig.model_validate({"embedding": {"resources": {"pool_size": "auto"}}}).embedding.resources.pool_size == "auto"
    with pytest.raises(ValidationError, match="only supported for embedding.resources"):
        JobConfig.model_validate({"ray": {"chunk": {"pool_size": "auto"}}})
    with pytest.raises(ValidationError, match="at least 1"):
        JobConfig.model_validate({"embedding": {"resources": {"pool_size": 0}}})
