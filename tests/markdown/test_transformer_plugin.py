"""A transformer sentence pipeline (en_core_web_trf) without spacy-transformers, which only the `gpu` extra
installs: one line naming the extra, from the driver's check and from a load, instead of spaCy's E002 on Ray."""

from __future__ import annotations

import json

import pytest
import spacy

from jobs.errors import MissingPackageError, UserError
from jobs.markdown import plugins
from jobs.markdown.sentences import check_sentence_pipeline, load_sentence_pipeline

E002 = ("[E002] Can't find factory for 'transformer' for language English (en). This usually happens when spaCy "
        "calls `nlp.create_pipe` with a custom component name that's not registered on the current language class.")


@pytest.fixture()
def trf_dir(tmp_path):
    """A pipeline directory as spaCy saves en_core_web_trf: its meta.json names the plugin it requires."""
    path = tmp_path / "trf"
    path.mkdir()
    (path / "meta.json").write_text(json.dumps({"lang": "en", "name": "core_web_trf",
                                                "requirements": ["spacy-transformers>=1.3.4,<1.4.0"]}))
    return path


@pytest.fixture()
def without_plugin(monkeypatch):
    monkeypatch.setattr(plugins, "_importable", lambda module: module != "spacy_transformers")


def _one_line_naming_the_extra(exc: BaseException) -> None:
    assert isinstance(exc, UserError) and "\n" not in str(exc)
    assert "needs spacy-transformers" in str(exc) and "pip install 'corpusmill[gpu]'" in str(exc)


def test_the_driver_names_the_extra_before_any_worker_loads_the_pipeline(trf_dir, without_plugin):
    with pytest.raises(MissingPackageError) as caught:
        check_sentence_pipeline(str(trf_dir))
    _one_line_naming_the_extra(caught.value)


def test_with_the_plugin_installed_the_check_passes(trf_dir):
    check_sentence_pipeline(str(trf_dir))  # spacy-transformers is in the dev extra


def test_a_load_that_lacks_the_plugins_factory_names_the_extra(trf_dir, without_plugin, monkeypatch):
    message = E002

    def load(name, *args, **kwargs):
        raise ValueError(message)

    monkeypatch.setattr(spacy, "load", load)
    with pytest.raises(MissingPackageError) as caught:
        load_sentence_pipeline(str(trf_dir))
    _one_line_naming_the_extra(caught.value)
    message = E002.replace("'transformer'", "'mine'")  # a factory no extra provides stays spaCy's own error
    with pytest.raises(ValueError, match="'mine'") as other:
        load_sentence_pipeline(str(trf_dir))
    assert not isinstance(other.value, UserError)
