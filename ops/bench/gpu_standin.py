"""A stand-in for `en_core_web_trf` 3.8, built here with random weights: no download, no registry.

en_core_web_trf 3.8 is a spacy-curated-transformers pipeline (its meta.json requires
`spacy-curated-transformers>=0.2.2,<1.0.0`): a `curated_transformer` component running RoBERTa-base
(`spacy-curated-transformers.RobertaTransformer.v1`, byte-level BPE pieces, strided spans of 144
pieces every 104) under a transition-based parser that listens to its last layer. That is the only
part a sentence split runs (jobs/markdown/sentences.py keeps transformer + parser), so this pipeline
has exactly those two components, the same architectures and, at `size="base"`, the same sizes:
its words/s is the real model's, give or take the weights' values, which cost nothing.

The byte-level BPE vocabulary is trained on the fixture corpus with `tokenizers` (RoBERTa's own
vocabulary does not ship offline); a piece count of a few thousand instead of 50,265 changes how
many pieces a word becomes (about 1.3–1.6 against RoBERTa's ~1.3), which is recorded with the
figures (`pieces_per_word`).

    pipeline_dir(path, size="tiny")  # a saved pipeline directory, loadable with spacy.load(path)
"""

from __future__ import annotations

import json
from pathlib import Path

from ops.bench import common

FIXTURES = common.REPO / "tests" / "data" / "corpus"
# What en_core_web_trf 3.8.0's meta.json declares; the pipeline saved here declares the same, so the
# plugin check (jobs/markdown/plugins.py) sees what it sees on the real one.
REQUIREMENT = "spacy-curated-transformers>=0.2.2,<1.0.0"
# RoBERTa-base (en_core_web_trf) and a tiny one for tests: (layers, width, heads, feed-forward width).
SIZES = {"base": (12, 768, 12, 3072), "tiny": (1, 32, 2, 64)}
_SPECIAL = ["<s>", "<pad>", "</s>", "<unk>"]  # RoBERTa's ids 0-3, what ByteBpeEncoder.v1 looks up


def bpe_files(directory: Path, vocab_size: int = 4000) -> tuple[Path, Path]:
    """vocab.json and merges.txt of a byte-level BPE trained on the fixture corpus (seconds)."""
    from tokenizers import ByteLevelBPETokenizer

    directory.mkdir(parents=True, exist_ok=True)
    vocab, merges = directory / "vocab.json", directory / "merges.txt"
    if not (vocab.exists() and merges.exists()):
        tok = ByteLevelBPETokenizer()
        tok.train([str(p) for p in sorted(FIXTURES.rglob("*.md"))], vocab_size=vocab_size, special_tokens=_SPECIAL,
                  show_progress=False)
        tok.save_model(str(directory))
    return vocab, merges


def config_text(vocab: Path, merges: Path, *, size: str = "base", window: int = 144, stride: int = 104,
                mixed_precision: bool = False) -> str:
    layers, width, heads, ff = SIZES[size]
    return f"""
[nlp]
lang = "en"
pipeline = ["transformer","parser"]
batch_size = 64

[components]

[components.transformer]
factory = "curated_transformer"
all_layer_outputs = false
frozen = false

[components.transformer.model]
@architectures = "spacy-curated-transformers.RobertaTransformer.v1"
vocab_size = 50265
hidden_width = {width}
intermediate_width = {ff}
num_attention_heads = {heads}
num_hidden_layers = {layers}
max_position_embeddings = 514
padding_idx = 1
type_vocab_size = 1
mixed_precision = {str(mixed_precision).lower()}
piece_encoder = {{"@architectures":"spacy-curated-transformers.ByteBpeEncoder.v1"}}

[components.transformer.model.with_spans]
@architectures = "spacy-curated-transformers.WithStridedSpans.v1"
window = {window}
stride = {stride}
batch_size = 384

[components.parser]
factory = "parser"

[components.parser.model]
@architectures = "spacy.TransitionBasedParser.v2"
state_type = "parser"
extra_state_tokens = false
hidden_width = 64
maxout_pieces = 2
use_upper = false

[components.parser.model.tok2vec]
@architectures = "spacy-curated-transformers.LastTransformerLayerListener.v1"
width = {width}
upstream = "transformer"
grad_factor = 1.0
pooling = {{"@layers":"reduce_mean.v1"}}

[initialize]

[initialize.components]

[initialize.components.transformer]

[initialize.components.transformer.piecer_loader]
@model_loaders = "spacy-curated-transformers.ByteBpeLoader.v1"
vocab_path = "{vocab}"
merges_path = "{merges}"
"""


def build(directory: Path, *, size: str = "base", mixed_precision: bool = False):
    """An initialized transformer + parser pipeline of en_core_web_trf 3.8's architecture (random weights)."""
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example

    vocab, merges = bpe_files(directory / "bpe")
    config = spacy.util.load_config_from_str(config_text(vocab, merges, size=size, mixed_precision=mixed_precision))
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    words = ["The", "server", "starts", ".", "It", "watches", "files", "."]
    example = Example.from_dict(Doc(nlp.vocab, words=words),
                                {"heads": [1, 1, 1, 1, 5, 5, 5, 5],
                                 "deps": ["det", "ROOT", "dep", "punct", "nsubj", "ROOT", "dobj", "punct"]})
    nlp.initialize(lambda: [example])
    nlp.meta.update(name="core_web_trf_standin", version="3.8.0", requirements=[REQUIREMENT])
    return nlp


def pipeline_dir(directory: Path, *, size: str = "base") -> Path:
    """A saved stand-in pipeline under `directory` (built once): what `sentences.model` can name."""
    target = directory / f"en_core_web_trf_standin_{size}"
    if not (target / "meta.json").exists():
        build(directory, size=size).to_disk(target)
        meta = json.loads((target / "meta.json").read_text(encoding="utf-8"))
        assert meta.get("requirements") == [REQUIREMENT], meta.get("requirements")
    return target
